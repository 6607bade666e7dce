"""A truthful canary: an HTTPRoute (gateway.networking.k8s.io/v1) with the exact weights where the API server serves
it, said to be exact only once an implementation reports it Accepted with ResolvedRefs, else the pod-ratio split
with its realized share in status.canary and CanarySplitExact."""

from __future__ import annotations

from typing import Any

import pytest
from test_pass_inference_refusals import FakeKube  # the in-memory API server of the pass tests

from mlgate.engine import PolicySet
from mlgate_reconciler.children import ChildKey, key
from mlgate_reconciler.client import ApiError
from mlgate_reconciler.desired_inference import desired_inference_children
from mlgate_reconciler.inference import inference_status, reconcile_inference_service

T0 = "2026-01-01T00:00:00Z"


def isvc(pct: int = 10, min_replicas: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2", "generation": 1, "resourceVersion": "1"},
            "spec": {"modelUri": "s3://models/sent/v3", "runtime": "triton", "canaryTrafficPercent": pct,
                     "canary": {"modelUri": "s3://models/sent/v4"}, "scaling": {"minReplicas": min_replicas},
                     **spec}}


def by_name(children: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in children}


def route_status(accepted: str = "True", resolved: str = "True", observed: int = 1,
                 parent: str = "sent") -> dict[str, Any]:
    """status.parents as a mesh writes it for a Service parent (gateway-api apis/v1/shared_types.go)."""
    conditions = [{"type": kind, "status": status, "reason": kind, "observedGeneration": observed}
                  for kind, status in (("Accepted", accepted), ("ResolvedRefs", resolved))]
    return {"parents": [{"parentRef": {"group": "", "kind": "Service", "name": parent, "sectionName": "http"},
                         "controllerName": "mesh.example.com/gamma", "conditions": conditions}]}


def owned(obj: dict[str, Any], *, routed: bool, ready: tuple[int, int] = (0, 0),
          route: dict[str, Any] | None = None) -> dict[ChildKey, dict[str, Any]]:
    """The desired children as observed: Deployments with `ready` replicas, the route with `route` as its status
    (accepted by default) at generation 1."""
    children = desired_inference_children(obj, routed=routed)
    for child in children:
        if child["kind"] == "Deployment":
            count = ready[0] if child["metadata"]["name"].endswith("predictor") else ready[1]
            child["status"] = {"readyReplicas": count}
        if child["kind"] == "HTTPRoute":
            child["metadata"]["generation"] = 1
            child["status"] = route_status() if route is None else route
    return {key(child): child for child in children}


def cond(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == kind), None)


class GatewayApi(FakeKube):
    """The pass tests' API server, serving HTTPRoute or not (discovery); with `served` False, any HTTPRoute
    create would be a 404 as well."""

    def __init__(self, *objects: dict[str, Any], served: bool) -> None:
        super().__init__(*objects)
        self.served = served
        self.asked = 0

    def serves(self, api_version: str, kind: str) -> bool:
        self.asked += 1
        return self.served and (api_version, kind) == ("gateway.networking.k8s.io/v1", "HTTPRoute")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "HTTPRoute" and not self.served:
            raise ApiError(404, "the server could not find the requested resource")
        return super().create(obj)


def run(kube: FakeKube) -> Any:
    return reconcile_inference_service(kube, "ml", "sent", PolicySet(), now=lambda: T0)  # type: ignore[arg-type]


