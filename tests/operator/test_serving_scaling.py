"""Scaling that serves: minReplicas 0 is served by one replica (an HPA never scales a target at zero), each
Deployment has its own HPA whose floor and ceiling keep the canary's share, and an HPA on CPU utilization is
refused when a container it divides by requests no CPU."""

from __future__ import annotations

from typing import Any

import pytest
from test_serving_canary import GatewayApi  # the pass tests' in-memory API server, with discovery

from mlgate.engine import PolicySet
from mlgate_reconciler.desired_inference import canary_split, desired_inference_children, inference_problem
from mlgate_reconciler.inference import reconcile_inference_service


def isvc(pct: int = 0, **scaling: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"modelUri": "s3://models/sent/v3", "runtime": "triton", "scaling": scaling}
    if pct:
        spec.update(canaryTrafficPercent=pct, canary={"modelUri": "s3://models/sent/v4"})
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2", "generation": 1, "resourceVersion": "1"},
            "spec": spec}


def kinds(obj: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in desired_inference_children(obj, routed=False) if c["kind"] == kind}


def floors(obj: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    """Deployment name -> (its replicas, its HPA's minReplicas, maxReplicas)."""
    deployments = kinds(obj, "Deployment")
    return {h["spec"]["scaleTargetRef"]["name"]: (deployments[h["spec"]["scaleTargetRef"]["name"]]["spec"]["replicas"],
                                                  h["spec"]["minReplicas"], h["spec"]["maxReplicas"])
            for h in kinds(obj, "HorizontalPodAutoscaler").values()}


def test_min_replicas_zero_yields_one_serving_replica_and_an_hpa_that_can_scale_it():
    obj = isvc(minReplicas=0, maxReplicas=3)
    assert kinds(obj, "Deployment")["sent-predictor"]["spec"]["replicas"] == 1
    assert floors(obj) == {"sent-predictor": (1, 1, 3)}


def test_min_replicas_zero_without_a_max_is_one_fixed_replica():
    assert floors(isvc(minReplicas=0)) == {"sent-predictor": (1, 1, 1)}


@pytest.mark.parametrize(("total", "high", "pct", "predictor", "canary"), [
    (4, 8, 50, (2, 2, 4), (2, 2, 4)),   # one HPA over the predictor with floor 4 made it 4 + 2 (33%)
    (10, 20, 10, (9, 9, 18), (1, 1, 2)),
    (3, 3, 25, (2, 2, 2), (1, 1, 1)),
    (1, 4, 10, (1, 1, 3), (1, 1, 1)),
])
def test_each_deployments_hpa_floor_keeps_the_canary_share(total, high, pct, predictor, canary):
    obj = isvc(pct, minReplicas=total, maxReplicas=high)
    found = floors(obj)
    assert found == {"sent-predictor": predictor, "sent-canary": canary}
    assert (found["sent-predictor"][1], found["sent-canary"][1]) == canary_split(obj["spec"])


def test_the_predictor_hpa_keeps_its_name_and_the_canary_hpa_is_named_after_its_deployment():
    hpas = kinds(isvc(25, minReplicas=4, maxReplicas=8), "HorizontalPodAutoscaler")
    assert {n: h["spec"]["scaleTargetRef"]["name"] for n, h in hpas.items()} == {
        "sent": "sent-predictor", "sent-canary": "sent-canary"}
    assert {h["metadata"]["labels"]["mlgate.dev/component"] for h in hpas.values()} == {"predictor", "canary"}


def test_a_canary_taking_all_traffic_scales_only_the_canary():
    assert floors(isvc(100, minReplicas=2, maxReplicas=4)) == {"sent-canary": (2, 2, 4)}


def test_a_pass_leaves_each_scaled_deployments_replicas_to_its_hpa_and_deletes_the_canary_hpa_with_the_canary():
    kube = GatewayApi(isvc(50, minReplicas=2, maxReplicas=6), served=False)
    run = lambda: reconcile_inference_service(kube, "ml", "sent", PolicySet(),  # noqa: E731
                                              now=lambda: "2026-01-01T00:00:00Z")  # type: ignore[arg-type]
    assert {"HorizontalPodAutoscaler/sent", "HorizontalPodAutoscaler/sent-canary"} <= set(run().created)
    for component in ("predictor", "canary"):  # both HPAs scaled out
        kube.objects[("Deployment", f"sent-{component}")]["spec"]["replicas"] = 3
    assert run().repaired == []
    for obj in kube.objects.values():
        obj["metadata"].setdefault("resourceVersion", "2")  # what the API server would have set
    kube.objects[("InferenceService", "sent")]["spec"]["canaryTrafficPercent"] = 0
    outcome = run()
    assert {"HorizontalPodAutoscaler/sent-canary", "Deployment/sent-canary"} <= set(outcome.deleted)
    assert "HorizontalPodAutoscaler/sent" in outcome.repaired  # its floor is the whole total again: 1 -> 2


def test_an_hpa_over_a_container_without_a_cpu_request_is_refused_naming_it():
    obj = isvc(minReplicas=1, maxReplicas=3)
    obj["spec"]["template"] = {"spec": {"containers": [{"name": "proxy", "image": "envoy:v1"}]}}
    problem = inference_problem(obj)
    assert problem is not None and problem.reason == "MissingCPURequest"
    assert problem.message.startswith('spec.scaling: the autoscaler scales on CPU utilization, but container(s) '
                                      '"proxy" of sent-predictor request no cpu')


def test_a_container_without_a_cpu_request_is_fine_without_an_hpa_or_with_a_cpu_limit():
    sidecar: dict[str, Any] = {"name": "proxy", "image": "envoy:v1"}
    unscaled = isvc(minReplicas=1)
    unscaled["spec"].pop("scaling")
    unscaled["spec"]["template"] = {"spec": {"containers": [sidecar]}}
    assert inference_problem(unscaled) is None
    limited = isvc(minReplicas=1, maxReplicas=3)
    limited["spec"]["template"] = {"spec": {"containers": [{**sidecar, "resources": {"limits": {"cpu": "100m"}}}]}}
    assert inference_problem(limited) is None  # the API server defaults the request to the limit
