"""The TrainingJob reconciler against the real API server. There is no kubelet: the tests patch pod status
through the status subresource, as a kubelet would, and run one reconcile pass at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from control_plane import REPO, ControlPlane, wait_for
from e2e_objects import OUT_OF_WEBHOOK, in_namespace, trainingjob
from reconciler_steps import names, reconcile

from mlgate.engine import PolicySet
from mlgate.loading.policies import load_policy_paths
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.reconcile import FINALIZER, reconcile_training_job

pytestmark = pytest.mark.e2e
WAIT = 20.0
PODS = ["llm-master-0", "llm-worker-0", "llm-worker-1"]


# --- helpers ----------------------------------------------------------------------------------------







def create_job(cluster: ControlPlane, namespace: str, name: str = "llm", **spec: Any) -> dict[str, Any]:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob(name, **spec), namespace)).check()
    return cluster.get_object("trainingjob", name, namespace)




def set_pod_phase(cluster: ControlPlane, namespace: str, pod: str, phase: str) -> None:
    """What a kubelet would report: a merge patch on the pod's status subresource."""
    body = json.dumps({"status": {"phase": phase}})
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", body).check()


def job_status(cluster: ControlPlane, namespace: str, name: str = "llm") -> dict[str, Any]:
    status: dict[str, Any] = cluster.get_object("trainingjob", name, namespace).get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in status.get("conditions") or [] if c["type"] == kind]
    assert len(found) == 1, status
    return found[0]


# --- tests ------------------------------------------------------------------------------------------


