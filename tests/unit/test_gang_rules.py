import json
from typing import Any

import jsonpatch
import pytest
from builders import DELETE, change, decide, job, outcome, pod, policy_set, pytorchjob, trainingjob

from mlgate.engine import evaluate
from mlgate.model.results import Outcome

MASTER_META = "/spec/pytorchReplicaSpecs/Master/template/metadata"
WORKER_META = "/spec/pytorchReplicaSpecs/Worker/template/metadata"
SCHEDULERS = ("volcano", "coscheduling", "kueue", "yunikorn", "kai")
TASK_GROUPS = "yunikorn.apache.org/task-groups"


def inject(obj: dict[str, Any], scheduler: str, **params: Any) -> dict[str, Any]:
    """`obj` as gang.inject leaves it."""
    decision = decide(obj, "gang.inject", {"scheduler": scheduler, **params})
    assert decision.mutated is not None
    return decision.mutated


def meta(obj: dict[str, Any], ptr: str) -> dict[str, Any]:
    node: Any = obj
    for token in ptr.strip("/").split("/"):
        node = node[token]
    return dict(node)


# --- gang.inject: exactly the reference keys per scheduler


EXPECTED_PYTORCHJOB_WORKER = {
    "volcano": {"annotations": {"scheduling.k8s.io/group-name": "mnist", "scheduling.volcano.sh/queue-name": "team-a"}},
    "coscheduling": {"labels": {"scheduling.x-k8s.io/pod-group": "mnist"}},
    "kueue": {"labels": {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": "mnist"},
              "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"}},
    "yunikorn": {"labels": {"yunikorn.apache.org/app-id": "ml-mnist", "yunikorn.apache.org/queue": "team-a"},
                 "annotations": {"yunikorn.apache.org/task-group-name": "worker", TASK_GROUPS: json.dumps(
                     [{"name": "master", "minMember": 1, "minResource": {"nvidia.com/gpu": "1"}},
                      {"name": "worker", "minMember": 2, "minResource": {"nvidia.com/gpu": "1"}}],
                     separators=(",", ":"))}},
    "kai": {"labels": {"kai.scheduler/queue": "team-a"}},
}
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler", "kueue": None,
                   "yunikorn": "yunikorn", "kai": "kai-scheduler"}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_inject_puts_exactly_the_reference_markers_on_every_pytorchjob_role(scheduler):
    mutated = inject(pytorchjob(), scheduler, queue="team-a")
    assert meta(mutated, WORKER_META) == EXPECTED_PYTORCHJOB_WORKER[scheduler]
    worker_spec = mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker_spec.get("schedulerName") == SCHEDULER_NAMES[scheduler]
    master = meta(mutated, MASTER_META)
    if scheduler == "yunikorn":
        assert master["annotations"]["yunikorn.apache.org/task-group-name"] == "master"
    else:
        assert master == EXPECTED_PYTORCHJOB_WORKER[scheduler]


# a TrainingJob gets a gang only from volcano and coscheduling (the refusal tests below)
INJECTABLE = [(scheduler, build) for build in (pytorchjob, job, trainingjob, pod) for scheduler in SCHEDULERS
              if build is not trainingjob or scheduler in ("volcano", "coscheduling")]


@pytest.mark.parametrize(("scheduler", "build"), INJECTABLE, ids=[f"{b.__name__}-{s}" for s, b in INJECTABLE])
def test_inject_twice_changes_nothing(scheduler, build):
    obj = build()
    params = {"scheduler": scheduler, "queue": "team-a"}
    first = decide(obj, "gang.inject", params)
    assert first.patch, "the first run must add markers"
    patched = jsonpatch.apply_patch(obj, first.patch)
    assert patched == first.mutated
    assert decide(patched, "gang.inject", params).patch == []


@pytest.mark.parametrize("scheduler", ["kai", "kueue", "yunikorn"])
def test_inject_skips_a_trainingjob_for_a_scheduler_that_cannot_gang_its_pods_and_says_why(scheduler):
    result = decide(trainingjob(), "gang.inject", {"scheduler": scheduler, "queue": "team-a"})
    assert result.patch == []
    assert result.results[0].outcome == "skip"
    assert f"TrainingJob pods get no {scheduler} gang" in result.results[0].note


@pytest.mark.parametrize("scheduler", ["kai", "kueue", "yunikorn"])
def test_deny_a_trainingjob_asking_a_gang_of_a_scheduler_that_cannot_form_it(scheduler):
    obj = change(trainingjob(), "/spec/scheduling", {"gang": True, "scheduler": scheduler})
    assert outcome(obj, "gang.size") == "fail"
    assert outcome(change(obj, "/spec/scheduling/gang", False), "gang.size") != "fail"


