"""The reconciler as a process (`python -m mlgate_reconciler`): watches, the work queue, metrics, leader election
and graceful shutdown, against the real API server. The resync is set to an hour, so everything that happens
here within seconds was driven by watch events."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane, Process, free_port, wait_for
from e2e_objects import example, in_namespace, trainingjob
from reconciler_steps import names

pytestmark = pytest.mark.e2e
WAIT = 30.0
LEASE = ["--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.3"]


@dataclass
class Reconciler:
    process: Process
    port: int
    identity: str

    def scrape(self, path: str = "/metrics") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=3) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def metric(self, name: str) -> float:
        """The sum of every sample of `name` (0 when absent)."""
        _, text = self.scrape()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")


@pytest.fixture
def start(cluster: ControlPlane, tmp_path: Path) -> Iterator[Any]:
    started: list[Reconciler] = []

    def run(namespace: str, identity: str, *extra: str) -> Reconciler:
        port = free_port()
        args = [sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(cluster.kubeconfig),
                "--namespace", namespace, "--resync", "3600", "--metrics-address", f"127.0.0.1:{port}",
                "--identity", identity, *extra]
        process = Process(f"reconciler {identity}", args, tmp_path / f"{identity}.log",
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}).start()
        cluster.processes.append(process)
        reconciler = Reconciler(process, port, identity)
        started.append(reconciler)
        wait_for(f"{identity}'s /readyz", lambda: reconciler.scrape("/readyz")[0] == 200, WAIT,
                 alive=process.check_alive)
        return reconciler

    yield run
    for reconciler in started:
        reconciler.process.stop()
        cluster.processes.remove(reconciler.process)




def create_job(cluster: ControlPlane, namespace: str, name: str) -> None:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob(name), namespace)).check()


def pods_of(cluster: ControlPlane, namespace: str, job: str) -> list[str]:
    return [p for p in names(cluster, "pods", namespace) if p.startswith(f"{job}-")]


def lease_holder(cluster: ControlPlane, namespace: str) -> str:
    out = cluster.kubectl("get", "lease", "mlgate-reconciler", "-n", namespace, "-o",
                          "jsonpath={.spec.holderIdentity}")
    return out.stdout.strip() if out.ok else ""


def test_a_created_job_is_materialized_and_a_deleted_pod_comes_back_from_watch_events_alone(
        cluster: ControlPlane, namespace: str, start: Any):
    reconciler = start(namespace, "solo")
    create_job(cluster, namespace, "llm")
    expected = ["llm-master-0", "llm-worker-0"]
    wait_for("the job's pods", lambda: pods_of(cluster, namespace, "llm") == expected, WAIT)
    cluster.kubectl("delete", "pod", "llm-worker-0", "-n", namespace, "--wait=false").check()
    wait_for("the deleted pod to come back", lambda: cluster.kubectl(
        "get", "pod", "llm-worker-0", "-n", namespace, "-o", "jsonpath={.metadata.deletionTimestamp}").stdout == ""
        and pods_of(cluster, namespace, "llm") == expected, WAIT)
    assert reconciler.metric('mlgate_api_writes_total{kind="Pod",verb="create"}') >= 3


def test_an_inference_service_is_materialized_and_its_status_follows_its_deployment(
        cluster: ControlPlane, namespace: str, start: Any):
    start(namespace, "solo")
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(example("inferenceservice.yaml"), namespace)).check()
    wait_for("the predictor", lambda: "sentiment-predictor" in names(cluster, "deployments", namespace), WAIT)
    status = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    for deployment in ("sentiment-predictor", "sentiment-canary"):
        cluster.kubectl("patch", "deployment", deployment, "-n", namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": status})).check()

    def ready() -> bool:
        return cluster.get_object("inferenceservice", "sentiment", namespace).get("status", {}).get("phase") == "Ready"

    wait_for("the service to be Ready", ready, WAIT)


def test_metrics_report_passes_writes_the_queue_and_leadership(cluster: ControlPlane, namespace: str, start: Any):
    reconciler = start(namespace, "solo")
    create_job(cluster, namespace, "llm")
    wait_for("a reconcile pass", lambda: reconciler.metric("mlgate_reconcile_duration_seconds_count") > 0, WAIT)
    _, text = reconciler.scrape()
    for name in ("mlgate_workqueue_depth", "mlgate_reconcile_errors_total", "mlgate_leader 1.0",
                 'mlgate_api_writes_total{kind="Service",verb="create"} 1.0'):
        assert name in text


def test_two_reconcilers_elect_one_leader_and_the_follower_takes_over_when_it_dies(
        cluster: ControlPlane, namespace: str, start: Any):
    first = start(namespace, "first", "--leader-elect", "--lease-namespace", namespace, *LEASE)
    wait_for("a lease holder", lambda: lease_holder(cluster, namespace) == "first", WAIT)
    second = start(namespace, "second", "--leader-elect", "--lease-namespace", namespace, *LEASE)
    create_job(cluster, namespace, "one")
    wait_for("the leader to materialize a job", lambda: len(pods_of(cluster, namespace, "one")) == 2, WAIT)
    assert (first.metric("mlgate_leader"), second.metric("mlgate_leader")) == (1.0, 0.0)
    assert second.metric("mlgate_api_writes_total") == 0  # the follower never writes
    assert first.process.popen is not None
    os.kill(first.process.popen.pid, signal.SIGKILL)  # no release: the follower must wait for expiry
    wait_for("the follower to take the lease", lambda: lease_holder(cluster, namespace) == "second", WAIT)
    create_job(cluster, namespace, "two")
    wait_for("the new leader to materialize a job", lambda: len(pods_of(cluster, namespace, "two")) == 2, WAIT)
    lease = cluster.get_object("lease", "mlgate-reconciler", namespace)
    assert lease["spec"]["leaseTransitions"] == 1


def test_sigterm_stops_the_leader_gracefully_and_releases_the_lease_at_once(
        cluster: ControlPlane, namespace: str, start: Any):
    slow = ["--lease-duration", "60", "--renew-deadline", "20", "--retry-period", "0.3"]  # expiry would take 60 s
    first = start(namespace, "first", "--leader-elect", "--lease-namespace", namespace, *slow)
    wait_for("a lease holder", lambda: lease_holder(cluster, namespace) == "first", WAIT)
    start(namespace, "second", "--leader-elect", "--lease-namespace", namespace, *slow)
    popen = first.process.popen
    assert popen is not None
    os.kill(popen.pid, signal.SIGTERM)
    assert popen.wait(15) == 0
    wait_for("the follower to take the released lease", lambda: lease_holder(cluster, namespace) == "second", 10.0)
    create_job(cluster, namespace, "after")
    wait_for("the new leader to materialize a job", lambda: len(pods_of(cluster, namespace, "after")) == 2, WAIT)
