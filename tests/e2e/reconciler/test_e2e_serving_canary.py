"""The canary split by an HTTPRoute on the real API server, with the Gateway API's own HTTPRoute CRD installed
(tests/e2e_crds_gateway: the upstream standard-channel copy) for this module only and removed after it, so the
other tests keep an API server that does not serve HTTPRoute (test_e2e_serving.py covers that case)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from control_plane import REPO, ControlPlane
from e2e_objects import example, in_namespace

from mlgate.engine import PolicySet
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.inference import reconcile_inference_service
from mlgate_reconciler.results import PassResult

pytestmark = pytest.mark.e2e

HTTPROUTE_CRD = REPO / "tests" / "e2e_crds_gateway" / "gateway.networking.k8s.io_httproutes.yaml"
CRD_NAME = "httproutes.gateway.networking.k8s.io"


@pytest.fixture(scope="module", autouse=True)
def gateway_api(cluster: ControlPlane) -> Iterator[None]:
    cluster.kubectl("apply", "--server-side", "-f", str(HTTPROUTE_CRD), timeout=60).check()
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", CRD_NAME, timeout=70).check()
    yield
    cluster.kubectl("delete", "crd", CRD_NAME, "--wait=true", timeout=70).check()


def create_isvc(cluster: ControlPlane, namespace: str, **spec: Any) -> None:
    obj = in_namespace(example("inferenceservice.yaml"), namespace)  # canaryTrafficPercent 10
    obj["spec"].update(spec)
    cluster.kubectl("create", "-f", "-", stdin=obj).check()


def reconcile(transport: Transport, policies: PolicySet, namespace: str) -> tuple[PassResult, KubeClient]:
    client = KubeClient(transport)
    return reconcile_inference_service(client, namespace, "sentiment", policies), client


def weights(cluster: ControlPlane, namespace: str) -> dict[str, int]:
    route = cluster.get_object("httproute", "sentiment", namespace)
    (rule,) = route["spec"]["rules"]
    return {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}


def accept_route(cluster: ControlPlane, namespace: str) -> None:
    """What a GAMMA mesh writes once it applies the route (gateway-api v1.6.1 RouteParentStatus)."""
    generation = cluster.get_object("httproute", "sentiment", namespace)["metadata"]["generation"]
    conditions = [{"type": kind, "status": "True", "reason": kind, "message": "", "observedGeneration": generation,
                   "lastTransitionTime": "2026-01-01T00:00:00Z"} for kind in ("Accepted", "ResolvedRefs")]
    status = {"parents": [{"parentRef": {"group": "", "kind": "Service", "name": "sentiment", "sectionName": "http"},
                           "controllerName": "mesh.example.com/gamma", "conditions": conditions}]}
    cluster.kubectl("patch", "httproute", "sentiment", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status})).check()


def split_condition(cluster: ControlPlane, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    status = cluster.get_object("inferenceservice", "sentiment", namespace)["status"]
    return status["canary"], next(c for c in status["conditions"] if c["type"] == "CanarySplitExact")


def test_the_httproute_weights_equal_canary_traffic_percent_and_the_split_is_exact_once_the_route_is_accepted(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    outcome, _ = reconcile(transport, policies, namespace)
    assert {"HTTPRoute/sentiment", "Service/sentiment-predictor", "Service/sentiment-canary"} <= set(outcome.created)
    assert weights(cluster, namespace) == {"sentiment-predictor": 90, "sentiment-canary": 10}
    canary, split = split_condition(cluster, namespace)  # the CRD is served, but nothing applies the route
    assert (canary["split"], split["status"], split["reason"]) == ("PodRatio", "False", "RouteNotAccepted")
    accept_route(cluster, namespace)
    reconcile(transport, policies, namespace)
    canary, split = split_condition(cluster, namespace)
    assert canary == {"trafficPercent": 10, "requestedPercent": 10, "split": "HTTPRoute"}
    assert (split["status"], split["reason"]) == ("True", "HTTPRoute")


def test_each_backend_service_selects_only_its_components_pods_on_the_runtimes_port(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    for component in ("predictor", "canary"):
        service = cluster.get_object("service", f"sentiment-{component}", namespace)["spec"]
        labels = cluster.get_object("deployment", f"sentiment-{component}", namespace)["spec"]["template"]["metadata"]
        assert service["selector"].items() <= labels["labels"].items()
        assert service["selector"]["mlgate.dev/component"] == component
        assert {p["name"]: p["targetPort"] for p in service["ports"]} == {"http": 8080, "grpc": 9000}


def test_a_second_pass_over_a_routed_canary_makes_zero_writes(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    outcome, client = reconcile(transport, policies, namespace)
    assert sum(client.writes.values()) == 0, (client.writes, outcome)


def test_a_new_canary_percentage_moves_the_weights_and_turning_it_off_deletes_the_route(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_isvc(cluster, namespace)
    reconcile(transport, policies, namespace)
    cluster.kubectl("patch", "inferenceservice", "sentiment", "-n", namespace, "--type=merge",
                    "-p", '{"spec": {"canaryTrafficPercent": 35}}').check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert "HTTPRoute/sentiment" in outcome.repaired
    assert weights(cluster, namespace) == {"sentiment-predictor": 65, "sentiment-canary": 35}
    cluster.kubectl("patch", "inferenceservice", "sentiment", "-n", namespace, "--type=merge",
                    "-p", '{"spec": {"canaryTrafficPercent": 0}}').check()
    outcome, _ = reconcile(transport, policies, namespace)
    assert {"HTTPRoute/sentiment", "Service/sentiment-canary", "Service/sentiment-predictor",
            "Deployment/sentiment-canary"} <= set(outcome.deleted)
    status = cluster.get_object("inferenceservice", "sentiment", namespace)["status"]
    assert "canary" not in status