@pytest.mark.parametrize("scheduler", ["volcano", "coscheduling"])
def test_a_trainingjob_gang_from_a_scheduler_its_reconciler_makes_a_podgroup_for_passes(scheduler):
    obj = change(trainingjob(), "/spec/scheduling", {"gang": True, "scheduler": scheduler, "minMember": 2})
    assert outcome(obj, "gang.size") == "pass"


def test_inject_escapes_slashes_in_annotation_keys_of_the_patch():
    obj = change(job(parallelism=2), "/metadata/annotations", {"team": "vision"})
    ops = decide(obj, "gang.inject", {"scheduler": "volcano"}).patch
    assert {"op": "add", "path": "/metadata/annotations/scheduling.volcano.sh~1group-min-member", "value": "2"} in ops
    assert {"op": "add", "path": "/spec/template/spec/schedulerName", "value": "volcano"} in ops


def test_inject_escapes_kueue_total_count_key_in_the_patch():
    obj = change(change(job(parallelism=4), "/spec/template/metadata/annotations", {}),
                 "/spec/template/metadata/labels", {})
    ops = decide(obj, "gang.inject", {"scheduler": "kueue", "queue": "team-a"}).patch
    assert {"op": "add", "path": "/spec/template/metadata/annotations/kueue.x-k8s.io~1pod-group-total-count",
            "value": "4"} in ops
    assert {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "team-a"}} in ops


