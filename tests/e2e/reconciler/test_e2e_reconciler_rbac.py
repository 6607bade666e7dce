"""The reconciler runs as its own ServiceAccount with exactly the RBAC in manifests/reconciler/, against the real
API server (RBAC authorization on): everything it does is allowed, and nothing more is."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane, Process, wait_for
from e2e_objects import OUT_OF_WEBHOOK, example, in_namespace, trainingjob

pytestmark = pytest.mark.e2e
RECONCILER = REPO / "manifests" / "reconciler"
ACCOUNT = "system:serviceaccount:mlgate-system:mlgate-reconciler"
WAIT = 30.0


@pytest.fixture(scope="module")
def token_kubeconfig(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not cluster.kubectl("get", "namespace", "mlgate-system").ok:
        cluster.kubectl("create", "namespace", "mlgate-system").check()
    for name in ("serviceaccount.yaml", "rbac.yaml"):
        cluster.kubectl("apply", "-f", str(RECONCILER / name)).check()
    token = cluster.kubectl("create", "token", "mlgate-reconciler", "-n", "mlgate-system").check().stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    admin["users"] = [{"name": "admin", "user": {"token": token}}]  # same cluster and context, the account's token
    path = tmp_path_factory.mktemp("reconciler-account") / "kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    return path


def can(cluster: ControlPlane, verb: str, resource: str, namespace: str = "default") -> bool:
    resource, _, subresource = resource.partition("/")
    extra = [f"--subresource={subresource}"] if subresource else []
    out = cluster.kubectl("auth", "can-i", verb, resource, *extra, "-n", namespace, "--as", ACCOUNT)
    return out.stdout.strip() == "yes"


def test_the_account_may_do_what_the_reconciler_does_and_nothing_more(cluster: ControlPlane,
                                                                       token_kubeconfig: Path):
    for verb, resource in (("create", "pods"), ("patch", "services"), ("delete", "deployments.apps"),
                           ("update", "trainingjobs.mlgate.dev/status"), ("watch", "inferenceservices.mlgate.dev"),
                           ("create", "events")):
        assert can(cluster, verb, resource), (verb, resource)
    assert can(cluster, "get", "secrets")  # an MPI job's SSH Secret, by name: never listed or watched
    for verb, resource in (("list", "secrets"), ("watch", "secrets"), ("update", "pods"),
                           ("patch", "trainingjobs.mlgate.dev/status"), ("create", "trainingjobs.mlgate.dev"),
                           ("list", "nodes"), ("delete", "namespaces"), ("create", "leases.coordination.k8s.io")):
        assert not can(cluster, verb, resource), (verb, resource)
    assert can(cluster, "create", "leases.coordination.k8s.io", "mlgate-system")


def test_the_leader_elected_reconciler_materializes_and_finalizes_with_only_its_rbac(
        cluster: ControlPlane, make_namespace: Any, token_kubeconfig: Path, tmp_path: Path):
    namespace = make_namespace(OUT_OF_WEBHOOK)
    log = tmp_path / "reconciler.log"
    process = Process("reconciler (service account)", [
        sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(token_kubeconfig), "--namespace", namespace,
        "--leader-elect", "--lease-namespace", "mlgate-system", "--identity", "rbac-test",
        "--metrics-address", "", "--retry-period", "0.3"], log, env={**os.environ, "PYTHONUNBUFFERED": "1"}).start()
    cluster.processes.append(process)
    try:
        cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob("llm"), namespace)).check()
        cluster.kubectl("create", "-f", "-", stdin=in_namespace(example("inferenceservice.yaml"), namespace)).check()

        def phase(kind: str, name: str) -> str:
            return str(cluster.get_object(kind, name, namespace).get("status", {}).get("phase"))

        wait_for("the job's status", lambda: phase("trainingjob", "llm") == "Created", WAIT, alive=process.check_alive)
        wait_for("the service's status", lambda: phase("inferenceservice", "sentiment") == "Pending", WAIT)
        cluster.kubectl("delete", "trainingjob", "llm", "-n", namespace, "--wait=false").check()
        wait_for("the job to be finalized", lambda: not cluster.kubectl(
            "get", "trainingjob", "llm", "-n", namespace).ok, WAIT, alive=process.check_alive)
        text = log.read_text()
        said = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", "", text, flags=re.M)  # a time's ",403" is no 403
        assert "forbidden" not in said.lower() and not re.search(r"\b403\b", said), text[-3000:]
    finally:
        process.stop()
        cluster.processes.remove(process)
