"""Every shipped kind is judged as it runs: its pod templates found, its findings pointing into its own structure,
its pods counted the way the kind runs them, and mutations applied where the kind keeps them or declined with
a reason. Built from one minimal valid object per kind (tests/kinds/minimal.py) with one change each."""

from __future__ import annotations

import pytest

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model import pointer
from mlgate.model.results import Outcome
from mlgate.workloads.catalog import SHIPPED
from tests.builders import DELETE, change, decide
from tests.kinds.minimal import Case, cases

CASES = cases()
IDS = [c.id for c in CASES]
MUTABLE = [c for c in CASES if c.mutable]
RENDERED = [c for c in CASES if not c.mutable]
SHIPPED_POLICIES = load_policy_paths([default_policy_dir()])


def findings(decision, rule):  # type: ignore[no-untyped-def]
    return [f for r in decision.results if r.rule == rule for f in r.findings]


def test_every_shipped_kind_with_a_pod_template_has_a_minimal_case() -> None:
    described = {(s.group, s.kind) for s in SHIPPED.kinds}
    covered = {(c.obj["apiVersion"].rpartition("/")[0], c.kind) for c in CASES}
    # kinds whose minimal case is a twin of one here (same description, another name or scope) or that
    # the existing suites cover (TrainingJob, InferenceService, the four Kubeflow v1 kinds, Job, Pod)
    twins = {("trainer.kubeflow.org", "ClusterTrainingRuntime"), ("serving.kserve.io", "ServingRuntime"),
             ("serving.kserve.io", "ClusterServingRuntime"), ("argoproj.io", "WorkflowTemplate"),
             ("argoproj.io", "ClusterWorkflowTemplate"), ("argoproj.io", "CronWorkflow"),
             ("sparkoperator.k8s.io", "ScheduledSparkApplication"), ("mlgate.dev", "TrainingJob"),
             ("mlgate.dev", "InferenceService"), ("", "Pod"), ("batch", "Job")} | {
             ("kubeflow.org", k) for k in ("PyTorchJob", "TFJob", "XGBoostJob", "MPIJob")}
    assert described - twins == covered


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_minimal_object_of_each_kind_is_admitted_by_the_shipped_policies(case: Case) -> None:
    decision = evaluate(case.obj, SHIPPED_POLICIES)
    assert decision.allowed, decision.deny_message()
    assert decision.results, "judged, not skipped"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_privileged_container_is_denied_at_the_field_the_kind_keeps_it(case: Case) -> None:
    obj = change(case.obj, case.container + "/securityContext/privileged", True)
    decision = decide(obj, "pod-security.baseline")
    assert not decision.allowed
    assert {f.path for f in findings(decision, "pod-security.baseline")} == {
        case.container + "/securityContext/privileged"}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_host_path_volume_is_denied_at_the_kind_s_own_volumes(case: Case) -> None:
    volume = {"name": "host", "hostPath": {"path": "/var/lib"}}
    decision = decide(change(case.obj, case.volumes, [volume]), "pod-security.baseline")
    assert not decision.allowed
    assert {f.path for f in findings(decision, "pod-security.baseline")} == {case.volumes + "/0/hostPath"}


COUNTED = [c for c in CASES if c.pods is not None]


@pytest.mark.parametrize("case", COUNTED, ids=[c.id for c in COUNTED])
def test_gpus_per_job_count_the_pods_the_way_the_kind_runs_them(case: Case) -> None:
    assert case.pods is not None
    assert decide(case.obj, "gpu.max", {"perJob": case.pods}).allowed
    decision = decide(case.obj, "gpu.max", {"perJob": case.pods - 1})
    (finding,) = findings(decision, "gpu.max")
    assert f"asks for {case.pods} GPUs in all" in finding.detail


@pytest.mark.parametrize("case", MUTABLE, ids=[c.id for c in MUTABLE])
def test_defaults_land_in_the_pod_template_the_kind_keeps(case: Case) -> None:
    pod_at = case.volumes.rsplit("/", 1)[0]
    decision = decide(change(case.obj, pod_at + "/tolerations", DELETE), "defaults.gpu-toleration")
    assert decision.patch, "a GPU pod without the toleration gets it"
    tolerations = pointer.resolve(decision.mutated, pod_at + "/tolerations")
    assert tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert {op["path"] for op in decision.patch} == {pod_at + "/tolerations"}  # nothing else moved


@pytest.mark.parametrize("case", RENDERED, ids=[c.id for c in RENDERED])
def test_kinds_built_by_their_operator_decline_mutation_with_a_reason(case: Case) -> None:
    decision = evaluate(case.obj, SHIPPED_POLICIES)
    mutations = [r for r in decision.results if r.rule.startswith(("defaults.", "gang.inject"))]
    assert mutations and {r.outcome for r in mutations} == {Outcome.SKIP}
    assert all("built by its operator" in r.note for r in mutations)
    assert decision.patch == []


