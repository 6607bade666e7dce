"""Kueue queues: a job labelled for a LocalQueue that does not exist, whose ClusterQueue is missing, stopped or
does not admit the namespace, or has no flavor large enough for its GPUs, stays suspended for ever; it is told so
at admission, with the numbers."""

from __future__ import annotations

from typing import Any

from builders import DELETE, change, decide, pod, pytorchjob

from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome

# kueue.x-k8s.io/v1beta2 shapes (kueue apis/kueue/v1beta2/{localqueue,clusterqueue}_types.go)
LOCAL_QUEUE: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                               "metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "gpus"}}
CLUSTER_QUEUE: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpus"},
    "spec": {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "nvidia.com/gpu"],
        "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": 64},
                                                   {"name": "nvidia.com/gpu", "nominalQuota": 8}]},
                    {"name": "h100", "resources": [{"name": "cpu", "nominalQuota": 64},
                                                   {"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "a"}}}
QUEUED = change(pytorchjob(workers=3, gpus=2), "/metadata/labels", {"kueue.x-k8s.io/queue-name": "team"})


def judged(obj: dict[str, Any], rule: str, *objects: dict[str, Any]):
    (result,) = decide(obj, rule, facts=StaticFacts.from_objects((NAMESPACE, *objects))).results
    return result


def details(obj: dict[str, Any], rule: str, *objects: dict[str, Any]) -> list[str]:
    return [f.detail for f in judged(obj, rule, *objects).findings]


# --- capacity.queue -----------------------------------------------------------------------------------------


def test_a_job_in_a_queue_whose_cluster_queue_admits_its_namespace_passes():
    assert judged(QUEUED, "capacity.queue", LOCAL_QUEUE, CLUSTER_QUEUE).outcome is Outcome.PASS


def test_a_local_queue_that_does_not_exist_is_named_with_the_namespace():
    other = change(LOCAL_QUEUE, "/metadata/name", "other")
    result = judged(QUEUED, "capacity.queue", other, CLUSTER_QUEUE)
    (finding,) = result.findings
    assert finding.path == "/metadata/labels/kueue.x-k8s.io~1queue-name"
    assert finding.detail == ('LocalQueue "team" does not exist in namespace ml, so Kueue keeps PyTorchJob '
                              "'mnist' suspended")


def test_a_local_queue_pointing_to_a_missing_cluster_queue_is_refused():
    assert details(QUEUED, "capacity.queue", LOCAL_QUEUE) == [
        'LocalQueue "team" points to ClusterQueue "gpus", which does not exist, so the job stays suspended']


def test_a_cluster_queue_whose_selector_leaves_the_namespace_out_is_refused():
    selective = change(CLUSTER_QUEUE, "/spec/namespaceSelector", {"matchLabels": {"team": "b"}})
    assert details(QUEUED, "capacity.queue", LOCAL_QUEUE, selective) == [
        'ClusterQueue "gpus" (of LocalQueue "team") does not select namespace ml with its namespaceSelector, so '
        "Kueue never admits the job"]


def test_a_cluster_queue_without_a_namespace_selector_admits_no_namespace():
    unset = change(CLUSTER_QUEUE, "/spec/namespaceSelector", DELETE)
    assert judged(QUEUED, "capacity.queue", LOCAL_QUEUE, unset).outcome is Outcome.FAIL


def test_a_stopped_cluster_queue_is_refused():
    held = change(CLUSTER_QUEUE, "/spec/stopPolicy", "Hold")
    assert judged(QUEUED, "capacity.queue", LOCAL_QUEUE, held).outcome is Outcome.FAIL


def test_facts_without_kueue_queues_say_the_rule_could_not_look():
    result = judged(QUEUED, "capacity.queue")
    assert result.outcome is Outcome.SKIP and result.unchecked


def test_a_job_without_a_queue_label_is_skipped():
    assert judged(pytorchjob(), "capacity.queue", LOCAL_QUEUE, CLUSTER_QUEUE).outcome is Outcome.SKIP


def test_a_bare_pod_is_judged_by_its_own_queue_label():
    queued_pod = change(pod(gpus=1), "/metadata/labels", {"kueue.x-k8s.io/queue-name": "missing"})
    assert judged(queued_pod, "capacity.queue", LOCAL_QUEUE, CLUSTER_QUEUE).outcome is Outcome.FAIL


# --- capacity.queue-gpus ------------------------------------------------------------------------------------


def test_a_job_that_fits_a_flavor_passes():
    assert judged(QUEUED, "capacity.queue-gpus", LOCAL_QUEUE, CLUSTER_QUEUE).outcome is Outcome.PASS


def test_a_cluster_queue_that_covers_no_gpus_is_refused():
    cpu_only = change(CLUSTER_QUEUE, "/spec/resourceGroups", [{"coveredResources": ["cpu"], "flavors": [
        {"name": "cpu", "resources": [{"name": "cpu", "nominalQuota": 64}]}]}])
    assert details(QUEUED, "capacity.queue-gpus", LOCAL_QUEUE, cpu_only) == [
        'ClusterQueue "gpus" (of LocalQueue "team") covers no nvidia.com/gpu, so Kueue never admits the job']


def test_a_pod_set_larger_than_every_flavor_is_refused_with_the_flavors():
    big = change(QUEUED, "/spec/pytorchReplicaSpecs/Worker/replicas", 5)  # 5 x 2 = 10 > 8
    assert details(big, "capacity.queue-gpus", LOCAL_QUEUE, CLUSTER_QUEUE) == [
        'the 5 Worker pods ask for 10 nvidia.com/gpu, but the largest flavor of ClusterQueue "gpus" has a nominal '
        "quota of 8 (a100: 8, h100: 4)"]


def test_a_job_larger_than_all_flavors_together_is_refused():
    two_workers = change(QUEUED, "/spec/pytorchReplicaSpecs/Worker/replicas", 2)  # pod sets of 2 and 4: total 6
    small = change(CLUSTER_QUEUE, "/spec/resourceGroups/0/flavors/0/resources/1/nominalQuota", 4)
    small = change(small, "/spec/resourceGroups/0/flavors/1/resources/1/nominalQuota", 1)
    assert details(two_workers, "capacity.queue-gpus", LOCAL_QUEUE, small) == [
        "PyTorchJob 'mnist' asks for 6 nvidia.com/gpu in all, but ClusterQueue \"gpus\" has 5 in all of its "
        "flavors (a100: 4, h100: 1)"]


def test_a_cluster_queue_in_a_cohort_may_borrow_so_its_size_is_not_judged():
    big = change(QUEUED, "/spec/pytorchReplicaSpecs/Worker/replicas", 5)
    cohort = change(CLUSTER_QUEUE, "/spec/cohortName", "research")
    assert judged(big, "capacity.queue-gpus", LOCAL_QUEUE, cohort).outcome is Outcome.PASS
