"""The documented install produces what the walkthrough in docs/cluster.md reads: `kubectl apply -k manifests/` on a
control plane of its own without any CRD (as a fresh cluster), then the audit started from the test with the
arguments of manifests/audit/deployment.yaml, as its ServiceAccount (a token kubeconfig stands in for
--in-cluster, so the shipped RBAC is what is tested). A 12-GPU Job stored in team-a (no webhook runs, so it is
admitted) ends up as a `fail` in `kubectl get policyreport mlgate -n team-a`, the walkthrough's last command."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane, Process, free_port, started_plane, wait_for
from e2e_audit import AuditProcess
from e2e_webhook import eventually
from test_e2e_cluster_cli import batch_job

pytestmark = pytest.mark.e2e
NAMESPACE = "mlgate-system"
TEAM = "team-a"
SETTLE = 90.0  # seconds the audit may take to list, judge and write, on 2 busy cores


class FreshPlane(ControlPlane):
    """No CRDs: the install must bring mlgate's and the PolicyReport ones."""

    def install_crds(self) -> None:
        return None


def audit_args(kubeconfig: Path, metrics_port: int) -> list[str]:
    """The audit Deployment's arguments, each mapped to this machine (an argument not mapped fails the test)."""
    deployment = yaml.safe_load((REPO / "manifests" / "audit" / "deployment.yaml").read_text(encoding="utf-8"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["mlgate", "audit"]
    mapped = {"--in-cluster": f"--kubeconfig={kubeconfig}", "--metrics-port=8080": f"--metrics-port={metrics_port}",
              # the ConfigMap mlgate-policies is policies/ (tests/webhook/test_webhook_manifests.py keeps it so)
              "--policies=/etc/mlgate/policies": f"--policies={REPO / 'policies'}"}
    kept = ("--leader-elect", "--lease-namespace=", "--resync=", "--write-", "--event-")
    unknown = [a for a in container["args"] if a not in mapped and not a.startswith(kept)]
    assert not unknown, f"manifests/audit/deployment.yaml has arguments this test does not map: {unknown}"
    return [mapped.get(a, a) for a in container["args"]]


def token_kubeconfig(cluster: ControlPlane, account: str, path: Path) -> Path:
    token = cluster.kubectl("create", "token", account, "-n", NAMESPACE, "--duration=1h").check().stdout
    assert cluster.pki is not None
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
              "clusters": [{"name": "e2e", "cluster": {"server": cluster.server,
                                                       "certificate-authority": str(cluster.pki.ca_cert)}}],
              "users": [{"name": "sa", "user": {"token": token.strip()}}],
              "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cluster = started_plane(tmp_path_factory.mktemp("install-plane"), FreshPlane)
    try:
        yield cluster
    finally:
        cluster.stop()


def policy_report(cluster: ControlPlane, namespace: str) -> dict[str, Any] | None:
    got = cluster.kubectl("get", "policyreport", "mlgate", "-n", namespace, "-o", "json")
    return json.loads(got.stdout) if got.ok else None  # type: ignore[no-any-return]


def test_kubectl_apply_k_manifests_installs_the_audit_and_the_policyreport_crds(installed: ControlPlane) -> None:
    installed.kubectl("apply", "-k", str(REPO / "manifests")).check()
    installed.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/policyreports.wgpolicyk8s.io", "crd/trainingjobs.mlgate.dev", timeout=70).check()
    deployment = installed.get_object("deployment", "mlgate-audit", NAMESPACE)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "mlgate-audit"
    installed.kubectl("get", "clusterrolebinding", "mlgate-audit").check()


def test_the_installed_audit_writes_the_policyreport_the_readme_reads(installed: ControlPlane,
                                                                      tmp_path: Path) -> None:
    kubeconfig = token_kubeconfig(installed, "mlgate-audit", tmp_path / "audit-kubeconfig")
    port = free_port()
    audit = Process("mlgate audit (as installed)", [sys.executable, "-m", "mlgate_audit",
                                                     *audit_args(kubeconfig, port), "--resync=5"],
                    tmp_path / "audit.log", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    installed.processes.append(audit)
    audit.start()
    probe = AuditProcess(installed, tmp_path, port=port)
    wait_for("the audit's metrics", lambda: probe.scrape() is not None, 30, alive=audit.check_alive)

    installed.kubectl("create", "namespace", TEAM).check()
    installed.kubectl("create", "-n", TEAM, "-f", "-", stdin=[batch_job("bench", 12), batch_job("small", 1)]).check()

    def failed() -> list[str] | None:
        report = policy_report(installed, TEAM)
        failing = sorted({f"{ref['name']} {r['policy']}/{r['rule']}" for r in (report or {}).get("results") or []
                          if r["result"] == "fail" for ref in r["resources"]})
        return failing or None

    failing = eventually(f"kubectl get policyreport mlgate -n {TEAM} to show a fail", failed, SETTLE, interval=2)
    assert "bench gpu/gpu.max" in failing, failing
    assert not [f for f in failing if f.startswith("small ")], failing
    audit.stop()
    assert "Traceback" not in audit.log.read_text(encoding="utf-8", errors="replace")
