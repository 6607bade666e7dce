"""The engine's own behaviour: error isolation, failure policies, settling, matching, patches."""

from collections.abc import Iterator

import jsonpatch
import pytest
from builders import DELETE, change, pod, policy_set, pytorchjob

from mlgate.engine import evaluate
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Finding, Outcome
from mlgate.rules import registry
from mlgate.rules.registry import NoParams, check, mutation


@pytest.fixture
def temporary_rules() -> Iterator[None]:
    before = dict(registry.catalog())
    yield
    registry.REGISTRY.clear()
    registry.REGISTRY.update(before)


def test_a_rule_that_raises_is_an_error_outcome_and_fail_policy_denies(temporary_rules):
    @check("test.broken", "raises")
    def broken(workload, params, context):
        raise RuntimeError("boom")

    decision = evaluate(pod(), policy_set({"rule": "test.broken"}, failurePolicy="Fail"))
    (result,) = decision.results
    assert result.outcome is Outcome.ERROR
    assert "RuntimeError: boom" in result.note
    assert not decision.allowed
    assert decision.deny_message() == "[test/test.broken] could not evaluate: RuntimeError: boom"


def test_an_error_under_ignore_admits_and_becomes_a_warning(temporary_rules):
    @check("test.broken", "raises")
    def broken(workload, params, context):
        raise KeyError("x")

    decision = evaluate(pod(), policy_set({"rule": "test.broken"}, failurePolicy="Ignore"))
    assert decision.allowed
    assert decision.warnings == ["[test/test.broken] could not evaluate: KeyError: 'x'"]


def test_a_mutation_that_never_settles_is_an_error(temporary_rules):
    @mutation("test.counter", "changes every time", NoParams)
    def counter(workload, params, context):
        labels = workload.obj.setdefault("metadata", {}).setdefault("labels", {})
        labels["n"] = str(int(labels.get("n", "0")) + 1)

    decision = evaluate(pod(), policy_set({"rule": "test.counter"}))
    (result,) = decision.results
    assert result.outcome is Outcome.ERROR
    assert result.note == "mutations did not settle"


def test_a_mutation_that_raises_leaves_the_object_as_it_was(temporary_rules):
    @mutation("test.half-done", "writes, then raises", NoParams)
    def half_done(workload, params, context):
        workload.obj["metadata"]["labels"] = {"written": "yes"}
        raise ValueError("half way")

    decision = evaluate(pod(), policy_set({"rule": "test.half-done"}, failurePolicy="Ignore"))
    assert decision.patch == []
    assert decision.results[0].outcome is Outcome.ERROR


def test_warn_and_audit_actions_admit_with_warnings_and_audit_annotations(temporary_rules):
    @check("test.always", "always finds something")
    def always(workload, params, context):
        yield Finding("/spec", "always", "found", "nothing to do")

    warned = evaluate(pod(), policy_set({"rule": "test.always", "action": "warn"}))
    assert warned.allowed and warned.warnings == ["[test/test.always] always: /spec: found; nothing to do"]
    audited = evaluate(pod(), policy_set({"rule": "test.always", "action": "audit"}))
    assert audited.allowed and audited.warnings == []
    assert audited.audit_annotations == {"test.test.always": "always: /spec: found; nothing to do"}


def test_an_object_without_any_pod_spec_is_skipped_with_a_reason():
    decision = evaluate({"apiVersion": "v1", "kind": "ConfigMap", "data": {"containers": "x"}},
                        policy_set({"rule": "gpu.limits"}))
    assert decision.allowed and decision.results == []
    assert decision.note == "no pod template to judge: v1/ConfigMap"


