"""Gangs that really form: markers where each scheduler reads them (kinds.yaml `gang`, gang_markers).

- Volcano groups a batch Job's pods by their owner: the pods get `schedulerName: volcano` and no group name (a
  group-name annotation without a PodGroup leaves them Pending for ever), the Job its `group-min-member`.
- Coscheduling and KAI gang a Job, a Pod or a JobSet only through a PodGroup nobody here creates: gang.size says so.
- KAI gangs Kubeflow jobs from `runPolicy.schedulingPolicy.minAvailable`; Kueue and YuniKorn gang a job whole.
- YuniKorn task groups are refused where yunikorn-k8shim would refuse them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import change, decide, job, pod, pytorchjob, trainingjob

from mlgate.loading.policies import compile_policy
from mlgate.model.kinds import SCHEDULERS
from mlgate.model.results import Outcome
from mlgate.workloads.catalog import SHIPPED
from tests.kinds.minimal import cases

POD_META = "/spec/template/metadata"
WORKER_META = "/spec/pytorchReplicaSpecs/Worker/template/metadata"
MIN_MEMBER = "scheduling.volcano.sh/group-min-member"


def inject(obj: dict[str, Any], scheduler: str, **params: Any) -> dict[str, Any]:
    decision = decide(obj, "gang.inject", {"scheduler": scheduler, **params})
    assert decision.mutated is not None
    return decision.mutated


def annotations(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = obj
    for key in path:
        node = node.get(key) or {}
    return dict(node.get("annotations") or {})


def size(obj: dict[str, Any]):
    (result,) = decide(obj, "gang.size").results
    return result


def test_volcano_groups_a_batch_job_by_its_owner_with_the_minimum_on_the_job():
    mutated = inject(job(parallelism=4), "volcano", queue="research")
    assert mutated["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    assert annotations(mutated, "spec", "template", "metadata") == {"scheduling.volcano.sh/queue-name": "research"}
    assert annotations(mutated, "metadata") == {MIN_MEMBER: "4"}
    assert size(mutated).outcome is Outcome.PASS


def test_volcano_takes_a_smaller_minimum_for_a_batch_job():
    assert annotations(inject(job(parallelism=4), "volcano", minMember=2), "metadata") == {MIN_MEMBER: "2"}


def test_volcano_gives_a_bare_pod_only_its_scheduler_name():
    mutated = inject(pod(), "volcano")
    assert mutated["spec"]["schedulerName"] == "volcano"
    assert annotations(mutated, "metadata") == {}


def test_volcano_names_a_kubeflow_jobs_podgroup_as_training_operator_creates_it():
    mutated = inject(pytorchjob(workers=3), "volcano")
    assert annotations(mutated, "spec", "pytorchReplicaSpecs", "Worker", "template", "metadata") == {
        "scheduling.k8s.io/group-name": "mnist"}
    assert mutated["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}


def test_a_job_minimum_larger_than_its_pods_is_refused():
    too_many = change(job(parallelism=2), "/metadata/annotations", {MIN_MEMBER: "3"})
    (finding,) = size(too_many).findings
    assert (finding.reason, finding.path) == ("gang minimum exceeds pods", "/metadata/annotations/" +
                                              MIN_MEMBER.replace("/", "~1"))


def test_the_group_key_volcano_does_not_read_is_refused_with_the_one_it_reads():
    unread = change(pytorchjob(), WORKER_META + "/annotations", {"scheduling.volcano.sh/group-name": "mnist"})
    reasons = [f.reason for f in size(unread).findings]
    assert "volcano group key not read" in reasons


def test_a_job_marked_for_coscheduling_says_which_podgroup_must_exist():
    marked = inject(job(parallelism=4), "coscheduling")
    result = size(marked)
    assert result.outcome is Outcome.SKIP
    (reason,) = result.unchecked
    assert 'PodGroup "train" with minMember 4 must exist' in reason and "scheduling.x-k8s.io/v1alpha1" in reason


def test_a_job_for_kai_says_a_gang_needs_a_podgroup():
    marked = inject(job(parallelism=4), "kai", queue="team-a")
    (reason,) = size(marked).unchecked
    assert reason.startswith("kai gangs Job pods only through a scheduling.run.ai/v2alpha2 PodGroup")


def test_a_kubeflow_job_needs_no_podgroup_of_its_own_for_coscheduling():
    assert size(inject(pytorchjob(), "coscheduling")).unchecked == ()


def test_kai_gangs_a_kubeflow_job_by_its_min_available():
    mutated = inject(pytorchjob(workers=3), "kai", minMember=2)
    assert mutated["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}
    assert mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] == "kai-scheduler"


@pytest.mark.parametrize("scheduler", ["kueue", "yunikorn"])
def test_a_minimum_a_scheduler_that_gangs_whole_would_drop_is_a_load_error(scheduler: str):
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "g"},
                "spec": {"rules": [{"rule": "gang.inject", "params": {"scheduler": scheduler, "minMember": 2}}]}}
    policy, errors = compile_policy(document, "g.yaml")
    assert policy is None and "whole" in errors[0].message


def task_groups(**changes: Any) -> dict[str, Any]:
    group = {"name": "worker", "minMember": 2, "minResource": {"cpu": "1", "memory": "1Gi"}, **changes}
    group = {k: v for k, v in group.items() if v is not None}
    obj = change(pytorchjob(workers=2), WORKER_META + "/annotations", {
        "yunikorn.apache.org/task-group-name": "worker", "yunikorn.apache.org/task-groups": json.dumps([group])})
    return change(obj, WORKER_META + "/labels", {"yunikorn.apache.org/app-id": "ml-mnist"})


@pytest.mark.parametrize(("changes", "problem"), [
    ({"minMember": 0}, "minMember 0, not a whole number ≥ 1"),
    ({"minResource": None}, "no minResource object"),
    ({"minResource": {"cpu": "-1"}}, "cpu not a non-negative quantity"),
    ({"minResource": {"pods": "2"}}, "names pods"),
    ({"minResource": {"cpu": "1", "vcore": "1000"}}, "both cpu and vcore"),
])
def test_task_groups_yunikorn_refuses_are_refused(changes: dict[str, Any], problem: str):
    reasons = [f for f in size(task_groups(**changes)).findings if f.reason == "task groups invalid"]
    assert reasons and problem in reasons[0].detail


def test_task_groups_yunikorn_accepts_pass():
    assert [f.reason for f in size(task_groups()).findings if f.reason == "task groups invalid"] == []


def test_a_request_past_decimal_precision_still_sizes_yunikorns_placeholder():
    huge = change(pytorchjob(), "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/requests",
                  {"memory": 10**50})
    groups = json.loads(annotations(inject(huge, "yunikorn"), "spec", "pytorchReplicaSpecs", "Worker", "template",
                                    "metadata")["yunikorn.apache.org/task-groups"])
    assert {g["name"]: g["minResource"].get("memory") for g in groups}["worker"] == f"{10**50 // 2**30}Gi"


def test_the_scheduler_the_api_server_defaults_is_replaced_but_one_the_user_chose_is_kept():
    # the API server fills in default-scheduler on a batch Job's template before mutating webhooks run
    defaulted = change(job(parallelism=2), "/spec/template/spec/schedulerName", "default-scheduler")
    assert inject(defaulted, "volcano")["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    chosen = change(job(parallelism=2), "/spec/template/spec/schedulerName", "my-scheduler")
    assert inject(chosen, "volcano")["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"


# --- every scheduler on every shipped kind, as kinds.yaml describes it ---------------------------------------

# the kinds of tests/kinds/minimal.py and the first ones mlgate judged (tests/builders.py)
OBJECTS = [c.obj for c in cases() if c.pods and c.mutable] + [pod(), job(parallelism=4), pytorchjob(),
                                                               trainingjob()]
GANGED = [(obj, scheduler) for obj in OBJECTS for scheduler in SCHEDULERS
          if (spec := SHIPPED.find(str(obj["apiVersion"]), str(obj["kind"]))) is not None
          and scheduler in spec.gang.schedulers]


@pytest.mark.parametrize(("obj", "scheduler"), GANGED, ids=[f"{o['kind']}-{s}" for o, s in GANGED])
def test_what_inject_writes_is_a_gang_size_passes_or_one_whose_missing_podgroup_it_names(obj: dict[str, Any],
                                                                                          scheduler: str):
    spec = SHIPPED.find(str(obj["apiVersion"]), str(obj["kind"]))
    assert spec is not None
    result = size(inject(obj, scheduler, queue="team-a"))
    assert result.findings == (), [f.message() for f in result.findings]
    if scheduler in spec.gang.needsPodGroup:
        assert result.outcome is Outcome.SKIP and "PodGroup" in result.unchecked[0]
    else:
        assert result.outcome in (Outcome.PASS, Outcome.SKIP) and result.unchecked == ()


def test_every_scheduler_is_tried_on_more_than_one_kind():
    tried = {scheduler for _, scheduler in GANGED}
    assert tried == set(SCHEDULERS) and len(GANGED) > len(SCHEDULERS)