def test_a_3_replica_pytorch_job_becomes_a_headless_service_and_3_pods_controlled_by_the_job(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    job = create_job(cluster, namespace, replicas=3)
    outcome, client = reconcile(transport, policies, namespace)
    assert outcome.created == ["Service/llm", *(f"Pod/{p}" for p in PODS)]
    assert client.writes == {"patch TrainingJob": 1, "create Service": 1, "create Pod": 3, "status TrainingJob": 1,
                             "create Event": 1}
    assert names(cluster, "pods", namespace) == PODS
    assert names(cluster, "services", namespace) == ["llm"]
    uid = job["metadata"]["uid"]
    for index, pod in enumerate(PODS):
        meta = cluster.get_object("pod", pod, namespace)["metadata"]
        role = "master" if index == 0 else "worker"
        assert meta["labels"]["mlgate.dev/job-name"] == "llm"
        assert meta["labels"]["mlgate.dev/replica-type"] == role
        assert meta["labels"]["mlgate.dev/replica-index"] == str(0 if index == 0 else index - 1)
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("TrainingJob", "llm", uid, True)
    service_owner = cluster.get_object("service", "llm", namespace)["metadata"]["ownerReferences"][0]
    assert (service_owner["uid"], service_owner["controller"]) == (uid, True)
    stored = cluster.get_object("trainingjob", "llm", namespace)
    assert FINALIZER in stored["metadata"]["finalizers"]
    status = stored["status"]
    assert status["phase"] == "Created"
    assert condition(status, "Created")["status"] == "True"
    assert status["observedGeneration"] == stored["metadata"]["generation"]
    assert status["replicaStatuses"] == {"Master": {"active": 1, "succeeded": 0, "failed": 0},
                                         "Worker": {"active": 2, "succeeded": 0, "failed": 0}}


def test_a_second_reconcile_of_the_same_state_makes_zero_writes(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    first, _ = reconcile(transport, policies, namespace)
    assert first.created
    before = cluster.get_object("trainingjob", "llm", namespace)["metadata"]["resourceVersion"]
    second, client = reconcile(transport, policies, namespace)
    assert (second.created, second.status_written, dict(client.writes)) == ([], False, {})
    assert cluster.get_object("trainingjob", "llm", namespace)["metadata"]["resourceVersion"] == before


def test_a_deleted_pod_is_recreated_by_the_next_reconcile(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    reconcile(transport, policies, namespace)
    old_uid = cluster.get_object("pod", "llm-worker-1", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "llm-worker-1", "-n", namespace, "--wait=true", "--timeout=20s").check()
    assert names(cluster, "pods", namespace) == ["llm-master-0", "llm-worker-0"]
    outcome, client = reconcile(transport, policies, namespace)
    assert outcome.created == ["Pod/llm-worker-1"]
    assert client.writes == {"create Pod": 1}
    assert names(cluster, "pods", namespace) == PODS
    assert cluster.get_object("pod", "llm-worker-1", namespace)["metadata"]["uid"] != old_uid


def test_pods_patched_to_running_make_the_job_running_and_all_succeeded_makes_it_succeeded(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    reconcile(transport, policies, namespace)
    for pod in PODS:
        set_pod_phase(cluster, namespace, pod, "Running")
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.status_written
    status = job_status(cluster, namespace)
    assert status["phase"] == "Running"
    assert (condition(status, "Running")["status"], condition(status, "Running")["reason"]) == (
        "True", "AllReplicasRunning")
    assert status["replicaStatuses"]["Worker"] == {"active": 2, "succeeded": 0, "failed": 0}
    assert "startTime" in status and "completionTime" not in status
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}
    for pod in PODS:
        set_pod_phase(cluster, namespace, pod, "Succeeded")
    reconcile(transport, policies, namespace)
    status = job_status(cluster, namespace)
    assert status["phase"] == "Succeeded"
    assert condition(status, "Succeeded")["status"] == "True"
    assert condition(status, "Running")["status"] == "False"
    assert status["completionTime"] >= status["startTime"]
    assert status["replicaStatuses"]["Master"] == {"active": 0, "succeeded": 1, "failed": 0}
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}


def test_a_job_that_violates_the_policies_is_not_materialized_and_fails_with_policy_violation(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2, resources={"gpu": 12, "cpu": "4", "memory": "16Gi"})
    outcome, client = reconcile(transport, policies, namespace)
    assert outcome.created == []
    assert client.writes == {"patch TrainingJob": 1, "status TrainingJob": 1, "create Event": 1}  # no child
    assert names(cluster, "pods", namespace) == []
    assert names(cluster, "services", namespace) == []
    status = job_status(cluster, namespace)
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "PolicyViolation")
    assert "[gpu/gpu.max]" in failed["message"], failed
    assert event_reasons(cluster, namespace) == ["Warning/PolicyViolation"]
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}


