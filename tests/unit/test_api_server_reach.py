"""Cannot reach the API server: what counts as that (mlgate/kube/reach.py), the backoff every long-running loop waits
by, and readiness that names the server. The unreachable server is real: a loopback port nothing listens on."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import urllib3

from mlgate.kube.reach import Backoff, Reachability, cannot_reach, describe, unreachable
from mlgate.kube.rest import ApiError, kube_rest
from mlgate.kube.watch import Reflector
from mlgate_audit.runner import Audit, Options
from mlgate_reconciler.client import KubeClient, kube_transport
from mlgate_reconciler.leader import LeaderElector
from mlgate_reconciler.metrics import serve_metrics


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server() -> str:
    return f"https://127.0.0.1:{closed_port()}"


@pytest.fixture
def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}), encoding="utf-8")
    return str(path)


def refused(server: str) -> BaseException:
    """What the Kubernetes client raises for a refused connection, after urllib3's retries."""
    with pytest.raises(urllib3.exceptions.MaxRetryError) as caught:
        urllib3.PoolManager(retries=urllib3.Retry(total=1)).request("GET", f"{server}/api")
    return caught.value


@pytest.mark.parametrize("exc", [
    ConnectionRefusedError(111, "Connection refused"), ConnectionResetError(), TimeoutError(),
    socket.gaierror(-2, "Name or service not known"), ssl.SSLError("handshake"), http.client.RemoteDisconnected(),
    urllib3.exceptions.ProtocolError("Connection broken"), urllib3.exceptions.ReadTimeoutError(None, "/", "timed out"),
], ids=type)
def test_no_http_answer_is_cannot_reach(exc):
    assert unreachable(exc)


@pytest.mark.parametrize("exc", [ApiError(500, "etcdserver: request timed out"), ApiError(403, "forbidden"),
                                 ValueError("bad JSON"), FileNotFoundError("kubeconfig"), KeyError("metadata")],
                         ids=repr)
def test_an_answer_of_any_status_or_a_bug_is_not_cannot_reach(exc):
    assert not unreachable(exc)


def test_a_refused_connection_is_one_line_naming_the_innermost_cause_and_the_server(server):
    exc = refused(server)
    assert unreachable(exc)
    line = cannot_reach(server, exc)
    assert line.startswith(f"{server}: cannot reach the API server: NewConnectionError: "), line
    assert "Connection refused" in line and "Max retries" not in line and "\n" not in line
    assert "object at 0x" not in describe(exc)


