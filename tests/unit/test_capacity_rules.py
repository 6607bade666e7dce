"""Capacity: a job that can never fit its namespace's quota or the cluster's nodes is refused with the numbers;
one that fits but must wait is told for how much; a PriorityClass that does not exist is refused."""

from __future__ import annotations

from typing import Any

import pytest
from builders import change, decide, outcome, pod, pytorchjob

from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome

QUOTA: dict[str, Any] = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "ml"},
                         "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}


def node(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": resources, "capacity": resources}}


def judged(obj: dict[str, Any], rule: str, *facts: dict[str, Any], **kwargs: Any):
    (result,) = decide(obj, rule, facts=StaticFacts.from_objects(facts), **kwargs).results
    return result


# --- capacity.quota ---------------------------------------------------------------------------------------


def test_a_job_asking_more_gpus_than_the_quota_allows_is_refused_with_the_numbers():
    result = judged(pytorchjob(workers=3, gpus=4), "capacity.quota", QUOTA)
    (finding,) = result.findings
    assert finding.detail == ("PyTorchJob 'mnist' asks for 16 requests.nvidia.com/gpu in all, but ResourceQuota "
                              "'gpus' in namespace ml allows 8")


def test_a_job_within_the_quota_passes():
    assert judged(pytorchjob(workers=1, gpus=4), "capacity.quota", QUOTA).outcome is Outcome.PASS


def test_pods_and_cpu_quotas_count_every_pod():
    hard = change(QUOTA, "/spec/hard", {"count/pods": "3", "cpu": "100"})
    assert [f.detail.split(" in all")[0] for f in judged(pytorchjob(workers=3), "capacity.quota", hard).findings] \
        == ["PyTorchJob 'mnist' asks for 4 count/pods"]


@pytest.mark.parametrize(("scope", "charged"), [
    ({"scopes": ["NotTerminating"]}, True),
    ({"scopes": ["Terminating"]}, False),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                              "values": ["high"]}]}}, False),
    ({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "DoesNotExist"}]}}, True),
])
def test_a_quota_charges_only_the_pods_its_scopes_match(scope: dict[str, Any], charged: bool):
    scoped = change(QUOTA, "/spec", {**QUOTA["spec"], **scope})
    result = judged(pytorchjob(workers=3, gpus=4), "capacity.quota", scoped)
    assert (result.outcome is Outcome.FAIL) is charged


def test_without_facts_the_quota_check_says_it_could_not_look():
    (result,) = decide(pytorchjob(), "capacity.quota").results
    assert result.outcome is Outcome.SKIP and result.unchecked


# --- capacity.quota-available ------------------------------------------------------------------------------


def test_a_job_that_fits_the_quota_but_not_what_is_left_is_told_how_long_it_waits():
    used = change(QUOTA, "/status", {"used": {"requests.nvidia.com/gpu": "6"}})
    (finding,) = judged(pytorchjob(workers=1, gpus=2), "capacity.quota-available", used).findings
    assert finding.detail == ("PyTorchJob 'mnist' asks for 4 requests.nvidia.com/gpu, but ResourceQuota 'gpus' has "
                              "2 of 8 left (6 used): its pods wait until 2 more are free")


def test_an_update_is_not_told_to_wait_for_its_own_pods():
    used = change(QUOTA, "/status", {"used": {"requests.nvidia.com/gpu": "8"}})
    job = pytorchjob(workers=1, gpus=2)
    assert judged(job, "capacity.quota-available", used, operation="UPDATE", old_obj=job).outcome is Outcome.SKIP


# --- capacity.nodes ----------------------------------------------------------------------------------------


def test_a_pod_asking_more_gpus_than_the_largest_node_has_is_refused():
    (finding,) = judged(pod(gpus=16), "capacity.nodes", node("a", 8), node("b", 4)).findings
    assert finding.detail == ("the pod asks for 16 nvidia.com/gpu, but the largest node it may run on has 8 "
                              "(2 of 2 nodes match its node selection)")


