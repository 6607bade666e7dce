"""No pod template passes unseen: a kind no description knows is searched for pod specs, and a platform team
describes its own kinds with a WorkloadKind document, loaded and checked like a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlgate.engine import evaluate
from mlgate.loading.policies import PolicyLoadError, load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from mlgate.workloads.extract import extract
from mlgate.workloads.search import pod_spec_pointers
from tests.builders import change, decide, pod_spec, policy_set

FEATURE_SYNC = {
    "apiVersion": "data.example.com/v1",
    "kind": "FeatureSync",
    "metadata": {"name": "daily", "namespace": "ml"},
    "spec": {"schedule": "@daily", "workers": [
        {"name": "extract", "replicas": 3, "template": {"metadata": {"labels": {"app": "sync"}},
                                                         "spec": pod_spec("sync", 1)}}]},
}
PRIVILEGED = change(FEATURE_SYNC, "/spec/workers/0/template/spec/containers/0/securityContext/privileged", True)
SYNC_KIND = """\
apiVersion: mlgate.dev/v1alpha1
kind: WorkloadKind
metadata: {name: featuresyncs.data.example.com}
spec:
  group: data.example.com
  kind: FeatureSync
  resource: featuresyncs
  templates:
    - pointer: /spec/workers/*/template
      role: "{name}"
      replicas: {at: replicas, default: 1}
"""
BASELINE = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: baseline}
spec:
  rules: [{rule: pod-security.baseline}, {rule: gpu.max, params: {perJob: 2}}]
"""


def policies(tmp_path: Path, *documents: str) -> Path:
    for index, text in enumerate(documents):
        (tmp_path / f"{index}.yaml").write_text(text)
    return tmp_path


# --- unknown kinds ----------------------------------------------------------------------------------

def test_a_privileged_pod_template_in_an_unknown_kind_is_denied_and_the_decision_says_the_kind_is_unknown() -> None:
    decision = decide(PRIVILEGED, "pod-security.baseline")
    assert not decision.allowed
    assert [f.path for r in decision.results for f in r.findings] == [
        "/spec/workers/0/template/spec/containers/0/securityContext/privileged"]
    (note,) = decision.notes
    assert note.startswith("data.example.com/v1/FeatureSync: unknown kind") and "WorkloadKind" in note


def test_rules_that_count_a_job_s_pods_skip_an_unknown_kind() -> None:
    obj = change(FEATURE_SYNC, "/spec/workers/0/template/metadata/annotations",
                 {"kueue.x-k8s.io/pod-group-total-count": "9"})
    assert decide(obj, "gang.size").results[0].outcome is Outcome.SKIP
    assert decide(FEATURE_SYNC, "gpu.max", {"perJob": 0}).allowed  # three pods, but how many run is unknown


def test_an_unknown_kind_is_not_mutated_and_says_why() -> None:
    decision = decide(change(FEATURE_SYNC, "/spec/workers/0/template/spec/tolerations", []),
                      "defaults.gpu-toleration")
    (result,) = decision.results
    assert result.outcome is Outcome.SKIP and "a kind no description knows" in result.note
    assert decision.patch == []


@pytest.mark.parametrize(("mode", "allowed", "outcomes"), [
    ("Judge", False, [Outcome.FAIL]), ("Warn", True, [Outcome.WARN]), ("Ignore", True, [])])
def test_each_policy_chooses_what_an_unknown_kind_gets(mode: str, allowed: bool, outcomes: list[Outcome]) -> None:
    decision = evaluate(PRIVILEGED, policy_set({"rule": "pod-security.baseline"}, unknownKinds=mode))
    assert decision.allowed is allowed
    assert [r.outcome for r in decision.results] == outcomes


def test_the_unknown_kinds_setting_leaves_described_kinds_alone() -> None:
    pod = change({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec("main", 1)},
                 "/spec/containers/0/securityContext/privileged", True)
    assert not evaluate(pod, policy_set({"rule": "pod-security.baseline"}, unknownKinds="Ignore")).allowed


def test_search_finds_pod_specs_and_templates_anywhere_and_skips_status() -> None:
    obj = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"},
           "spec": {"containers": [{"name": "a", "image": "i"}],
                    "stages": [{"run": {"template": {"spec": {"containers": [{"image": "i"}]}}}},
                               {"podSpec": {"containers": [{"image": "i"}]}}],
                    "notAPod": {"containers": [{"name": "no image"}]}},
           "status": {"lastPod": {"containers": [{"image": "i"}]}}}
    assert pod_spec_pointers(obj) == [("", True), ("/spec/stages/0/run/template", True),
                                      ("/spec/stages/1/podSpec", False)]


def test_search_survives_nesting_far_deeper_than_python_recursion() -> None:
    deep: dict[str, object] = {"spec": pod_spec("deep", 0)}
    for _ in range(5000):
        deep = {"next": deep}
    workload = extract({"apiVersion": "x/v1", "kind": "Deep", "metadata": {"name": "d"}, "spec": deep})
    assert workload is not None and [t.role for t in workload.templates] == ["/spec" + "/next" * 5000 + "/spec"]


# --- WorkloadKind documents -------------------------------------------------------------------------

def test_a_workload_kind_in_the_policy_set_makes_its_kind_judged_with_its_replicas(tmp_path: Path) -> None:
    loaded = load_policy_paths([policies(tmp_path, SYNC_KIND, BASELINE)])
    decision = evaluate(PRIVILEGED, loaded)
    assert decision.notes == []
    messages = decision.deny_message()
    assert "/spec/workers/0/template/spec/containers/0/securityContext/privileged" in messages
    assert "FeatureSync 'daily' asks for 3 GPUs in all, the limit is 2" in messages


def test_a_workload_kind_replaces_the_shipped_description_of_its_kind(tmp_path: Path) -> None:
    narrowed = SYNC_KIND.replace("data.example.com", "apps").replace("FeatureSync", "Deployment").replace(
        "/spec/workers/*/template", "/spec/template").replace('"{name}"', "web")
    loaded = load_policy_paths([policies(tmp_path, narrowed, BASELINE)])
    spec = loaded.kinds.find("apps/v1", "Deployment")
    assert spec is not None and spec.templates[0].role == "web"