def test_backoff_doubles_from_its_first_wait_up_to_its_cap_and_starts_again_after_a_success():
    backoff = Backoff(initial=0.8, cap=30.0, jitter=0.0)
    assert [backoff.next() for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    backoff.reset()
    assert backoff.next() == 0.8


def test_backoff_jitter_stretches_a_wait_by_at_most_its_fraction():
    assert Backoff(initial=2.0, jitter=1.0, random=lambda: 0.999).next() == pytest.approx(3.998)
    assert Backoff(initial=2.0, jitter=1.0, random=lambda: 0.0).next() == 2.0


def test_reachability_names_the_server_until_an_answer_of_any_status_comes(server):
    reach = Reachability(server, clock=iter([10.0, 13.5]).__next__)
    assert reach.problem is None and reach.status() == {"reachable": True}
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        reach.observe(lambda: (_ for _ in ()).throw(refused(server)))
    assert reach.problem is not None and reach.problem.startswith(f"cannot reach the API server {server}: ")
    status = reach.status()
    assert status["reachable"] is False and status["unreachableSeconds"] == 3.5
    assert status["lastError"] == reach.problem

    def not_found() -> None:
        raise ApiError(404, "not found")

    with pytest.raises(ApiError):
        reach.observe(not_found)
    assert reach.problem is None


def test_a_request_through_the_shared_clients_to_a_closed_port_records_the_server_as_unreachable(kubeconfig,
                                                                                                  server):
    reach = Reachability(server)
    rest = kube_rest(kubeconfig, False, reach=reach)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        rest("GET", "/api/v1/namespaces/default")
    assert reach.problem is not None and server in reach.problem
    reach.answered()
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        kube_transport(kubeconfig, reach=reach)("GET", "/api", {}, None, "application/json")
    assert reach.problem is not None


class CountedStop(threading.Event):
    """A stop event that records each wait and is set after `waits` of them."""

    def __init__(self, waits: int):
        super().__init__()
        self.waits: list[float] = []
        self.limit = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


def test_a_reflector_lists_again_with_growing_waits_while_the_api_server_does_not_answer():
    stop = CountedStop(4)

    def get(path: str, query: dict[str, str], timeout: float) -> http.client.HTTPResponse:
        raise ConnectionRefusedError(111, "Connection refused")

    Reflector("Namespace", "/api/v1/namespaces", get, lambda *_: None, lambda *_: None, stop,
              backoff=Backoff(jitter=0.0)).run()
    assert stop.waits == [0.8, 1.6, 3.2, 6.4]


def test_a_follower_that_cannot_reach_the_api_server_waits_longer_up_to_the_lease_duration(kubeconfig):
    stop = CountedStop(5)
    elector = LeaderElector(KubeClient(kube_transport(kubeconfig)), "mlgate-system", "mlgate-audit", "me",
                            lease_duration=15.0, retry_period=2.0)
    assert elector.acquire(stop) is False
    assert stop.waits[0] >= 2.0 and stop.waits[-1] <= 30.0  # jitter up to 100% of the 15 s cap
    assert stop.waits[3] > 2.0 * 2 and len(stop.waits) == 5


def test_the_audit_does_not_lead_before_it_has_read_the_stored_reports_and_says_why_it_is_not_ready(kubeconfig,
                                                                                                    server):
    audit = Audit(Options(kubeconfig=kubeconfig))
    assert audit.seed_written() is False
    stop = CountedStop(2)
    audit.stop = stop
    audit.lead()  # without --leader-elect: tries again after a backoff, until stopped
    assert not audit.leading.is_set() and len(stop.waits) == 2 and stop.waits[0] >= 0.8
    assert audit.not_ready() == audit.reach.problem
    assert audit.reach.problem is not None and audit.reach.problem.startswith(
        f"cannot reach the API server {server}: NewConnectionError: ")


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readyz_answers_503_with_the_reason_and_200_once_there_is_none():
    why: list[str | None] = ["cannot reach the API server https://127.0.0.1:1: NewConnectionError: refused"]
    server = serve_metrics(lambda: b"# metrics\n", "127.0.0.1", 0, lambda: why[0])
    try:
        port = server.server_port
        assert probe(port, "/readyz") == (503, f"{why[0]}\n")
        assert probe(port, "/healthz") == (200, "ok\n")
        why[0] = None
        assert probe(port, "/readyz") == (200, "ok\n")
        assert probe(port, "/metrics") == (200, "# metrics\n")
    finally:
        server.shutdown()


def test_the_webhook_names_the_unreachable_api_server_until_its_watches_have_listed_then_only_shows_it(server):
    from mlgate_webhook.facts_cache import KINDS, WatchedFacts
    from mlgate_webhook.metrics import Metrics
    from mlgate_webhook.policy_store import DirectorySource, PolicyStore
    from mlgate_webhook.service import Service

    reach = Reachability(server)
    reach.failed(refused(server))
    metrics = Metrics()
    store = PolicyStore([DirectorySource([str(Path(__file__).resolve().parents[2] / "policies")])], metrics)
    store.refresh()
    facts = WatchedFacts()
    ready, detail = Service(store, metrics, facts, reach=reach).readiness()
    assert not ready and detail["missing"][-2:] == ["cluster facts not synced", reach.problem]
    for kind in KINDS:
        facts.replace(kind, [])
    _, detail = Service(store, metrics, facts, reach=reach).readiness()
    assert detail["missing"] == ["TLS not ready"]  # a blip after the lists does not empty the Service's endpoints
    assert detail["apiServer"]["reachable"] is False and detail["apiServer"]["lastError"] == reach.problem


def test_the_shipped_audit_deployment_probes_the_readyz_and_healthz_its_metrics_port_serves():
    import yaml

    deployment = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/audit/deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    port = next(p for p in container["ports"] if p["name"] == "metrics")["containerPort"]
    assert f"--metrics-port={port}" in container["args"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_reports_the_api_server_did_not_take_are_built_again_next_round(kubeconfig):
    from mlgate.loading.policies import load_policy_paths
    from mlgate_audit.state import AuditState

    audit = Audit(Options(kubeconfig=kubeconfig))
    audit.state = AuditState(load_policy_paths([Path(__file__).resolve().parents[2] / "policies"]).kinds)
    report = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"namespace": "team-a", "name": "mlgate"}}
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        audit._write_reports([report], [("team-b", "mlgate")])
    assert audit.state.dirty_namespaces == {"team-a", "team-b"}
    assert audit.metrics.write_errors._value.get() == 1