def test_inject_never_overwrites_a_value_the_user_wrote():
    obj = change(job(parallelism=2), "/spec/template/metadata/labels", {"scheduling.x-k8s.io/pod-group": "mine"})
    obj = change(obj, "/spec/template/spec/schedulerName", "my-scheduler")
    mutated = inject(obj, "coscheduling")
    assert mutated["spec"]["template"]["metadata"]["labels"] == {"scheduling.x-k8s.io/pod-group": "mine"}
    assert mutated["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"


def test_inject_respects_yunikorn_legacy_aliases():
    obj = change(pod(), "/metadata/labels", {"applicationId": "spark-1", "queue": "root.batch"})
    labels = inject(obj, "yunikorn", queue="root.ml")["metadata"]["labels"]
    assert labels == {"applicationId": "spark-1", "queue": "root.batch"}


def test_inject_fills_trainingjob_scheduling_where_unset():
    obj = change(trainingjob(replicas=4), "/spec/scheduling", {"minMember": 3})
    mutated = inject(obj, "volcano", queue="research")
    assert mutated["spec"]["scheduling"] == {"gang": True, "scheduler": "volcano", "queue": "research",
                                             "minMember": 3}
    assert mutated["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llm"


def test_inject_leaves_a_trainingjob_that_opted_out_alone():
    obj = change(trainingjob(), "/spec/scheduling", {"gang": False})
    assert decide(obj, "gang.inject", {"scheduler": "volcano"}).patch == []


def test_inject_fills_kubeflow_min_available_and_volcano_queue():
    mutated = inject(pytorchjob(workers=3), "volcano", queue="research", minMember=9)
    assert mutated["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4, "queue": "research"}
    # Volcano reads the minimum off the PodGroup training-operator makes from minAvailable, never off a pod
    assert "scheduling.volcano.sh/group-min-member" not in meta(mutated, WORKER_META)["annotations"]


def test_inject_does_not_group_a_running_job_that_had_no_gang_on_update():
    obj = pytorchjob()
    decision = decide(obj, "gang.inject", {"scheduler": "kueue"}, operation="UPDATE", old_obj=obj)
    assert decision.patch == []


def test_an_update_with_the_manifest_as_written_gets_the_same_markers_back_and_passes_immutable():
    written = pytorchjob()
    stored = inject(written, "kueue", queue="team-a")
    policies = policy_set({"rule": "gang.inject", "params": {"scheduler": "kueue", "queue": "team-a"}},
                          {"rule": "gang.immutable"})
    decision = evaluate(written, policies, operation="UPDATE", old_obj=stored)
    assert decision.mutated == stored
    assert decision.allowed, decision.deny_message()


def test_inject_uses_the_scheduler_name_override():
    mutated = inject(job(), "coscheduling", schedulerName="gang-scheduler")
    assert mutated["spec"]["template"]["spec"]["schedulerName"] == "gang-scheduler"


def test_inject_sizes_yunikorn_task_groups_from_container_requests():
    obj = change(job(parallelism=3), "/spec/template/spec/containers/0/resources/requests/cpu", "1500m")
    obj = change(obj, "/spec/template/spec/containers/-", {"name": "log", "image": "busybox",
                                                          "resources": {"requests": {"cpu": "500m"}}})
    groups = json.loads(inject(obj, "yunikorn")["spec"]["template"]["metadata"]["annotations"][TASK_GROUPS])
    assert groups == [{"name": "job", "minMember": 3, "minResource": {"cpu": "2", "nvidia.com/gpu": "1"}}]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_injected_markers_pass_gang_size(scheduler):
    assert outcome(inject(pytorchjob(), scheduler, queue="q"), "gang.size") is Outcome.PASS


# --- gang.size


def test_skip_size_for_pods_without_gang_markers():
    assert outcome(pytorchjob(), "gang.size") is Outcome.SKIP


def test_deny_trainingjob_min_member_above_its_replicas():
    base = change(trainingjob(replicas=2), "/spec/scheduling", {"gang": True, "minMember": 2})
    assert outcome(base, "gang.size") is Outcome.PASS
    decision = decide(change(base, "/spec/scheduling/minMember", 3), "gang.size")
    (finding,) = decision.violations[0].findings
    assert (finding.path, finding.reason) == ("/spec/scheduling/minMember", "gang minimum exceeds pods")


def test_deny_kubeflow_min_available_above_total_replicas():
    base = change(pytorchjob(workers=2), "/spec/runPolicy/schedulingPolicy", {"minAvailable": 3})
    assert outcome(base, "gang.size") is Outcome.PASS
    decision = decide(change(base, "/spec/runPolicy/schedulingPolicy/minAvailable", 4), "gang.size")
    assert "minAvailable is 4 but the group has 3 pods (Master ×1, Worker ×2)" in decision.deny_message()


def test_deny_zero_min_available():
    obj = change(pytorchjob(), "/spec/runPolicy/schedulingPolicy", {"minAvailable": 0})
    assert decide(obj, "gang.size").violations[0].findings[0].reason == "gang minimum not a positive integer"


def test_deny_volcano_min_member_annotation_above_the_group():
    base = inject(job(parallelism=2), "volcano", minMember=2)
    assert outcome(base, "gang.size") is Outcome.PASS
    obj = change(base, "/spec/template/metadata/annotations/scheduling.volcano.sh~1group-min-member", "5")
    assert outcome(obj, "gang.size") is Outcome.FAIL


def test_deny_kueue_total_count_that_differs_from_the_pods():
    obj = change(inject(pytorchjob(), "kueue"), WORKER_META + "/annotations/kueue.x-k8s.io~1pod-group-total-count", "2")
    decision = decide(obj, "gang.size")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "kueue total count differs"
    assert finding.path == WORKER_META + "/annotations/kueue.x-k8s.io~1pod-group-total-count"


def test_deny_kueue_group_without_total_count():
    obj = change(inject(job(parallelism=2), "kueue"), "/spec/template/metadata/annotations", DELETE)
    decision = decide(obj, "gang.size")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "kueue total count missing"
    assert finding.path == "/spec/template/metadata/labels/kueue.x-k8s.io~1pod-group-name"


def test_deny_group_names_that_differ_between_roles():
    obj = change(inject(pytorchjob(), "coscheduling"), WORKER_META + "/labels/scheduling.x-k8s.io~1pod-group", "x")
    decision = decide(obj, "gang.size")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "gang group differs"
    assert 'Worker pods are in coscheduling group "x" but Master pods in "mnist"' in finding.detail


def test_deny_role_missing_from_the_group():
    obj = change(inject(pytorchjob(), "volcano"), WORKER_META + "/annotations", DELETE)
    assert decide(obj, "gang.size").violations[0].findings[0].path == \
        WORKER_META + "/annotations/scheduling.k8s.io~1group-name"


def test_deny_task_groups_that_are_not_json():
    obj = change(inject(job(), "yunikorn"), "/spec/template/metadata/annotations/" + TASK_GROUPS.replace("/", "~1"),
                 "[{name: job}]")
    (finding,) = decide(obj, "gang.size").violations[0].findings
    assert finding.reason == "task groups invalid"
    assert finding.detail.startswith("yunikorn.apache.org/task-groups on job pods is not JSON")


def test_deny_yunikorn_task_group_minimum_above_its_role():
    base = inject(pytorchjob(workers=2), "yunikorn")
    groups = json.loads(meta(base, WORKER_META)["annotations"][TASK_GROUPS])
    groups[1]["minMember"] = 3
    raw = json.dumps(groups, separators=(",", ":"))
    obj = change(change(base, WORKER_META + "/annotations/" + TASK_GROUPS.replace("/", "~1"), raw),
                 MASTER_META + "/annotations/" + TASK_GROUPS.replace("/", "~1"), raw)
    decision = decide(obj, "gang.size")
    assert 'task group "worker" needs minMember 3 but 2 pods' in decision.deny_message()


# --- gang.immutable


def test_skip_immutable_on_create():
    assert outcome(inject(pytorchjob(), "kueue", queue="a"), "gang.immutable") is Outcome.SKIP


def test_allow_update_that_keeps_gang_settings():
    old = inject(pytorchjob(), "kueue", queue="a")
    new = change(old, "/spec/runPolicy/backoffLimit", 5)
    assert outcome(new, "gang.immutable", operation="UPDATE", old_obj=old) is Outcome.PASS


def test_deny_update_that_changes_the_queue():
    old = inject(pytorchjob(), "kueue", queue="a")
    new = change(old, WORKER_META + "/labels/kueue.x-k8s.io~1queue-name", "b")
    decision = decide(new, "gang.immutable", operation="UPDATE", old_obj=old)
    (finding,) = decision.violations[0].findings
    assert finding.path == WORKER_META + "/labels/kueue.x-k8s.io~1queue-name"
    assert 'label kueue.x-k8s.io/queue-name of Worker pods changed from "a" to "b"' in finding.detail


def test_deny_update_that_removes_the_group():
    old = inject(pytorchjob(), "volcano")
    new = change(old, WORKER_META + "/annotations", DELETE)
    decision = decide(new, "gang.immutable", operation="UPDATE", old_obj=old)
    assert "annotation scheduling.k8s.io/group-name of Worker pods was removed" in decision.deny_message()


def test_deny_update_that_removes_the_minimum_volcano_reads_off_a_job():
    old = inject(job(parallelism=2), "volcano")
    new = change(old, "/metadata/annotations", DELETE)
    decision = decide(new, "gang.immutable", operation="UPDATE", old_obj=old)
    assert "annotation scheduling.volcano.sh/group-min-member was removed" in decision.deny_message()


def test_deny_update_of_trainingjob_min_member():
    old = inject(trainingjob(replicas=4), "volcano")
    new = change(old, "/spec/scheduling/minMember", 2)
    decision = decide(new, "gang.immutable", operation="UPDATE", old_obj=old)
    assert decision.violations[0].findings[0].path == "/spec/scheduling/minMember"


def test_switching_to_the_group_key_volcano_reads_is_adding_the_group():
    # scheduling.volcano.sh/group-name is no alias: Volcano's scheduler never reads it
    old = change(pytorchjob(), WORKER_META + "/annotations", {"scheduling.volcano.sh/group-name": "mnist"})
    new = change(pytorchjob(), WORKER_META + "/annotations", {"scheduling.k8s.io/group-name": "mnist"})
    decision = decide(new, "gang.immutable", operation="UPDATE", old_obj=old)
    (finding,) = decision.violations[0].findings
    assert finding.path == WORKER_META + "/annotations/scheduling.k8s.io~1group-name"
    assert finding.detail == 'annotation scheduling.k8s.io/group-name of Worker pods was added ("mnist")'


# --- a Job runs at most min(parallelism, completions) pods at once


def test_inject_counts_a_kueue_jobs_group_as_the_pods_that_run_at_once():
    mutated = inject(change(job(parallelism=4), "/spec/completions", 2), "kueue")
    assert meta(mutated, "/spec/template/metadata")["annotations"] == {"kueue.x-k8s.io/pod-group-total-count": "2"}
    assert outcome(mutated, "gang.size") is Outcome.PASS


def test_a_job_without_completions_runs_parallelism_pods():
    mutated = inject(job(parallelism=4), "kueue")
    assert meta(mutated, "/spec/template/metadata")["annotations"] == {"kueue.x-k8s.io/pod-group-total-count": "4"}


def test_yunikorn_min_resource_adds_a_native_sidecar_to_an_init_container_started_after_it():
    init = [{"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "warm", "image": "x", "resources": {"requests": {"cpu": "4"}}}]
    mutated = inject(change(job(), "/spec/template/spec/initContainers", init), "yunikorn")
    groups = json.loads(meta(mutated, "/spec/template/metadata")["annotations"][TASK_GROUPS])
    assert groups[0]["minResource"] == {"cpu": "5", "nvidia.com/gpu": "1"}


def test_inject_leaves_job_labels_that_are_not_a_mapping_alone():
    obj = change(job(), "/metadata/labels", "team=a")
    assert inject(obj, "kueue", queue="q")["metadata"]["labels"] == "team=a"