@pytest.mark.parametrize(("text", "error"), [
    (SYNC_KIND.replace("/spec/workers/*/template", "spec/workers"),
     "0.yaml:9: spec.templates[0].pointer: value error, 'spec/workers' is not a JSON pointer"),
    (SYNC_KIND.replace("{at: replicas, default: 1}", "{at: replicas, value: 2}"),
     "0.yaml:11: spec.templates[0].replicas: value error, a count is exactly one of"),
    (SYNC_KIND.replace("      role: \"{name}\"\n", "      role: \"{name}\"\n      shape: Pod\n"),
     "0.yaml:11: spec.templates[0].shape: input should be 'PodTemplateSpec' or 'PodSpec'"),
    (SYNC_KIND + "  render: nope\n", "0.yaml:12: spec.render: unknown renderer 'nope'"),
    (SYNC_KIND + "  replicas: 3\n", "0.yaml:12: spec.replicas: unknown field"),
    (SYNC_KIND.replace("  resource: featuresyncs\n", ""), "spec.resource: required field is missing"),
])
def test_a_broken_workload_kind_is_a_load_error_with_file_line_and_field(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(PolicyLoadError) as raised:
        load_policy_paths([policies(tmp_path, text, BASELINE)])
    assert any(error in str(e) for e in raised.value.errors), [str(e) for e in raised.value.errors]


def test_two_workload_kinds_for_one_kind_are_a_load_error_naming_both_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError) as raised:
        load_policy_paths([policies(tmp_path, SYNC_KIND, SYNC_KIND, BASELINE)])
    (error,) = raised.value.errors
    described = "spec.kind: data.example.com/FeatureSync is also described in "
    assert str(error).endswith(described + str(tmp_path / "0.yaml"))


# --- a TrainJob and its runtime -----------------------------------------------------------------------

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}},
                                      "spec": {"template": {"spec": pod_spec("node", 0)}}}}]}}},
}
TRAIN_JOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "llm", "namespace": "ml"},
    "spec": {"runtimeRef": {"name": "torch-distributed"},
             "trainer": {"numNodes": 4, "image": "registry.example/llm:2", "resourcesPerNode": {
                 "limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}}}},
}


def test_a_train_job_is_judged_as_its_runtime_builds_it_when_the_runtime_is_in_the_facts() -> None:
    facts = StaticFacts.from_objects([RUNTIME])
    workload = extract(TRAIN_JOB, facts=facts)
    assert workload is not None
    (template,) = workload.templates
    assert (template.role, template.replicas) == ("node", 4)
    (container,) = template.spec["containers"]
    assert container["image"] == "registry.example/llm:2"
    assert container["securityContext"] == pod_spec()["containers"][0]["securityContext"]  # from the runtime
    assert workload.notes == ["judged with ClusterTrainingRuntime 'torch-distributed' from the cluster facts"]
    decision = decide(TRAIN_JOB, "gpu.max", {"perJob": 16}, facts=facts)
    assert "asks for 32 GPUs in all" in decision.deny_message()


def test_a_privileged_runtime_denies_the_train_job_at_its_runtime_reference() -> None:
    runtime = change(RUNTIME, "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/hostNetwork", True)
    decision = decide(TRAIN_JOB, "pod-security.baseline", facts=StaticFacts.from_objects([runtime]))
    assert [f.path for r in decision.results for f in r.findings] == ["/spec/runtimeRef"]


def test_without_its_runtime_a_train_job_is_judged_on_what_it_says_and_the_note_says_so() -> None:
    decision = decide(TRAIN_JOB, "gpu.max", {"perContainer": 4})
    assert decision.notes == ["ClusterTrainingRuntime 'torch-distributed' is not in the cluster facts: judged the "
                              "TrainJob's own trainer node and patches only, not the runtime's pods"]
    assert [f.path for r in decision.results for f in r.findings] == [
        "/spec/trainer/resourcesPerNode/limits/nvidia.com~1gpu"]