@pytest.mark.parametrize("kind", ["LeaderWorkerSet", "RayCluster", "Deployment", "Notebook"])
def test_gang_injection_is_declined_where_the_kind_forms_no_gang_from_pod_markers(kind: str) -> None:
    (case,) = [c for c in CASES if c.kind == kind]
    decision = decide(case.obj, "gang.inject", {"scheduler": "volcano"})
    (result,) = decision.results
    assert result.outcome is Outcome.SKIP
    assert result.note.startswith(f"{kind} is not grouped for volcano by pod markers")
    assert decision.patch == []


def test_a_jobset_queued_in_kueue_gets_the_queue_label_on_itself_and_its_pod_group_markers() -> None:
    (case,) = [c for c in CASES if c.kind == "JobSet"]
    decision = decide(case.obj, "gang.inject", {"scheduler": "kueue", "queue": "team-a"})
    mutated = decision.mutated
    assert mutated is not None
    assert mutated["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    pod_meta = pointer.resolve(mutated, "/spec/replicatedJobs/0/template/spec/template/metadata")
    assert pod_meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "8"


def test_a_volcano_job_gets_only_its_own_queue_setting_because_volcano_marks_its_pods() -> None:
    (case,) = [c for c in CASES if c.kind == "Job" and c.obj["apiVersion"].startswith("batch.volcano.sh")]
    decision = decide(change(case.obj, "/spec/minAvailable", DELETE), "gang.inject",
                      {"scheduler": "volcano", "queue": "research"})
    assert decision.mutated is not None
    assert decision.mutated["spec"]["minAvailable"] == 3 and decision.mutated["spec"]["queue"] == "research"
    assert "metadata" not in decision.mutated["spec"]["tasks"][0]["template"]


def test_a_suspended_ray_worker_group_runs_no_pods() -> None:
    (case,) = [c for c in CASES if c.kind == "RayCluster"]
    obj = change(case.obj, "/spec/workerGroupSpecs/0/suspend", True)
    assert decide(obj, "gpu.max", {"perJob": 0}).allowed


def test_a_leader_worker_set_without_a_leader_template_runs_the_leader_from_the_worker_template() -> None:
    (case,) = [c for c in CASES if c.kind == "LeaderWorkerSet"]
    obj = change(case.obj, "/spec/leaderWorkerTemplate/leaderTemplate", DELETE)
    (finding,) = findings(decide(obj, "gpu.max", {"perJob": 1}), "gpu.max")
    assert "asks for 8 GPUs in all" in finding.detail


def test_a_workflow_s_steps_are_judged_one_pod_each_but_not_summed_as_if_they_ran_at_once() -> None:
    (case,) = [c for c in CASES if c.kind == "Workflow"]
    obj = change(case.obj, "/spec/templates/-", {"name": "eval", "script": {"image": "python:3.12", "source": "1"}})
    assert decide(obj, "gpu.max", {"perJob": 0}).allowed
    assert not decide(obj, "gpu.max", {"perPod": 0}).allowed


def test_every_scheduler_has_one_row_in_each_gang_table() -> None:
    from typing import get_args

    from mlgate.model.kinds import Scheduler
    from mlgate.rules.gang import GangParams
    from mlgate.rules.gang_markers import SCHEDULER_NAMES, WRITES

    schedulers = set(get_args(Scheduler))
    assert set(WRITES) == set(SCHEDULER_NAMES) == schedulers
    assert set(get_args(GangParams.model_fields["scheduler"].annotation)) == schedulers


def test_a_trainingjob_inside_an_experiment_is_judged_with_paths_into_the_experiment() -> None:
    from tests.builders import trainingjob

    trial = change(trainingjob(), "/spec/template/spec/containers/0/securityContext/privileged", True)
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment",
                  "metadata": {"name": "hpo", "namespace": "ml"}, "spec": {"trialTemplate": {"trialSpec": trial}}}
    decision = decide(experiment, "pod-security.baseline")
    assert {f.path for f in findings(decision, "pod-security.baseline")} == {
        "/spec/trialTemplate/trialSpec/spec/template/spec/containers/0/securityContext/privileged"}


def test_a_mutation_never_replaces_a_field_of_the_wrong_type_and_says_so() -> None:
    (case,) = [c for c in CASES if c.kind == "JobSet"]
    obj = change(case.obj, "/spec/replicatedJobs/0/template/spec/template/metadata", {"annotations": "x"})
    decision = decide(obj, "gang.inject", {"scheduler": "kueue", "queue": "team-a"})
    (result,) = decision.results
    assert result.outcome is Outcome.SKIP and result.note == "annotations is str, not a mapping: not mutated"
    assert decision.patch == []