def test_deleting_the_job_deletes_its_children_then_removes_the_finalizer(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    reconcile(transport, policies, namespace)
    cluster.kubectl("delete", "trainingjob", "llm", "-n", namespace, "--wait=false").check()
    held = cluster.get_object("trainingjob", "llm", namespace)
    assert held["metadata"]["deletionTimestamp"] and FINALIZER in held["metadata"]["finalizers"]
    assert names(cluster, "pods", namespace) == PODS  # nothing happens without the reconciler
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(outcome.deleted) == sorted([*(f"Pod/{p}" for p in PODS), "Service/llm"])
    assert outcome.finalized
    wait_for("the job to be gone", lambda: not cluster.kubectl("get", "trainingjob", "llm", "-n", namespace).ok,
             WAIT)
    assert names(cluster, "pods", namespace) == []
    assert names(cluster, "services", namespace) == []


def test_a_status_write_that_loses_a_race_is_retried_on_fresh_state(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2)
    raced: list[str] = []

    def racing(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        if method == "PUT" and path.endswith("/status") and not raced:
            raced.append(path)  # someone else writes the job between our read and our write
            cluster.kubectl("label", "trainingjob", "llm", "-n", namespace, "team=nlp").check()
        return transport(method, path, query, body, content_type)

    client = KubeClient(racing)
    outcome = reconcile_training_job(client, namespace, "llm", policies)
    assert raced and outcome.status_written
    assert client.writes["status TrainingJob"] == 2  # the first PUT got 409 Conflict, the retry went through
    stored = cluster.get_object("trainingjob", "llm", namespace)
    assert stored["metadata"]["labels"]["team"] == "nlp"  # not clobbered
    assert stored["status"]["phase"] == "Created"


def test_the_runner_once_materializes_the_jobs_of_a_namespace(cluster: ControlPlane, namespace: str):
    create_job(cluster, namespace, replicas=2)
    done = subprocess.run([sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(cluster.kubeconfig),
                           "--policies", str(REPO / "policies"), "--namespace", namespace, "--once"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert names(cluster, "pods", namespace) == ["llm-master-0", "llm-worker-0"]
    assert job_status(cluster, namespace)["phase"] == "Created"


def test_a_hand_edited_service_and_pod_label_drift_back_and_other_edits_stay(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2)
    reconcile(transport, policies, namespace)
    selector = json.dumps({"spec": {"selector": {"app": "other"}}})
    cluster.kubectl("patch", "service", "llm", "-n", namespace, "--type=merge", "-p", selector).check()
    cluster.kubectl("label", "pod", "llm-worker-0", "-n", namespace, "--overwrite",
                    "mlgate.dev/replica-index=7", "team=nlp").check()
    outcome, client = reconcile(transport, policies, namespace)
    assert sorted(outcome.repaired) == ["Pod/llm-worker-0", "Service/llm"]
    assert client.writes == {"patch Service": 1, "patch Pod": 1}
    service = cluster.get_object("service", "llm", namespace)
    assert service["spec"]["selector"]["mlgate.dev/job-name"] == "llm"
    labels = cluster.get_object("pod", "llm-worker-0", namespace)["metadata"]["labels"]
    assert (labels["mlgate.dev/replica-index"], labels["team"]) == ("0", "nlp")  # owned label back, user's kept
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}


def env_of(cluster: ControlPlane, namespace: str, pod: str) -> dict[str, str]:
    container = cluster.get_object("pod", pod, namespace)["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_live_pytorch_pods_carry_the_rendezvous_variables_and_the_hyperparameters(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    # a hyperparameter named like a framework variable (RANK) is refused at admission (launch.reserved-env)
    create_job(cluster, namespace, replicas=3, hyperparameters={"LR": "3e-5"})
    reconcile(transport, policies, namespace)
    env = env_of(cluster, namespace, "llm-worker-1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("llm-master-0.llm", "23456")
    assert (env["WORLD_SIZE"], env["RANK"], env["PET_NODE_RANK"]) == ("3", "2", "2")
    assert env["LR"] == "3e-5"
    assert env["CHECKPOINT_URI"] == "s3://ml-checkpoints/llm"
    assert env_of(cluster, namespace, "llm-master-0")["RANK"] == "0"


def test_live_tensorflow_pods_carry_one_tf_config_with_the_whole_cluster_and_their_own_task(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, framework="tensorflow", replicas=3, tensorflow={"parameterServers": 1})
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(c for c in outcome.created if c.startswith("Pod/")) == [
        "Pod/llm-chief-0", "Pod/llm-ps-0", "Pod/llm-worker-0", "Pod/llm-worker-1"]
    configs = {pod: json.loads(env_of(cluster, namespace, pod)["TF_CONFIG"])
               for pod in ("llm-chief-0", "llm-worker-1", "llm-ps-0")}
    host = f"llm.{namespace}.svc:2222"
    assert configs["llm-worker-1"]["cluster"] == {"chief": [f"llm-chief-0.{host}"],
                                                  "worker": [f"llm-worker-0.{host}", f"llm-worker-1.{host}"],
                                                  "ps": [f"llm-ps-0.{host}"]}
    assert all(c["cluster"] == configs["llm-chief-0"]["cluster"] for c in configs.values())
    assert [configs[p]["task"] for p in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 1},
                                                     {"type": "ps", "index": 0}]


def test_live_xgboost_pods_carry_the_tracker_variables_and_workers_wait_for_the_masters_name(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, framework="xgboost", replicas=3)
    reconcile(transport, policies, namespace)
    master, worker = env_of(cluster, namespace, "llm-master-0"), env_of(cluster, namespace, "llm-worker-1")
    assert (worker["MASTER_ADDR"], worker["MASTER_PORT"], worker["WORLD_SIZE"]) == ("llm-master-0.llm", "9999", "3")
    assert (master["RANK"], worker["RANK"]) == ("0", "2")
    assert worker["WORKER_ADDRS"] == "llm-worker-0.llm,llm-worker-1.llm"
    assert worker["WORKER_PORT"] == "9999"
    # xgboost resolves the tracker once, fatally: each worker first waits for MASTER_ADDR to resolve
    (wait,) = cluster.get_object("pod", "llm-worker-1", namespace)["spec"]["initContainers"]
    assert (wait["name"], wait["command"][3]) == ("wait-for-peer", worker["MASTER_ADDR"])
    assert "initContainers" not in cluster.get_object("pod", "llm-master-0", namespace)["spec"]


def test_a_pytorch_job_with_4_gpus_per_pod_starts_4_torchrun_processes_per_pod(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2, resources={"gpu": 4, "cpu": "4", "memory": "16Gi"})
    reconcile(transport, policies, namespace)
    for pod in ("llm-master-0", "llm-worker-0"):
        env = env_of(cluster, namespace, pod)
        assert (env["PET_NPROC_PER_NODE"], env["PET_NNODES"]) == ("4", "2"), pod


def test_a_coscheduling_gang_job_gets_a_podgroup_whose_min_member_is_its_pods(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3, scheduling={"scheduler": "coscheduling", "gang": True})
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.created[0] == "PodGroup/llm"
    group = cluster.get_object("podgroups.scheduling.x-k8s.io", "llm", namespace)
    assert group["spec"]["minMember"] == 3
    for pod in PODS:
        live = cluster.get_object("pod", pod, namespace)
        assert live["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llm", pod
        assert live["spec"]["schedulerName"] == "scheduler-plugins-scheduler", pod


def event_reasons(cluster: ControlPlane, namespace: str, name: str = "llm") -> list[str]:
    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                          "-o", "json").check()
    items = sorted(json.loads(out.stdout)["items"], key=lambda e: (e["firstTimestamp"], e["metadata"]["name"]))
    return [f"{e['type']}/{e['reason']}" for e in items]


def test_each_phase_transition_records_an_event_and_a_pass_without_one_records_none(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2)
    reconcile(transport, policies, namespace)
    for pod in ("llm-master-0", "llm-worker-0"):
        set_pod_phase(cluster, namespace, pod, "Running")
    reconcile(transport, policies, namespace)
    reconcile(transport, policies, namespace)
    set_pod_phase(cluster, namespace, "llm-worker-0", "Failed")
    reconcile(transport, policies, namespace)
    assert sorted(event_reasons(cluster, namespace)) == sorted(
        ["Normal/ChildrenCreated", "Normal/AllReplicasRunning", "Warning/PodFailed"])


def test_a_job_past_its_active_deadline_fails_and_loses_its_unfinished_pods(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2, runPolicy={"activeDeadlineSeconds": 1})
    reconcile(transport, policies, namespace)
    set_pod_phase(cluster, namespace, "llm-master-0", "Running")
    set_pod_phase(cluster, namespace, "llm-worker-0", "Succeeded")
    start = job_status(cluster, namespace)["startTime"]

    def expired() -> bool:
        reconcile(transport, policies, namespace)
        return bool(job_status(cluster, namespace).get("phase") == "Failed")

    wait_for("the deadline to pass", expired, WAIT, interval=0.5)
    status = job_status(cluster, namespace)
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"
    assert status["completionTime"] > start
    assert names(cluster, "pods", namespace) == ["llm-worker-0"]  # the running pod is terminated, logs kept
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}


@pytest.mark.parametrize(("policy", "left"), [("All", []), ("Running", ["llm-worker-0"]),
                                              ("None", ["llm-master-0", "llm-worker-0", "llm-worker-1"])])
def test_clean_pod_policy_decides_which_pods_a_failed_job_keeps(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet, policy: str,
        left: list[str]):
    create_job(cluster, namespace, replicas=3, runPolicy={"cleanPodPolicy": policy})
    reconcile(transport, policies, namespace)
    set_pod_phase(cluster, namespace, "llm-master-0", "Running")
    set_pod_phase(cluster, namespace, "llm-worker-0", "Failed")
    reconcile(transport, policies, namespace)
    assert job_status(cluster, namespace)["phase"] == "Failed"
    assert names(cluster, "pods", namespace) == left
    outcome, client = reconcile(transport, policies, namespace)
    assert (outcome.created, dict(client.writes)) == ([], {})  # a finished job's pods are not recreated


def test_a_finished_job_is_deleted_with_its_children_once_its_ttl_has_passed(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2, runPolicy={"ttlSecondsAfterFinished": 1})
    reconcile(transport, policies, namespace)
    for pod in ("llm-master-0", "llm-worker-0"):
        set_pod_phase(cluster, namespace, pod, "Succeeded")
    first, _ = reconcile(transport, policies, namespace)
    assert job_status(cluster, namespace)["phase"] == "Succeeded"
    assert "TrainingJob/llm" not in first.deleted  # not before the TTL

    def gone() -> bool:
        reconcile(transport, policies, namespace)
        return not cluster.kubectl("get", "trainingjob", "llm", "-n", namespace).ok

    wait_for("the TTL to delete the job", gone, WAIT, interval=0.5)
    assert names(cluster, "pods", namespace) == []
    assert names(cluster, "services", namespace) == []


class Crash(Exception):
    pass


def test_a_reconciler_that_dies_mid_cleanup_finishes_it_on_restart_and_removes_the_finalizer_last(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    reconcile(transport, policies, namespace)
    cluster.kubectl("delete", "trainingjob", "llm", "-n", namespace, "--wait=false").check()
    deletes: list[str] = []

    def dies_after_two_deletes(method: str, path: str, query: dict[str, str], body: Any,
                               content_type: str) -> tuple[int, bytes]:
        if method == "DELETE" and len(deletes) == 2:
            raise Crash(path)
        if method == "DELETE":
            deletes.append(path)
        return transport(method, path, query, body, content_type)

    with pytest.raises(Crash):
        reconcile_training_job(KubeClient(dies_after_two_deletes), namespace, "llm", policies)
    assert len(names(cluster, "pods", namespace)) == 1
    held = cluster.get_object("trainingjob", "llm", namespace)
    assert FINALIZER in held["metadata"]["finalizers"]  # the job still waits for its children
    outcome, _ = reconcile(transport, policies, namespace)  # the restarted reconciler
    assert outcome.finalized
    assert sorted(outcome.deleted) == ["Pod/llm-worker-1", "Service/llm"]
    wait_for("the job to be gone", lambda: not cluster.kubectl("get", "trainingjob", "llm", "-n", namespace).ok,
             WAIT)
    assert names(cluster, "pods", namespace) == []


def test_failed_pods_are_restarted_within_the_backoff_limit_then_the_job_fails(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=2, runPolicy={"backoffLimit": 1})
    reconcile(transport, policies, namespace)
    for pod in ("llm-master-0", "llm-worker-0"):
        set_pod_phase(cluster, namespace, pod, "Running")
    reconcile(transport, policies, namespace)
    old_uid = cluster.get_object("pod", "llm-worker-0", namespace)["metadata"]["uid"]
    set_pod_phase(cluster, namespace, "llm-worker-0", "Failed")
    outcome, _ = reconcile(transport, policies, namespace)
    assert (outcome.restarted, outcome.created) == (["Pod/llm-worker-0"], ["Pod/llm-worker-0"])
    assert cluster.get_object("pod", "llm-worker-0", namespace)["metadata"]["uid"] != old_uid
    job = cluster.get_object("trainingjob", "llm", namespace)
    assert job["metadata"]["annotations"]["mlgate.dev/restarts"] == "1"
    assert job["status"]["phase"] == "Restarting"
    assert (condition(job["status"], "Restarting")["status"], condition(job["status"], "Running")["status"]) == (
        "True", "False")
    assert dict(reconcile(transport, policies, namespace)[1].writes) == {}
    set_pod_phase(cluster, namespace, "llm-worker-0", "Running")
    reconcile(transport, policies, namespace)
    status = job_status(cluster, namespace)
    assert (status["phase"], condition(status, "Restarting")["status"]) == ("Running", "False")
    set_pod_phase(cluster, namespace, "llm-worker-0", "Failed")  # the second failure is one too many
    outcome, _ = reconcile(transport, policies, namespace)
    assert (outcome.restarted, outcome.created) == ([], [])
    status = job_status(cluster, namespace)
    assert (status["phase"], condition(status, "Failed")["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert "Warning/BackoffLimitExceeded" in event_reasons(cluster, namespace)


SCOPED_POLICY = """
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata:
  name: one-gpu
spec:
  failurePolicy: Fail
  match:
    namespaceSelector:
      matchLabels:
        team: small
  rules:
    - rule: gpu.max
      action: deny
      params:
        perContainer: 1
"""


def test_the_preflight_matches_namespace_selectors_on_the_live_namespace_labels(
        cluster: ControlPlane, make_namespace: Any, transport: Transport, tmp_path: Path):
    (tmp_path / "scoped.yaml").write_text(SCOPED_POLICY, encoding="utf-8")
    scoped = load_policy_paths([tmp_path / "scoped.yaml"])
    small, other = make_namespace({"team": "small", **OUT_OF_WEBHOOK}), make_namespace(OUT_OF_WEBHOOK)
    for namespace in (small, other):
        create_job(cluster, namespace, replicas=2, resources={"gpu": 2, "cpu": "4", "memory": "16Gi"})
        reconcile(transport, scoped, namespace)
    failed = condition(job_status(cluster, small), "Failed")
    assert (failed["reason"], "[one-gpu/gpu.max]" in failed["message"]) == ("PolicyViolation", True)
    assert names(cluster, "pods", small) == []
    assert job_status(cluster, other)["phase"] == "Created"
    assert names(cluster, "pods", other) == ["llm-master-0", "llm-worker-0"]


def test_a_policy_added_after_materialization_does_not_fail_the_running_job(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet, tmp_path: Path):
    create_job(cluster, namespace, replicas=2, resources={"gpu": 2, "cpu": "4", "memory": "16Gi"})
    reconcile(transport, policies, namespace)
    unscoped = SCOPED_POLICY.replace("  match:\n    namespaceSelector:\n      matchLabels:\n        team: small\n", "")
    assert "match:" not in unscoped
    (tmp_path / "strict.yaml").write_text(unscoped, encoding="utf-8")
    strict = load_policy_paths([tmp_path / "strict.yaml"])
    create_job(cluster, namespace, name="late", replicas=2, resources={"gpu": 2, "cpu": "4", "memory": "16Gi"})
    reconcile(transport, strict, namespace, "late")
    assert condition(job_status(cluster, namespace, "late"), "Failed")["reason"] == "PolicyViolation"  # it applies
    outcome, client = reconcile(transport, strict, namespace)
    assert (outcome.created, dict(client.writes)) == ([], {})
    assert job_status(cluster, namespace)["phase"] == "Created"
