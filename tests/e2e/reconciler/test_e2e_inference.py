"""The InferenceService reconciler against the real API server. There is no controller-manager: the tests patch
the Deployments' status through the status subresource, as the deployment controller would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import example, in_namespace
from reconciler_steps import names

from mlgate.engine import PolicySet
from mlgate_reconciler.children import FINALIZER
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.inference import reconcile_inference_service
from mlgate_reconciler.results import PassResult

pytestmark = pytest.mark.e2e





def create_isvc(cluster: ControlPlane, namespace: str, **spec: Any) -> None:
    obj = in_namespace(example("inferenceservice.yaml"), namespace)
    obj["spec"].update(spec)
    cluster.kubectl("create", "-f", "-", stdin=obj).check()


def reconcile(transport: Transport, policies: PolicySet, namespace: str) -> tuple[PassResult, KubeClient]:
    client = KubeClient(transport)
    return reconcile_inference_service(client, namespace, "sentiment", policies), client



def set_ready(cluster: ControlPlane, namespace: str, deployment: str, ready: int) -> None:
    """What the deployment controller would report."""
    status = {"replicas": ready, "updatedReplicas": ready, "readyReplicas": ready, "availableReplicas": ready}
    cluster.kubectl("patch", "deployment", deployment, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status})).check()


def isvc_status(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.get_object("inferenceservice", "sentiment", namespace).get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_a_canary_service_becomes_two_deployments_a_service_and_an_hpa_each_controlled_by_it(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(outcome.created) == ["Deployment/sentiment-canary", "Deployment/sentiment-predictor",
                                       "HorizontalPodAutoscaler/sentiment", "HorizontalPodAutoscaler/sentiment-canary",
                                       "Service/sentiment"]
    uid = cluster.get_object("inferenceservice", "sentiment", namespace)["metadata"]["uid"]
    for kind, name in (("deployment", "sentiment-predictor"), ("deployment", "sentiment-canary"),
                       ("service", "sentiment"), ("hpa", "sentiment"), ("hpa", "sentiment-canary")):
        ref, = cluster.get_object(kind, name, namespace)["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("InferenceService", uid, True)
    canary = cluster.get_object("deployment", "sentiment-canary", namespace)
    (init,) = canary["spec"]["template"]["spec"]["initContainers"]  # the storage initializer fetches its model
    assert init["args"] == ["s3://ml-models/sentiment/v4", "/mnt/models"]
    assert cluster.get_object("hpa", "sentiment", namespace)["spec"]["scaleTargetRef"]["name"] == "sentiment-predictor"
    assert cluster.get_object("hpa", "sentiment-canary", namespace)["spec"]["scaleTargetRef"]["name"] == \
        "sentiment-canary"
    status = isvc_status(cluster, namespace)
    assert (status["phase"], condition(status, "Ready")["reason"]) == ("Pending", "NoReadyReplicas")
    assert status["url"] == f"http://sentiment.{namespace}.svc.cluster.local"


def test_a_second_pass_over_the_same_state_makes_zero_writes(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    outcome, client = reconcile(transport, policies, namespace)
    assert sum(client.writes.values()) == 0, (client.writes, outcome)


def test_ready_deployments_make_the_service_ready_with_its_replica_counts(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    set_ready(cluster, namespace, "sentiment-predictor", 1)
    reconcile(transport, policies, namespace)
    half = isvc_status(cluster, namespace)
    assert (half["phase"], condition(half, "CanaryReady")["status"]) == ("Pending", "False")
    set_ready(cluster, namespace, "sentiment-canary", 1)
    reconcile(transport, policies, namespace)
    status = isvc_status(cluster, namespace)
    assert (status["phase"], status["readyReplicas"], status["canaryReadyReplicas"]) == ("Ready", 1, 1)
    assert condition(status, "Ready")["status"] == "True"


def test_a_hand_edited_image_drifts_back_but_hpa_scaled_replicas_stay(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    cluster.kubectl("set", "image", "deployment/sentiment-predictor", "predictor=evil/image:1", "-n",
                    namespace).check()
    cluster.kubectl("scale", "deployment/sentiment-predictor", "--replicas=3", "-n", namespace).check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.repaired == ["Deployment/sentiment-predictor"]
    live = cluster.get_object("deployment", "sentiment-predictor", namespace)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/tritonserver:23.05-py3"
    assert live["spec"]["replicas"] == 3  # the HPA's to decide


def test_turning_the_canary_off_deletes_its_deployment_and_its_hpa(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    cluster.kubectl("patch", "inferenceservice", "sentiment", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"canaryTrafficPercent": 0}})).check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(outcome.deleted) == ["Deployment/sentiment-canary", "HorizontalPodAutoscaler/sentiment-canary"]
    assert names(cluster, "deployments", namespace) == ["sentiment-predictor"]
    assert "canaryReadyReplicas" not in isvc_status(cluster, namespace)


def test_a_service_the_policies_deny_gets_no_children_and_fails_with_policy_violation(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    template = example("inferenceservice.yaml")["spec"]["template"]
    template["spec"]["containers"][0]["securityContext"]["privileged"] = True
    create_isvc(cluster, namespace, template=template)
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.created == []
    assert names(cluster, "deployments", namespace) == []
    status = isvc_status(cluster, namespace)
    admitted = condition(status, "Admitted")
    assert (status["phase"], admitted["status"], admitted["reason"]) == ("Failed", "False", "PolicyViolation")
    assert "/spec/template/spec/containers/0/securityContext/privileged" in admitted["message"]


def test_a_deployment_over_quota_fails_the_service_with_quota_exceeded_until_it_recovers(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace, canaryTrafficPercent=0)
    reconcile(transport, policies, namespace)
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": 'pods "sentiment-predictor-x" is forbidden: exceeded quota: gpu, requested: '
                          'requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, limited: '
                          'requests.nvidia.com/gpu=8'}
    cluster.kubectl("patch", "deployment", "sentiment-predictor", "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"conditions": [failure]}})).check()
    reconcile(transport, policies, namespace)
    status = isvc_status(cluster, namespace)
    assert (status["phase"], condition(status, "Ready")["reason"]) == ("Failed", "QuotaExceeded")
    assert "exceeded quota" in condition(status, "PredictorReady")["message"]
    set_ready(cluster, namespace, "sentiment-predictor", 1)
    cluster.kubectl("patch", "deployment", "sentiment-predictor", "-n", namespace, "--subresource=status",
                    "--type=json", "-p", json.dumps([{"op": "remove", "path": "/status/conditions"}])).check()
    reconcile(transport, policies, namespace)
    assert isvc_status(cluster, namespace)["phase"] == "Ready"


def test_deleting_the_service_removes_its_children_then_the_finalizer(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    assert FINALIZER in cluster.get_object("inferenceservice", "sentiment", namespace)["metadata"]["finalizers"]
    cluster.kubectl("delete", "inferenceservice", "sentiment", "-n", namespace, "--wait=false").check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.deleted[0] == "HorizontalPodAutoscaler/sentiment"  # the HPA stops scaling first
    assert outcome.finalized
    assert names(cluster, "inferenceservices", namespace) == []
    assert names(cluster, "deployments", namespace) == [] and names(cluster, "services", namespace) == []
