"""`mlgate serve --self-managed` on a real API server, installed as the shipped manifests install it.

A control plane of its own (the session's has the harness's `mlgate` configurations registered by URL):
`kubectl apply -k manifests/` (nothing runs: no kubelet), then the webhook process started from the test with the
Deployment's own arguments, as its ServiceAccount (a token kubeconfig stands in for --in-cluster, so the shipped
RBAC is what is tested), and with `--webhook-url` since the API server here has no cluster DNS for the Service.
The tests run in order: install, unready, ready, CA rollover under load, uninstall.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane, Process, Result, free_port, started_plane, wait_for
from cryptography import x509
from e2e_objects import MLGATE, example, pytorchjob
from e2e_webhook import eventually

pytestmark = pytest.mark.e2e
NAMESPACE = "mlgate-system"
TEAM = "team-a"
CONFIG_KINDS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
PRIVILEGED_DENIAL = "[pod-security/pod-security.baseline] privileged"


@dataclass
class Install:
    cluster: ControlPlane
    directory: Path
    policies: Path
    port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        """The Deployment's arguments, each one mapped to this machine (an argument it does not know fails)."""
        deployment = yaml.safe_load((REPO / "manifests" / "deployment.yaml").read_text(encoding="utf-8"))
        (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"]
        mapped = {"--host=0.0.0.0": ["--host=127.0.0.1"], "--port=8443": [f"--port={self.port}"],
                  "--metrics-port=8080": [], "--policies=/etc/mlgate/policies": [f"--policies={self.policies}"],
                  # the ConfigMap kustomize makes of webhooks.yaml
                  "--webhooks-file=/etc/mlgate/webhooks/webhooks.yaml": [
                      f"--webhooks-file={REPO / 'manifests' / 'webhooks.yaml'}"],
                  "--in-cluster": [f"--kubeconfig={self.directory / 'sa-kubeconfig'}"],
                  "--self-managed": ["--self-managed", f"--webhook-url={self.url}"],
                  "--log-level=info": ["--log-level=info"]}
        unknown = [a for a in container["args"] if a not in mapped]
        assert not unknown, f"manifests/deployment.yaml has arguments this test does not map: {unknown}"
        assert {e["name"] for e in container["env"]} == {"POD_NAMESPACE", "POD_NAME"}
        return [a for arg in container["args"] for a in mapped[arg]]

    def start(self) -> None:
        args = [sys.executable, "-m", "mlgate_webhook", "serve", *self.args(),
                f"--state-dir={self.directory / 'state'}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POD_NAMESPACE": NAMESPACE, "POD_NAME": "mlgate-webhook-0"}
        self.process = Process("mlgate webhook (self-managed)", args, self.directory / "webhook.log", env=env)
        self.cluster.processes.append(self.process)
        self.process.start()

    def readyz(self) -> int:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # readiness only; trust is tested apart
        try:
            import urllib.request

            with urllib.request.urlopen(self.url + "/readyz", context=context, timeout=3) as response:
                return int(response.status)
        except OSError as exc:
            return int(getattr(exc, "code", 0) or 0)

    def serves_a_certificate_from(self, ca_pem: bytes) -> bool:
        """A TLS handshake that trusts `ca_pem` only."""
        context = ssl.create_default_context(cadata=ca_pem.decode())
        try:
            with ssl.create_connection(("127.0.0.1", self.port), timeout=3) as sock, \
                    context.wrap_socket(sock, server_hostname="127.0.0.1"):
                return True
        except (OSError, ssl.SSLError):
            return False


def service_account_kubeconfig(cluster: ControlPlane, path: Path) -> None:
    token = cluster.kubectl("create", "token", "mlgate-webhook", "-n", NAMESPACE, "--duration=2h").check().stdout
    assert cluster.pki is not None
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
              "clusters": [{"name": "e2e", "cluster": {"server": cluster.server,
                                                       "certificate-authority": str(cluster.pki.ca_cert)}}],
              "users": [{"name": "sa", "user": {"token": token.strip()}}],
              "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    cluster = started_plane(tmp_path_factory.mktemp("self-managed-plane"))
    directory = tmp_path_factory.mktemp("self-managed")
    policies = directory / "policies"
    policies.mkdir()  # empty: the webhook starts unready, as a Pod whose policies are not loaded yet
    installed = Install(cluster, directory, policies)
    try:
        yield installed
    finally:
        cluster.stop()


def stored(cluster: ControlPlane, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    result = cluster.kubectl("get", kind, name, "-o", "json", *(["-n", namespace] if namespace else []))
    return json.loads(result.stdout) if result.ok else None


def dry_run(cluster: ControlPlane, obj: dict[str, Any], *args: str) -> Result:
    return cluster.kubectl("create", "--dry-run=server", "-n", TEAM, *args, "-f", "-", stdin=obj)


def test_the_shipped_install_registers_no_webhook_before_mlgate_runs(install: Install) -> None:
    cluster = install.cluster
    cluster.kubectl("apply", "-k", str(REPO / "manifests")).check()  # the documented install (README, docs/webhook.md)
    cluster.kubectl("create", "namespace", TEAM).check()
    service_account_kubeconfig(cluster, install.directory / "sa-kubeconfig")
    for kind in CONFIG_KINDS:
        assert stored(cluster, kind, "mlgate") is None
    dry_run(cluster, example("pytorchjob-privileged.yaml")).check()  # nothing guards yet, nothing is locked out


def test_until_a_replica_is_ready_the_configurations_fail_open_and_ml_jobs_are_admitted(install: Install) -> None:
    cluster = install.cluster
    install.start()
    config = eventually("the webhook to register its validating configuration",
                        lambda: stored(cluster, "validatingwebhookconfiguration", "mlgate"), 60)
    assert install.process is not None
    wait_for("the webhook to listen", lambda: install.readyz() != 0, 30, alive=install.process.check_alive)
    assert install.readyz() == 503  # no policy set loaded
    assert config["metadata"]["annotations"]["mlgate.dev/enforcing"] == "false"
    assert {h["failurePolicy"] for h in config["webhooks"]} == {"Ignore"}
    assert {h["clientConfig"]["url"].rsplit("/", 1)[0] for h in config["webhooks"]} == {install.url}
    time.sleep(2)  # the API server loads configurations asynchronously: let it call the unready webhook
    dry_run(cluster, example("pytorchjob-privileged.yaml")).check()
    secret = stored(cluster, "secret", "mlgate-webhook-certs", NAMESPACE)
    assert secret is not None
    lease = stored(cluster, "lease", "mlgate-webhook", NAMESPACE)
    assert lease is not None
    owners = [o["metadata"]["ownerReferences"] for o in (config, secret, lease)]
    assert all([(o["kind"], o["name"]) for o in refs] == [("ClusterRole", "mlgate-webhook")] for refs in owners)


def test_once_ready_the_shipped_failure_policies_are_on_and_a_privileged_pytorchjob_is_refused(
        install: Install) -> None:
    cluster = install.cluster
    for policy in (REPO / "policies").glob("*.yaml"):
        shutil.copy(policy, install.policies / policy.name)
    assert install.process is not None
    wait_for("the webhook to be ready", lambda: install.readyz() == 200, 30, alive=install.process.check_alive)
    config = eventually("the configurations to enforce", lambda: _enforcing(cluster), 30)
    policies = {h["name"]: h["failurePolicy"] for h in config["webhooks"]}
    assert policies["ml-jobs.validate.mlgate.dev"] == "Fail" and policies["runtimes.validate.mlgate.dev"] == "Ignore"
    refused = eventually("a privileged PyTorchJob to be refused",
                         lambda: _refused(dry_run(cluster, example("pytorchjob-privileged.yaml"))), 30)
    assert "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/securityContext/privileged" in refused.stderr


def test_a_forced_ca_rollover_under_continuous_requests_loses_none(install: Install) -> None:
    cluster = install.cluster
    before = _secret_data(cluster)
    results: list[tuple[bool, str]] = []
    stop = threading.Event()

    def load() -> None:  # each request is validated (Fail) and mutated: both must answer over TLS
        job = pytorchjob("steady", {"nvidia.com/gpu": 1})
        while not stop.is_set():
            result = dry_run(cluster, job, "-o", "json")
            results.append((result.ok and _defaulted(result), str(result)))

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        time.sleep(2)
        subprocess.run([*MLGATE, "webhook", "rotate-ca", "--kubeconfig", str(cluster.kubeconfig)], check=True,
                       capture_output=True)
        after = eventually("the new CA to sign the serving certificate",
                           lambda: _rotated(cluster, before["ca.crt"]), 60)
        wait_for("the webhook to serve a certificate of the new CA",
                 lambda: install.serves_a_certificate_from(after["ca.crt"]), 20)
        time.sleep(3)
    finally:
        stop.set()
        thread.join(timeout=60)
    lost = [text for ok, text in results if not ok]
    assert len(results) >= 20 and not lost, f"{len(lost)} of {len(results)} requests failed:\n{lost[:3]}"
    bundle = x509.load_pem_x509_certificates(after["ca-bundle.crt"])
    old_ca, new_ca = (x509.load_pem_x509_certificate(pem) for pem in (before["ca.crt"], after["ca.crt"]))
    assert old_ca in bundle and new_ca in bundle  # the old CA stays trusted until it expires
    config = stored(cluster, "validatingwebhookconfiguration", "mlgate")
    assert config is not None
    assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in config["webhooks"]} == {after["ca-bundle.crt"]}
    print(f"CA rollover: {len(results)} requests, 0 failed")


def test_uninstall_leaves_nothing_behind(install: Install) -> None:
    cluster = install.cluster
    assert install.process is not None
    install.process.stop()  # as `kubectl delete -k` stops the Pods first
    done = subprocess.run([*MLGATE, "webhook", "uninstall", "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mutatingwebhookconfigurations/mlgate: deleted", "validatingwebhookconfigurations/mlgate: deleted",
        "secrets/mlgate-webhook-certs: deleted", "leases/mlgate-webhook: deleted"]
    for kind, namespace in (*((k, None) for k in CONFIG_KINDS), ("secret", NAMESPACE), ("lease", NAMESPACE)):
        listed = cluster.kubectl("get", kind, "-o", "name", *(["-n", namespace] if namespace else [])).check()
        assert "mlgate-webhook-certs" not in listed.stdout and "/mlgate\n" not in listed.stdout + "\n", listed
    assert stored(cluster, "lease", "mlgate-webhook", NAMESPACE) is None
    dry_run(cluster, example("pytorchjob-privileged.yaml")).check()  # nothing left to lock anyone out
    again = subprocess.run([*MLGATE, "webhook", "uninstall", "--kubeconfig", str(cluster.kubeconfig)],
                           capture_output=True, text=True, check=False)
    assert again.returncode == 0 and again.stdout.count("not found") == 4, again


def _enforcing(cluster: ControlPlane) -> dict[str, Any] | None:
    config = stored(cluster, "validatingwebhookconfiguration", "mlgate")
    return config if config and config["metadata"]["annotations"]["mlgate.dev/enforcing"] == "true" else None


def _refused(result: Result) -> Result | None:
    return result if result.code == 1 and PRIVILEGED_DENIAL in result.stderr else None


def _defaulted(result: Result) -> bool:
    spec = json.loads(result.stdout)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return bool((spec["containers"][0].get("resources") or {}).get("requests"))


def _secret_data(cluster: ControlPlane) -> dict[str, bytes]:
    secret = stored(cluster, "secret", "mlgate-webhook-certs", NAMESPACE)
    assert secret is not None
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _rotated(cluster: ControlPlane, old_ca: bytes) -> dict[str, bytes] | None:
    data = _secret_data(cluster)
    return data if data["ca.crt"] != old_ca and "next-ca.crt" not in data else None

