"""Why a TrainingJob does not progress (the Stalled condition) and what happens to its checkpoint claim, against
the real API server. There is no kubelet, scheduler or controller-manager: the tests write what those would
(pod status, PodGroup status, ResourceQuota status) through the status subresource, and run one pass at a time."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from control_plane import ControlPlane, wait_for
from e2e_objects import in_namespace, trainingjob
from reconciler_steps import names

from mlgate.engine import PolicySet
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.reconcile import reconcile_training_job
from mlgate_reconciler.results import PassResult

pytestmark = pytest.mark.e2e
WAIT = 20.0
NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available."


# --- helpers ----------------------------------------------------------------------------------------





def create(cluster: ControlPlane, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(obj, namespace)).check()


def reconcile(transport: Transport, policies: PolicySet, namespace: str, name: str = "llm") -> PassResult:
    return reconcile_training_job(KubeClient(transport), namespace, name, policies)


def patch_status(cluster: ControlPlane, kind: str, name: str, namespace: str, status: dict[str, Any]) -> None:
    """What a kubelet, scheduler or controller would write: a merge patch on the status subresource."""
    body = json.dumps({"status": status})
    cluster.kubectl("patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge", "-p", body).check()


def stalled(cluster: ControlPlane, namespace: str, name: str = "llm") -> tuple[str, dict[str, Any]]:
    """(the job's phase, its Stalled condition)."""
    status = cluster.get_object("trainingjob", name, namespace).get("status") or {}
    [found] = [c for c in status.get("conditions") or [] if c["type"] == "Stalled"]
    return str(status.get("phase")), found


def events(cluster: ControlPlane, namespace: str, name: str = "llm") -> list[str]:
    """The job's events as sorted "type/reason" (events of the same second have no order)."""
    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                          "-o", "json").check()
    return sorted(f"{e['type']}/{e['reason']}" for e in json.loads(out.stdout)["items"])