@pytest.mark.parametrize("pct", [1, 10, 50, 100])
def test_the_route_sends_exactly_canary_traffic_percent_to_the_canary_service(pct):
    route = by_name(desired_inference_children(isvc(pct)))["HTTPRoute/sent"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    (rule,) = route["spec"]["rules"]
    weights = {b["name"]: b["weight"] for b in rule["backendRefs"]}
    assert weights == {"sent-predictor": 100 - pct, "sent-canary": pct}
    assert all((b["group"], b["kind"], b["port"]) == ("", "Service", 80) for b in rule["backendRefs"])
    assert route["spec"]["parentRefs"] == [{"group": "", "kind": "Service", "name": "sent", "sectionName": "http"}]


def test_with_a_route_each_backend_service_selects_only_its_own_component():
    children = by_name(desired_inference_children(isvc()))
    for component in ("predictor", "canary"):
        service = children[f"Service/sent-{component}"]
        pods = children[f"Deployment/sent-{component}"]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pods.items()
        assert service["spec"]["selector"]["mlgate.dev/component"] == component


def test_without_the_gateway_api_there_is_neither_a_route_nor_backend_services():
    assert sorted(by_name(desired_inference_children(isvc(), routed=False))) == [
        "Deployment/sent-canary", "Deployment/sent-predictor", "HorizontalPodAutoscaler/sent",
        "HorizontalPodAutoscaler/sent-canary", "Service/sent"]


def test_without_a_canary_there_is_no_route():
    assert not any(c["kind"] == "HTTPRoute" for c in desired_inference_children(isvc(0)))


def test_a_routed_canary_reports_the_exact_split_once_the_route_is_accepted_with_resolved_refs():
    status = inference_status(None, isvc(), owned(isvc(), routed=True), None, T0)
    assert status["canary"] == {"trafficPercent": 10, "requestedPercent": 10, "split": "HTTPRoute"}
    split = cond(status, "CanarySplitExact")
    assert split is not None and (split["status"], split["reason"]) == ("True", "HTTPRoute")


@pytest.mark.parametrize("route", [
    {},  # served CRD, no implementation: nobody writes status
    route_status(accepted="False"),
    route_status(resolved="False"),
    route_status(observed=0),  # accepted, but an older generation of the weights
    route_status(parent="another-service"),
], ids=["no-status", "not-accepted", "refs-unresolved", "stale-generation", "another-parent"])
def test_canary_split_exact_stays_false_until_the_route_is_accepted(route):
    status = inference_status(None, isvc(), owned(isvc(), routed=True, route=route), None, T0)
    split = cond(status, "CanarySplitExact")
    assert split is not None and (split["status"], split["reason"]) == ("False", "RouteNotAccepted")
    assert split["message"].startswith("HTTPRoute 'sent' is not reported Accepted with ResolvedRefs")
    assert status["canary"] == {"trafficPercent": 50, "requestedPercent": 10, "split": "PodRatio"}


def test_a_pod_ratio_split_far_from_the_asked_one_says_so_with_its_realized_share():
    status = inference_status(None, isvc(), owned(isvc(), routed=False), None, T0)
    assert status["canary"] == {"trafficPercent": 50, "requestedPercent": 10, "split": "PodRatio"}
    split = cond(status, "CanarySplitExact")
    assert split is not None and (split["status"], split["reason"]) == ("False", "PodRatio")
    assert split["message"].startswith("the pod ratio sends 50% of connections to the canary (1 of 2 desired "
                                       "replicas); 10% was asked")


def test_a_pod_ratio_split_within_five_points_is_exact_enough():
    obj = isvc(min_replicas=10)
    status = inference_status(None, obj, owned(obj, routed=False), None, T0)
    assert status["canary"]["trafficPercent"] == 10
    split = cond(status, "CanarySplitExact")
    assert split is not None and (split["status"], split["reason"]) == ("True", "PodRatio")


def test_the_realized_pod_ratio_counts_ready_pods_once_there_are_any():
    obj = isvc(pct=25, min_replicas=4)
    status = inference_status(None, obj, owned(obj, routed=False, ready=(5, 1)), None, T0)  # the HPA scaled out
    assert status["canary"]["trafficPercent"] == 17  # 1 of 6 ready pods, rounded half up
    split = cond(status, "CanarySplitExact")
    assert split is not None and split["status"] == "False"


def test_turning_the_canary_off_removes_the_split_from_the_status():
    before = inference_status(None, isvc(), owned(isvc(), routed=False), None, T0)
    off = isvc(0)
    status = inference_status(before, off, owned(off, routed=False), None, T0)
    assert "canary" not in status
    assert cond(status, "CanarySplitExact") is None


def test_a_pass_without_the_gateway_api_keeps_the_pod_ratio_and_is_not_stalled():
    kube = GatewayApi(isvc(), served=False)
    outcome = run(kube)
    assert sorted(outcome.created) == ["Deployment/sent-canary", "Deployment/sent-predictor",
                                       "HorizontalPodAutoscaler/sent", "HorizontalPodAutoscaler/sent-canary",
                                       "Service/sent"]
    status = kube.objects[("InferenceService", "sent")]["status"]
    assert status["canary"]["split"] == "PodRatio"
    assert cond(status, "Stalled") is None
    second = run(kube)
    assert (second.wrote, kube.asked) == (False, 2)  # asked again, by a read: the CRDs may come later


def test_a_pass_with_the_gateway_api_writes_the_route_and_reports_it_exact_once_it_is_accepted():
    kube = GatewayApi(isvc(), served=True)
    outcome = run(kube)
    assert {"HTTPRoute/sent", "Service/sent-predictor", "Service/sent-canary"} <= set(outcome.created)
    status = kube.objects[("InferenceService", "sent")]["status"]
    assert (status["canary"]["split"], cond(status, "CanarySplitExact")["reason"]) == ("PodRatio", "RouteNotAccepted")
    kube.objects[("HTTPRoute", "sent")]["status"] = route_status()  # a mesh accepts it
    run(kube)
    status = kube.objects[("InferenceService", "sent")]["status"]
    assert (status["canary"]["split"], cond(status, "CanarySplitExact")["status"]) == ("HTTPRoute", "True")
    assert kube.asked == 1  # the route it owns says the kind is served


def test_a_pass_without_a_canary_never_asks_for_the_gateway_api():
    kube = GatewayApi(isvc(0), served=True)
    run(kube)
    assert kube.asked == 0


def test_a_pass_refuses_a_model_uri_it_cannot_fetch_and_creates_nothing():
    kube = FakeKube(isvc(0, modelUri="ftp://models/sent/v3"))
    outcome = run(kube)
    assert outcome.created == []
    status = kube.objects[("InferenceService", "sent")]["status"]
    admitted = cond(status, "Admitted")
    assert (status["phase"], admitted and admitted["reason"]) == ("Failed", "UnsupportedModelUri")