def test_only_the_nodes_a_pod_may_run_on_count():
    picky = change(pod(gpus=8), "/spec/nodeSelector", {"pool": "small"})
    facts = (node("big", 8, pool="large"), node("small", 4, pool="small"))
    assert [f.reason for f in judged(picky, "capacity.nodes", *facts).findings] == ["no node large enough"]
    assert judged(pod(gpus=8), "capacity.nodes", *facts).outcome is Outcome.PASS


def test_a_job_needing_more_gpus_at_once_than_all_its_nodes_have_is_refused():
    result = judged(pytorchjob(workers=3, gpus=8), "capacity.nodes", node("a", 8), node("b", 8))
    (finding,) = result.findings
    assert finding.detail == ("PyTorchJob 'mnist' needs 32 nvidia.com/gpu at once, but the nodes its pods may run on "
                              "have 16 in all")


def test_an_unschedulable_node_does_not_count():
    cordoned = change(node("a", 16), "/spec/unschedulable", True)
    assert [f.reason for f in judged(pod(gpus=16), "capacity.nodes", cordoned, node("b", 8)).findings] == \
        ["no node large enough"]


# --- capacity.priority-class -------------------------------------------------------------------------------


def test_a_priority_class_that_does_not_exist_is_refused():
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 10}
    missing = change(pod(), "/spec/priorityClassName", "urgent")
    assert [f.reason for f in judged(missing, "capacity.priority-class", high).findings] == \
        ["priority class not found"]
    assert judged(change(pod(), "/spec/priorityClassName", "high"), "capacity.priority-class", high).outcome \
        is Outcome.PASS
    assert judged(change(pod(), "/spec/priorityClassName", "system-node-critical"), "capacity.priority-class",
                  high).outcome is Outcome.PASS


def test_a_pod_without_a_priority_class_is_skipped():
    assert outcome(pod(), "capacity.priority-class") is Outcome.SKIP


# --- capacity.limit-range ----------------------------------------------------------------------------------

LIMITS: dict[str, Any] = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "sizes", "namespace": "ml"},
                          "spec": {"limits": [{"type": "Container", "max": {"memory": "64Gi"},
                                               "min": {"cpu": "100m"}, "maxLimitRequestRatio": {"cpu": "4"}}]}}
RESOURCES = "/spec/containers/0/resources"


def test_a_container_within_the_limit_range_passes():
    sized = change(pod(), RESOURCES, {"limits": {"memory": "32Gi", "cpu": "2"}, "requests": {"cpu": "1"}})
    assert judged(sized, "capacity.limit-range", LIMITS).outcome is Outcome.PASS


@pytest.mark.parametrize(("resources", "reason"), [
    ({"limits": {"memory": "128Gi"}}, "above limit range"),
    ({"requests": {"cpu": "50m"}}, "below limit range"),
    ({"limits": {"cpu": "8"}, "requests": {"cpu": "1"}}, "limit to request ratio too high"),
])
def test_a_container_outside_the_limit_range_is_told_the_api_server_will_refuse_its_pods(resources, reason):
    (finding,) = judged(change(pod(), RESOURCES, resources), "capacity.limit-range", LIMITS).findings
    assert (finding.reason, finding.path) == (reason, RESOURCES)


def test_a_limit_range_default_above_its_max_counts_for_a_container_without_a_limit():
    defaulted = change(LIMITS, "/spec/limits/0/default", {"memory": "96Gi"})
    assert [f.reason for f in judged(pod(), "capacity.limit-range", defaulted).findings] == ["above limit range"]


def test_a_pod_limit_range_counts_the_whole_pod():
    per_pod = change(LIMITS, "/spec/limits", [{"type": "Pod", "max": {"nvidia.com/gpu": "2"}}])
    assert [f.detail for f in judged(pod(gpus=4), "capacity.limit-range", per_pod).findings] == [
        "the pod has a nvidia.com/gpu limit of 4, above the 2 LimitRange 'sizes' allows: the API server refuses its "
        "pods"]