def waiting_on(cluster: ControlPlane, namespace: str, pod: str, reason: str, message: str) -> dict[str, Any]:
    """A pod status whose main container waits with `reason`, as the kubelet reports it."""
    container = cluster.get_object("pod", pod, namespace)["spec"]["containers"][0]
    return {"phase": "Pending", "containerStatuses": [
        {"name": container["name"], "image": container["image"], "imageID": "", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": reason, "message": message}}}]}


# --- Stalled ----------------------------------------------------------------------------------------


def test_an_image_pull_backoff_stalls_the_job_with_a_warning_and_a_running_pod_clears_it(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, trainingjob("llm", replicas=2))
    reconcile(transport, policies, namespace)
    backoff = 'Back-off pulling image "registry.example/train:1.0"'
    patch_status(cluster, "pod", "llm-worker-0", namespace,
                 waiting_on(cluster, namespace, "llm-worker-0", "ImagePullBackOff", backoff))
    assert reconcile(transport, policies, namespace).status_written
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Created", "True", "ImagePullFailed")
    assert stall["message"].startswith("pod 'llm-worker-0' cannot pull image 'registry.example/train:1.0' "
                                       f"(container 'pytorch' of 'llm-worker-0': ImagePullBackOff: {backoff})")
    assert events(cluster, namespace) == ["Normal/ChildrenCreated", "Warning/ImagePullFailed"]
    assert not reconcile(transport, policies, namespace).status_written  # the same cause: nothing to write
    for pod in ("llm-master-0", "llm-worker-0"):
        patch_status(cluster, "pod", pod, namespace, {"phase": "Running", "containerStatuses": None})
    reconcile(transport, policies, namespace)
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Running", "False", "Progressing")
    assert events(cluster, namespace) == ["Normal/AllReplicasRunning", "Normal/ChildrenCreated", "Normal/Progressing",
                                          "Warning/ImagePullFailed"]


def test_an_invalid_image_name_fails_the_job_with_image_pull_failed(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, trainingjob("llm", replicas=2))
    reconcile(transport, policies, namespace)
    patch_status(cluster, "pod", "llm-master-0", namespace,
                 waiting_on(cluster, namespace, "llm-master-0", "InvalidImageName", "invalid reference format"))
    reconcile(transport, policies, namespace)
    status = cluster.get_object("trainingjob", "llm", namespace)["status"]
    [failed] = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert (status["phase"], failed["reason"]) == ("Failed", "ImagePullFailed")
    assert "fix the image reference" in failed["message"]
    assert events(cluster, namespace).count("Warning/ImagePullFailed") == 1  # the phase's event says it once


def test_an_unschedulable_pod_stalls_the_job_with_the_schedulers_message_until_it_is_scheduled(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, trainingjob("llm", replicas=2))
    reconcile(transport, policies, namespace)
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_GPU}
    patch_status(cluster, "pod", "llm-worker-0", namespace, {"conditions": [unschedulable]})
    reconcile(transport, policies, namespace)
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["reason"]) == ("Created", "Unschedulable")
    assert stall["message"].startswith(f"pod 'llm-worker-0' cannot be scheduled: {NO_GPU};")
    patch_status(cluster, "pod", "llm-worker-0", namespace, {"conditions": [{"type": "PodScheduled",
                                                                             "status": "True"}]})
    reconcile(transport, policies, namespace)
    assert stalled(cluster, namespace)[1]["status"] == "False"
    assert events(cluster, namespace) == ["Normal/ChildrenCreated", "Normal/Progressing", "Warning/Unschedulable"]


def test_a_volcano_podgroup_that_cannot_place_its_gang_stalls_the_job_as_gang_unschedulable(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, trainingjob("llm", replicas=2, scheduling={"scheduler": "volcano", "gang": True}))
    reconcile(transport, policies, namespace)
    gang = ("2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; "
            "Pending: 2 Unschedulable")
    patch_status(cluster, "podgroups.scheduling.volcano.sh", "llm", namespace, {"phase": "Inqueue", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": gang,
         "transitionID": "1", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    reconcile(transport, policies, namespace)
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["reason"]) == ("Created", "GangUnschedulable")
    assert stall["message"].startswith("the gang (PodGroup 'llm', minMember 2) cannot be scheduled together; pods "
                                       f"'llm-master-0', 'llm-worker-0' wait: NotEnoughResources: {gang};")
    patch_status(cluster, "podgroups.scheduling.volcano.sh", "llm", namespace, {"phase": "Running"})
    reconcile(transport, policies, namespace)
    assert stalled(cluster, namespace)[1]["reason"] == "Progressing"  # Volcano leaves its condition behind


def test_gang_scheduling_without_the_podgroup_crds_stalls_the_job_until_they_are_installed(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    crd = "podgroups.scheduling.x-k8s.io"
    collection = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups"
    cluster.kubectl("delete", "crd", crd, "--wait=true", timeout=60).check()
    try:
        wait_for("the PodGroup kind to be no longer served", lambda: cluster.get(collection)[0] == 404, WAIT)
        create(cluster, namespace, trainingjob("llm", replicas=2, scheduling={"scheduler": "coscheduling",
                                                                            "gang": True}))
        outcome = reconcile(transport, policies, namespace)
        assert outcome.created == ["Service/llm", "Pod/llm-master-0", "Pod/llm-worker-0"]
        assert outcome.requeue  # the CRDs may come: look again later
        phase, stall = stalled(cluster, namespace)
        assert (phase, stall["status"], stall["reason"]) == ("Pending", "True", "GangSchedulerMissing")
        assert stall["message"] == ("PodGroup 'llm' could not be created: the API server does not serve "
                                    "scheduling.x-k8s.io/v1alpha1 PodGroups; install scheduler-plugins (coscheduling), "
                                    "its CRDs and scheduler, or set spec.scheduling.gang to false")
        assert events(cluster, namespace) == ["Warning/GangSchedulerMissing"]
    finally:
        cluster.install_crds()
    wait_for("the PodGroup to be created once the CRDs are back",
             lambda: "PodGroup/llm" in reconcile(transport, policies, namespace).created, WAIT)
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Created", "False", "Progressing")


def test_a_resource_quota_refusing_the_third_pod_stalls_the_job_and_the_pod_comes_once_the_quota_grows(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"}, "spec": {"hard": {"pods": "2"}}}
    create(cluster, namespace, quota)
    # The admission plugin enforces status.hard, which the quota controller (not running here) would copy
    # from spec.hard; without it the quota admits everything, so the test writes it as the controller would.
    patch_status(cluster, "resourcequota", "pods", namespace, {"hard": {"pods": "2"}, "used": {"pods": "0"}})
    create(cluster, namespace, trainingjob("llm", replicas=3))
    outcome = reconcile(transport, policies, namespace)
    assert outcome.created == ["Service/llm", "Pod/llm-master-0", "Pod/llm-worker-0"]
    assert outcome.requeue
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Pending", "True", "QuotaExceeded")
    assert stall["message"].startswith("Pod 'llm-worker-1' could not be created: pods \"llm-worker-1\" is forbidden: "
                                       "exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2;")
    assert events(cluster, namespace) == ["Warning/QuotaExceeded"]
    assert not reconcile(transport, policies, namespace).status_written
    patch_status(cluster, "resourcequota", "pods", namespace, {"hard": {"pods": "3"}})
    outcome = reconcile(transport, policies, namespace)
    assert (outcome.created, outcome.requeue) == (["Pod/llm-worker-1"], False)
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Created", "False", "Progressing")
    assert names(cluster, "pods", namespace) == ["llm-master-0", "llm-worker-0", "llm-worker-1"]


def test_a_quota_on_limits_refusing_pods_without_them_stalls_the_job_with_what_to_set(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
             "spec": {"hard": {"limits.memory": "64Gi"}}}
    create(cluster, namespace, quota)
    patch_status(cluster, "resourcequota", "compute", namespace, {"hard": {"limits.memory": "64Gi"},
                                                                  "used": {"limits.memory": "0"}})
    create(cluster, namespace, trainingjob("llm", resources={"gpu": 1, "cpu": "4"}))  # no memory
    outcome = reconcile(transport, policies, namespace)
    assert outcome.created == ["Service/llm"] and outcome.requeue
    phase, stall = stalled(cluster, namespace)
    assert (phase, stall["status"], stall["reason"]) == ("Pending", "True", "QuotaNeedsResources")
    assert stall["message"].startswith("Pod 'llm-master-0', Pod 'llm-worker-0' could not be created: pods "
                                       "\"llm-master-0\" is forbidden: failed quota: compute: must specify "
                                       "limits.memory"), stall
    assert stall["message"].endswith("; set spec.resources.cpu and spec.resources.memory (pods get them as requests "
                                     "and limits), or add a LimitRange that defaults them")
    assert events(cluster, namespace) == ["Warning/QuotaNeedsResources"]


# --- checkpoint claim retention ---------------------------------------------------------------------


def claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}


def with_claim(name: str, claim_name: str, **checkpoint: Any) -> dict[str, Any]:
    return trainingjob(name, replicas=2, checkpoint={"claimName": claim_name, "mountPath": "/ckpt", **checkpoint})


def claim_deleted(cluster: ControlPlane, namespace: str, name: str) -> bool:
    """Gone, or marked for deletion (no controller-manager removes the pvc-protection finalizer here)."""
    found = cluster.kubectl("get", "pvc", name, "-n", namespace, "-o", "json")
    return not found.ok or bool(json.loads(found.stdout)["metadata"].get("deletionTimestamp"))


def delete_job(cluster: ControlPlane, transport: Transport, policies: PolicySet, namespace: str,
               name: str) -> PassResult:
    cluster.kubectl("delete", "trainingjob", name, "-n", namespace, "--wait=false").check()
    outcome = reconcile(transport, policies, namespace, name)
    assert outcome.finalized
    wait_for(f"job {name} to be gone", lambda: not cluster.kubectl("get", "trainingjob", name, "-n", namespace).ok,
             WAIT)
    return outcome


def test_retain_false_deletes_the_checkpoint_claim_with_the_job(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, claim("ckpt"))
    create(cluster, namespace, with_claim("llm", "ckpt", retain=False))
    reconcile(transport, policies, namespace)
    outcome = delete_job(cluster, transport, policies, namespace, "llm")
    assert outcome.deleted[-1] == "PersistentVolumeClaim/ckpt"  # after every child
    assert claim_deleted(cluster, namespace, "ckpt")


def test_by_default_the_checkpoint_claim_outlives_the_job(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, claim("ckpt"))
    create(cluster, namespace, with_claim("llm", "ckpt"))
    assert cluster.get_object("trainingjob", "llm", namespace)["spec"]["checkpoint"]["retain"] is True  # CRD default
    reconcile(transport, policies, namespace)
    outcome = delete_job(cluster, transport, policies, namespace, "llm")
    assert "PersistentVolumeClaim/ckpt" not in outcome.deleted
    assert not claim_deleted(cluster, namespace, "ckpt")


def test_a_claim_shared_with_a_live_job_is_kept_and_goes_with_the_last_job_that_does_not_retain_it(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet,
        caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="mlgate.reconciler")
    create(cluster, namespace, claim("ckpt"))
    for name in ("first", "second"):
        create(cluster, namespace, with_claim(name, "ckpt", retain=False))
        reconcile(transport, policies, namespace, name)
    assert "PersistentVolumeClaim/ckpt" not in delete_job(cluster, transport, policies, namespace, "first").deleted
    assert not claim_deleted(cluster, namespace, "ckpt")
    assert "TrainingJob second still uses it" in caplog.text
    assert "PersistentVolumeClaim/ckpt" in delete_job(cluster, transport, policies, namespace, "second").deleted
    assert claim_deleted(cluster, namespace, "ckpt")
