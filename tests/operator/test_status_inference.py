"""inference_status for the canary's life: built from one minimal InferenceService with a canary and its desired
Deployments, one change each."""

from typing import Any

from mlgate_reconciler.children import ChildKey, key
from mlgate_reconciler.desired_inference import desired_inference_children
from mlgate_reconciler.inference import inference_status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
ISVC = {
    "apiVersion": "mlgate.dev/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2", "generation": 1},
    "spec": {"modelUri": "s3://m/v3", "runtime": "triton", "canaryTrafficPercent": 10,
             "canary": {"modelUri": "s3://m/v4"}},
}


def with_spec(**spec: Any) -> dict[str, Any]:
    return {**ISVC, "spec": {**ISVC["spec"], **spec}}


def owned(isvc: dict[str, Any], ready: int = 1) -> dict[ChildKey, dict[str, Any]]:
    """The desired children as the API holds them: every Deployment with `ready` ready replicas."""
    children = desired_inference_children(isvc)
    for child in children:
        if child["kind"] == "Deployment":
            child["status"] = {"readyReplicas": ready} if ready else {}
    return {key(child): child for child in children}


def cond(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == kind), None)


def test_a_ready_predictor_and_canary_make_the_service_ready():
    status = inference_status(None, ISVC, owned(ISVC), None, T0)
    assert (status["phase"], cond(status, "CanaryReady")["status"]) == ("Ready", "True")


def test_turning_the_canary_off_removes_its_ready_condition():
    before = inference_status(None, ISVC, owned(ISVC), None, T0)
    off = with_spec(canaryTrafficPercent=0)
    status = inference_status(before, off, owned(off), None, T1)
    assert cond(status, "CanaryReady") is None
    assert "canaryReadyReplicas" not in status
    assert status["phase"] == "Ready"
    assert inference_status(status, off, owned(off), None, T1) == status  # settled: nothing more to write


def test_a_canary_taking_all_traffic_is_ready_without_predictor_replicas():
    full = with_spec(canaryTrafficPercent=100)
    deployments = owned(full)
    predictor = next(c for c in deployments.values() if c["metadata"]["name"] == "sent-predictor")
    assert predictor["spec"]["replicas"] == 0
    predictor["status"] = {}
    status = inference_status(None, full, deployments, None, T0)
    assert (status["phase"], cond(status, "Ready")["status"]) == ("Ready", "True")
    assert cond(status, "PredictorReady")["reason"] == "NoTrafficShare"
    assert (status["readyReplicas"], status["canaryReadyReplicas"]) == (0, 1)


def test_a_canary_taking_all_traffic_keeps_the_service_pending_until_the_canary_is_ready():
    full = with_spec(canaryTrafficPercent=100)
    status = inference_status(None, full, owned(full, ready=0), None, T0)
    assert (status["phase"], cond(status, "Ready")["reason"]) == ("Pending", "NoReadyReplicas")


def test_a_predictor_scaled_to_zero_without_a_canary_is_still_not_ready():
    zero = with_spec(canaryTrafficPercent=0, scaling={"minReplicas": 0, "maxReplicas": 2})
    status = inference_status(None, zero, owned(zero, ready=0), None, T0)
    assert (status["phase"], cond(status, "PredictorReady")["reason"]) == (
        "Pending", "NoReadyReplicas")
