"""MPI TrainingJobs against the real API server: the launcher is a batch Job created once every worker is Ready,
and the workers' sshd can run under the securityContext they are stored with. There is no kubelet: the tests
set the workers' Ready condition through the status subresource, as a kubelet would."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from control_plane import ControlPlane, wait_for
from e2e_objects import in_namespace, trainingjob
from e2e_webhook import WebhookProcess
from reconciler_steps import names, reconcile

from mlgate.engine import PolicySet
from mlgate_reconciler.client import Transport
from mlgate_reconciler.mpi import sshd_blockers

pytestmark = pytest.mark.e2e
WAIT = 20.0
WORKERS = ["llm-worker-0", "llm-worker-1"]


def create_job(cluster: ControlPlane, namespace: str, **spec: Any) -> None:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob("llm", **spec), namespace)).check()


def set_ready(cluster: ControlPlane, namespace: str, pod: str, ready: bool) -> None:
    """What a kubelet would report once the container runs and its probes pass."""
    value = "True" if ready else "False"
    body = json.dumps({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": value}]}})
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", body).check()


def launcher_env(job: dict[str, Any]) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_the_launcher_job_waits_for_every_worker_to_be_ready_then_retries_on_failure(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, framework="mpi", replicas=2, runPolicy={"backoffLimit": 5},
               scheduling={"scheduler": "volcano", "gang": True})
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.created == ["PodGroup/llm", "ConfigMap/llm-config", "Secret/llm-ssh", "Service/llm",
                               "Pod/llm-worker-0", "Pod/llm-worker-1"]
    # the group counts the workers only: the launcher joins once they run
    assert cluster.get_object("podgroups.scheduling.volcano.sh", "llm", namespace)["spec"]["minMember"] == 2
    set_ready(cluster, namespace, "llm-worker-0", True)
    set_ready(cluster, namespace, "llm-worker-1", False)
    assert reconcile(transport, policies, namespace)[0].created == []
    assert names(cluster, "jobs.batch", namespace) == []
    set_ready(cluster, namespace, "llm-worker-1", True)
    assert reconcile(transport, policies, namespace)[0].created == ["Job/llm-launcher-0"]
    launcher = cluster.get_object("jobs.batch", "llm-launcher-0", namespace)
    assert launcher["spec"]["backoffLimit"] == 5
    assert launcher["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert launcher["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert launcher_env(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    hostfile = cluster.get_object("configmap", "llm-config", namespace)["data"]["hostfile"]
    assert hostfile.splitlines() == [f"llm-worker-{i}.llm.{namespace}.svc slots=1" for i in range(2)]
    # a worker that stops being Ready does not take the launcher away; a pass after that writes nothing
    set_ready(cluster, namespace, "llm-worker-0", False)
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}
    assert names(cluster, "jobs.batch", namespace) == ["llm-launcher-0"]


def test_the_job_succeeds_when_its_launcher_job_completes_and_deletion_removes_every_child(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, framework="mpi", replicas=2)
    reconcile(transport, policies, namespace)
    for pod in WORKERS:
        set_ready(cluster, namespace, pod, True)
    reconcile(transport, policies, namespace)
    body = json.dumps({"status": {"active": 1}})
    cluster.kubectl("patch", "job", "llm-launcher-0", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", body).check()
    reconcile(transport, policies, namespace)
    status = cluster.get_object("trainingjob", "llm", namespace)["status"]
    assert status["phase"] == "Running"
    assert status["replicaStatuses"]["Launcher"]["active"] == 1
    cluster.kubectl("delete", "trainingjob", "llm", "-n", namespace, "--wait=false").check()
    assert reconcile(transport, policies, namespace)[0].finalized
    wait_for("the job to be gone", lambda: not cluster.kubectl("get", "trainingjob", "llm", "-n", namespace).ok,
             WAIT)
    for kind in ("pods", "jobs.batch", "services", "configmaps", "secrets"):
        assert [n for n in names(cluster, kind, namespace) if n.startswith("llm")] == [], kind


@pytest.mark.parametrize("spec", [
    {},  # root: keys in /root/.ssh, the image's sshd
    {"mpi": {"sshAuthMountPath": "/home/mpiuser/.ssh"},  # mpi-operator v2's non-root pattern
     "template": {"spec": {"securityContext": {"runAsUser": 1000}}}},
], ids=["root", "non-root"])
def test_workers_stored_through_the_webhook_carry_a_security_context_their_sshd_runs_under(
        spec: dict[str, Any], cluster: ControlPlane, webhook: WebhookProcess, make_namespace: Callable[..., str],
        transport: Transport, policies: PolicySet):
    namespace = make_namespace()  # not opted out: the shipped defaults mutate the job and each pod
    create_job(cluster, namespace, framework="mpi", replicas=2, command=["mpirun", "python", "train.py"], **spec)
    reconcile(transport, policies, namespace)
    secret = cluster.get_object("secret", "llm-ssh", namespace)
    assert sorted(secret["data"]) == ["ssh-privatekey", "ssh-publickey"]
    for pod in WORKERS:
        stored = cluster.get_object("pod", pod, namespace)["spec"]
        container = stored["containers"][0]
        assert container["command"][0] == "/usr/sbin/sshd", pod
        assert container["securityContext"]["allowPrivilegeEscalation"] is False  # the webhook did mutate it
        assert sshd_blockers(stored, container) == [], pod
    # the keys are made once: a recreated worker uses the same Secret
    cluster.kubectl("delete", "pod", "llm-worker-0", "-n", namespace, "--wait=false").check()
    reconcile(transport, policies, namespace)
    assert cluster.get_object("secret", "llm-ssh", namespace)["data"] == secret["data"]


def test_a_failed_job_with_clean_pod_policy_running_deletes_its_running_launcher_job(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, framework="mpi", replicas=2, runPolicy={"cleanPodPolicy": "Running"})
    reconcile(transport, policies, namespace)
    for pod in WORKERS:
        set_ready(cluster, namespace, pod, True)
    reconcile(transport, policies, namespace)
    cluster.kubectl("patch", "job", "llm-launcher-0", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"active": 1}})).check()
    cluster.kubectl("patch", "pod", "llm-worker-0", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": "Failed"}})).check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert cluster.get_object("trainingjob", "llm", namespace)["status"]["phase"] == "Failed"
    assert sorted(outcome.deleted) == ["Job/llm-launcher-0", "Pod/llm-worker-1"]
