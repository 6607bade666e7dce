"""The InferenceService pass refuses a bad name as InvalidName, and says Stalled (ChildRefused, NameConflict) with
a Warning Event and a backoff when the API refuses a child, as the TrainingJob pass does (refusals.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlgate.engine import PolicySet
from mlgate_reconciler.client import ApiError
from mlgate_reconciler.inference import reconcile_inference_service
from mlgate_reconciler.refusals import STALL_BACKOFF

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"


class FakeKube:
    """An in-memory API server: objects by (kind, name) in one namespace; `refuse` answers a create with an error."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in objects}
        self.refuse: dict[tuple[str, str], ApiError] = {}
        self.events: list[dict[str, Any]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, name))
        return copy.deepcopy(found) if found else None

    def get_namespace(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {}}}

    def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        label, _, value = selector.partition("=")
        return [copy.deepcopy(o) for (k, _), o in self.objects.items()
                if k == kind and (o["metadata"].get("labels") or {}).get(label) == value]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Event":
            self.events.append(obj)
            return obj
        at = (obj["kind"], obj["metadata"]["name"])
        if at in self.refuse:
            raise self.refuse[at]
        if at in self.objects:
            raise ApiError(409, "already exists")
        self.objects[at] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def patch(self, api_version: str, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        obj = self.objects[(kind, name)]
        obj["metadata"].update({k: v for k, v in patch.get("metadata", {}).items() if k != "resourceVersion"})
        return copy.deepcopy(obj)

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[(obj["kind"], obj["metadata"]["name"])]["status"] = copy.deepcopy(obj["status"])
        return obj

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return self.objects.pop((kind, name), None) is not None


def isvc(name: str = "sent") -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "ml", "uid": "u-2", "generation": 1, "resourceVersion": "1"},
            "spec": {"modelUri": "s3://m/v3", "runtime": "triton"}}


def run(kube: FakeKube, stamp: str = T0, name: str = "sent") -> Any:
    return reconcile_inference_service(kube, "ml", name, PolicySet(), now=lambda: stamp)  # type: ignore[arg-type]


def conditions(kube: FakeKube, name: str = "sent") -> dict[str, dict[str, Any]]:
    status = kube.objects[("InferenceService", name)].get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


def warnings(kube: FakeKube) -> list[str]:
    return [e["reason"] for e in kube.events if e["type"] == "Warning"]


def test_a_service_name_its_children_cannot_take_fails_with_invalid_name_not_policy_violation():
    kube = FakeKube(isvc("1digit"))
    outcome = run(kube, name="1digit")
    assert outcome.created == []
    admitted = conditions(kube, "1digit")["Admitted"]
    assert (admitted["status"], admitted["reason"]) == ("False", "InvalidName")
    assert admitted["message"].startswith("invalid name: InferenceService '1digit'")
    assert kube.objects[("InferenceService", "1digit")]["status"]["phase"] == "Failed"


def test_a_child_refused_with_422_stalls_the_service_with_child_refused_and_the_others_are_still_created():
    kube = FakeKube(isvc())
    kube.refuse[("Deployment", "sent-predictor")] = ApiError(422, "Deployment.apps is invalid: spec.template")
    outcome = run(kube)
    assert outcome.created == ["Service/sent"]
    stalled = conditions(kube)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "ChildRefused")
    assert "Deployment 'sent-predictor' could not be created: 422: Deployment.apps is invalid" in stalled["message"]
    assert "fix the service's spec" in stalled["message"]
    assert warnings(kube) == ["ChildRefused"]
    assert outcome.requeue_after == STALL_BACKOFF[0]


def test_a_stalled_service_backs_off_for_as_long_as_it_has_been_stalled_and_warns_once():
    kube = FakeKube(isvc())
    kube.refuse[("Deployment", "sent-predictor")] = ApiError(403, "admission webhook denied the request")
    run(kube, T0)
    outcome = run(kube, T1)
    assert outcome.requeue_after == 40.0
    assert warnings(kube) == ["ChildRefused"]


def test_a_same_named_deployment_someone_else_controls_stalls_the_service_with_name_conflict():
    other = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "sent-predictor", "namespace": "ml",
                          "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "x", "controller": True}]}}
    kube = FakeKube(isvc(), other)
    outcome = run(kube)
    stalled = conditions(kube)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "NameConflict")
    assert stalled["message"].startswith("Deployment 'sent-predictor' exists and belongs to ReplicaSet 'web', not "
                                         "to this service")
    assert warnings(kube) == ["NameConflict"]
    assert outcome.requeue_after == STALL_BACKOFF[0]  # not the conflict's flat 30 s


def test_a_stall_cleared_says_progressing_with_a_normal_event_and_stops_the_backoff():
    kube = FakeKube(isvc())
    kube.refuse[("Deployment", "sent-predictor")] = ApiError(422, "invalid")
    run(kube, T0)
    kube.refuse.clear()
    outcome = run(kube, T2)
    stalled = conditions(kube)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("False", "Progressing")
    assert outcome.requeue_after is None
    assert [e["reason"] for e in kube.events if e["type"] == "Normal"][-1] == "Progressing"


def test_a_server_error_on_create_still_raises():
    kube = FakeKube(isvc())
    kube.refuse[("Deployment", "sent-predictor")] = ApiError(500, "etcd timeout")
    with pytest.raises(ApiError, match="500: etcd timeout"):  # the pass is retried as a whole
        run(kube)
