"""Edges of the TrainingJob pass against the real API server: names the CRD accepts but children cannot use,
lowering replicas, a name another owner holds (for an InferenceService too), and a policy refusal fixed in the
spec."""

from __future__ import annotations

import json
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import example, in_namespace, trainingjob
from reconciler_steps import names, reconcile

from mlgate.engine import PolicySet
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.inference import reconcile_inference_service

pytestmark = pytest.mark.e2e


def create_job(cluster: ControlPlane, namespace: str, name: str = "llm", **spec: Any) -> None:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob(name, **spec), namespace)).check()


def condition(cluster: ControlPlane, namespace: str, name: str, kind: str) -> dict[str, Any]:
    status = cluster.get_object("trainingjob", name, namespace).get("status") or {}
    found: dict[str, Any] = next(c for c in status.get("conditions") or [] if c["type"] == kind)
    return found


def event_reasons(cluster: ControlPlane, namespace: str, name: str) -> list[str]:
    out = cluster.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                          "-o", "json").check()
    return sorted(f"{e['type']}/{e['reason']}" for e in json.loads(out.stdout)["items"])


def patch_spec(cluster: ControlPlane, namespace: str, spec: dict[str, Any], name: str = "llm") -> None:
    cluster.kubectl("patch", "trainingjob", name, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": spec})).check()


@pytest.mark.parametrize("name", ["1digit", "my.job", "a" * 55])
def test_a_job_name_its_children_cannot_use_fails_with_invalid_name_and_creates_nothing(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet, name: str):
    create_job(cluster, namespace, name)
    outcome, _ = reconcile(transport, policies, namespace, name)
    assert outcome.created == []
    assert names(cluster, "pods", namespace) == names(cluster, "services", namespace) == []
    failed = condition(cluster, namespace, name, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidName")
    assert failed["message"].startswith(f"invalid name: TrainingJob {name!r} cannot name its children")
    assert cluster.get_object("trainingjob", name, namespace)["status"]["phase"] == "Failed"
    assert event_reasons(cluster, namespace, name) == ["Warning/InvalidName"]
    assert dict(reconcile(transport, policies, namespace, name)[1].writes) == {}


def test_lowering_the_replicas_deletes_the_pods_beyond_the_new_count(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, replicas=3)
    reconcile(transport, policies, namespace)
    patch_spec(cluster, namespace, {"replicas": 2})
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.deleted == ["Pod/llm-worker-1"]
    assert names(cluster, "pods", namespace) == ["llm-master-0", "llm-worker-0"]
    assert names(cluster, "services", namespace) == ["llm"]


def test_turning_gang_scheduling_off_deletes_the_podgroup(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, scheduling={"gang": True, "scheduler": "volcano"})
    reconcile(transport, policies, namespace)
    assert names(cluster, "podgroups.scheduling.volcano.sh", namespace) == ["llm"]
    patch_spec(cluster, namespace, {"scheduling": {"gang": False, "scheduler": "volcano"}})
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.deleted == ["PodGroup/llm"]
    assert names(cluster, "podgroups.scheduling.volcano.sh", namespace) == []


def test_a_service_name_held_by_another_object_stalls_the_job_with_name_conflict_and_a_backoff(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    cluster.kubectl("create", "service", "clusterip", "llm", "--tcp=80:8080", "-n", namespace).check()
    create_job(cluster, namespace)
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.conflicts == {"Service/llm": "no controller"}
    assert not outcome.requeue and outcome.requeue_after is not None and outcome.requeue_after >= 5
    stalled = condition(cluster, namespace, "llm", "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "NameConflict")
    assert "Service 'llm' exists and belongs to no controller" in stalled["message"]
    assert "Warning/NameConflict" in event_reasons(cluster, namespace, "llm")
    _, client = reconcile(transport, policies, namespace)
    assert dict(client.writes) == {"create Service": 1}  # the refused create only: no status or event churn
    cluster.kubectl("delete", "service", "llm", "-n", namespace).check()
    reconcile(transport, policies, namespace)
    assert condition(cluster, namespace, "llm", "Stalled")["status"] == "False"
    assert names(cluster, "services", namespace) == ["llm"]


def test_a_service_name_held_by_another_object_stalls_an_inference_service_with_name_conflict_too(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    cluster.kubectl("create", "service", "clusterip", "sentiment", "--tcp=80:8080", "-n", namespace).check()
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(example("inferenceservice.yaml"), namespace)).check()
    outcome = reconcile_inference_service(KubeClient(transport), namespace, "sentiment", policies)
    assert outcome.conflicts == {"Service/sentiment": "no controller"}
    assert outcome.requeue_after is not None and outcome.requeue_after >= 5
    status = cluster.get_object("inferenceservice", "sentiment", namespace)["status"]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "NameConflict")
    assert "not to this service" in stalled["message"]
    assert "Warning/NameConflict" in event_reasons(cluster, namespace, "sentiment")


def test_a_policy_refused_job_is_materialized_once_its_spec_is_fixed(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create_job(cluster, namespace, resources={"gpu": 12, "cpu": "4", "memory": "16Gi"})
    reconcile(transport, policies, namespace)
    assert condition(cluster, namespace, "llm", "Failed")["reason"] == "PolicyViolation"
    patch_spec(cluster, namespace, {"resources": {"gpu": 1, "cpu": "4", "memory": "16Gi"}})
    outcome, _ = reconcile(transport, policies, namespace)
    assert sorted(outcome.created) == ["Pod/llm-master-0", "Pod/llm-worker-0", "Service/llm"]
    status = cluster.get_object("trainingjob", "llm", namespace)["status"]
    assert status["phase"] == "Created"
    assert "completionTime" not in status
    assert all(c["type"] != "Failed" for c in status["conditions"])