@pytest.mark.parametrize(
    ("match", "applies"),
    [
        ({"kinds": ["PyTorchJob"]}, False),
        ({"kinds": ["Pod"]}, True),
        ({"namespaces": ["other"]}, False),
        ({"namespaceSelector": {"matchLabels": {"team": "vision"}}}, True),
        ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["vision"]}]}},
         False),
        ({"objectSelector": {"matchLabels": {"app": "x"}}}, False),
    ],
)
def test_match_blocks_select_by_kind_namespace_and_labels(match, applies):
    facts = StaticFacts.from_objects([{"kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "vision"}}}])
    obj = change(pod(), "/spec/containers/0/resources/limits/nvidia.com~1gpu", "0.5")
    decision = evaluate(obj, policy_set({"rule": "gpu.limits"}, match=match), facts=facts)
    assert (not decision.allowed) is applies


def test_exclusions_win_over_matches():
    obj = change(pod(), "/spec/containers/0/resources/limits/nvidia.com~1gpu", "0.5")
    policies = policy_set({"rule": "gpu.limits"}, exclude={"namespaces": ["ml"]})
    assert evaluate(obj, policies).allowed


def test_a_namespaced_policy_applies_only_in_its_namespace():
    from mlgate.engine.policyset import PolicySet
    from mlgate.loading.policies import compile_policy

    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
                "metadata": {"name": "local", "namespace": "other"}, "spec": {"rules": [{"rule": "gpu.limits"}]}}
    policy, _ = compile_policy(document, "<test>")
    obj = change(pod(), "/spec/containers/0/resources/limits/nvidia.com~1gpu", "0.5")
    assert evaluate(obj, PolicySet((policy,))).allowed
    assert not evaluate(change(obj, "/metadata/namespace", "other"), PolicySet((policy,))).allowed


def test_the_patch_applies_to_the_input_and_yields_the_mutated_object():
    bare = change(pytorchjob(), "/spec/runPolicy", DELETE)
    bare = change(bare, "/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations", DELETE)
    policies = policy_set({"rule": "defaults.run-policy"}, {"rule": "defaults.gpu-toleration"})
    decision = evaluate(bare, policies)
    assert jsonpatch.apply_patch(bare, decision.patch) == decision.mutated
    assert bare["spec"].get("runPolicy") is None  # the input is never modified


def test_json_pointer_escaping_in_patches():
    from mlgate.engine.patch import diff

    before = {"metadata": {"annotations": {}}}
    after = {"metadata": {"annotations": {"a/b": "1", "c~d": "2"}}}
    assert diff(before, after) == [
        {"op": "add", "path": "/metadata/annotations/a~1b", "value": "1"},
        {"op": "add", "path": "/metadata/annotations/c~0d", "value": "2"},
    ]
    assert jsonpatch.apply_patch(before, diff(before, after)) == after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"l": [1, 2, 3]}, {"l": [1, 2]}),
        ({"l": [1, 2]}, {"l": [0, 1, 2]}),
        ({"l": [{"a": 1}]}, {"l": [{"a": 2}, {"b": 3}]}),
        ({"x": 1}, {"x": [1]}),
        ({"x": {"y": 1}}, {}),
    ],
)
def test_the_patch_round_trips_for_list_and_type_changes(before, after):
    from mlgate.engine.patch import diff

    assert jsonpatch.apply_patch(before, diff(before, after)) == after


@pytest.mark.parametrize("labels", ["team=a", ["team", "a"], 7])
def test_labels_that_are_not_a_mapping_count_as_no_labels_for_matching(labels):
    obj = change(change(pod(), "/spec/containers/0/resources/limits/nvidia.com~1gpu", "0.5"), "/metadata/labels",
                 labels)
    selected = policy_set({"rule": "gpu.limits"}, match={"objectSelector": {"matchLabels": {"team": "a"}}})
    excluded = policy_set({"rule": "gpu.limits"}, exclude={"objectSelector": {"matchLabels": {"team": "a"}}})
    assert evaluate(obj, selected).allowed
    assert not evaluate(obj, excluded).allowed


def test_a_hand_written_facts_file_with_odd_entries_loses_only_those():
    facts = StaticFacts.from_objects([
        {"kind": "Namespace", "metadata": {"name": "ml", "labels": "team=vision"}},
        {"kind": "Namespace", "metadata": "junk"}, ["not", "an", "object"],
        {"kind": "List", "items": {"not": "a list"}},
        {"kind": "Namespace", "metadata": {"name": "ok", "labels": {"team": "nlp"}}},
    ])
    assert facts.namespace_labels("ml") == {} and facts.namespace_labels("ok") == {"team": "nlp"}
