"""MLPolicy CEL mutations: compiled at load, run by the engine's mutation loop beside the built-in ones, landing
in the user's own fields, idempotent."""

from __future__ import annotations

from typing import Any

import pytest

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.policies import compile_policy, load_policy_text
from mlgate.model import pointer
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome, RuleResult
from mlgate.rules.cel import env
from mlgate.rules.cel.mutation import merge
from mlgate.rules.cel.structs import rewrite
from tests.builders import job, pytorchjob

COST_CENTER = {
    "name": "cost-center", "patchType": "JSONPatch",
    "jsonPatch": {"expression": "object.metadata.?labels['cost-center'].orValue('') == "
                                "namespaceObject.metadata.labels['cost-center'] ? [] : "
                                "[JSONPatch{op: 'add', path: '/metadata/labels', value: object.metadata.?labels"
                                ".orValue({})}, JSONPatch{op: 'add', path: '/metadata/labels/' + "
                                "jsonpatch.escapeKey('cost-center'), value: namespaceObject.metadata.labels"
                                "['cost-center']}]"},
}
TOLERATION = {
    "name": "gpu-toleration", "patchType": "JSONPatch", "forEach": "template",
    "jsonPatch": {"expression": "template.spec.?tolerations.orValue([]).exists(t, t.key == 'example.com/gpu') ? [] "
                                ": [JSONPatch{op: 'add', path: '/spec/tolerations', value: template.spec.?tolerations"
                                ".orValue([]) + [{'key': 'example.com/gpu', 'operator': 'Exists'}]}]"},
}
TTL = {"name": "ttl", "patchType": "ApplyConfiguration",
       "applyConfiguration": {"expression": "Object{spec: Object.spec{ttlSecondsAfterFinished: 3600}}"}}
FACTS = StaticFacts.from_objects([{"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": "ml", "labels": {"cost-center": "cc-42"}}}])


def cel_policy(*mutations: dict[str, Any], **spec: Any) -> PolicySet:
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "test"},
                "spec": {"mutations": list(mutations), **spec}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is not None, errors
    return PolicySet((policy,))


def outcomes(decision_results: list[RuleResult]) -> dict[str, tuple[Outcome, str]]:
    return {r.rule: (r.outcome, r.note) for r in decision_results}


def test_a_json_patch_copies_the_namespaces_cost_center_label_onto_the_job():
    decision = evaluate(pytorchjob(), cel_policy(COST_CENTER), facts=FACTS)
    assert decision.mutated["metadata"]["labels"]["cost-center"] == "cc-42"
    assert outcomes(decision.results)["cost-center"] == (Outcome.PASS, "mutated")


def test_a_mutation_applied_to_its_own_result_changes_nothing():
    policies = cel_policy(COST_CENTER, TOLERATION, TTL)
    first = evaluate(job(), policies, facts=FACTS)
    assert first.patch
    again = evaluate(first.mutated, policies, facts=FACTS)
    assert again.patch == []
    assert {o for o, _ in outcomes(again.results).values()} == {Outcome.SKIP}


def test_a_template_patch_lands_in_every_template_of_the_users_own_object():
    decision = evaluate(pytorchjob(), cel_policy(TOLERATION))
    replicas = decision.mutated["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        assert {"key": "example.com/gpu", "operator": "Exists"} in replicas[role]["template"]["spec"]["tolerations"]
    assert {op["path"].rsplit("/tolerations", 1)[0] for op in decision.patch} == {
        f"/spec/pytorchReplicaSpecs/{role}/template/spec" for role in ("Master", "Worker")}


def test_a_template_patch_writes_the_pod_template_of_a_batch_job_at_its_own_path():
    decision = evaluate(job(), cel_policy(TOLERATION))
    assert pointer.resolve(decision.mutated, "/spec/template/spec/tolerations")[-1] == {
        "key": "example.com/gpu", "operator": "Exists"}


def test_an_apply_configuration_sets_ttl_on_a_job_and_keeps_the_rest():
    decision = evaluate(job(), cel_policy(TTL))
    assert decision.mutated["spec"]["ttlSecondsAfterFinished"] == 3600
    assert decision.mutated["spec"]["template"] == job()["spec"]["template"]


def test_an_apply_configuration_merges_containers_by_name_and_replaces_atomic_lists():
    current = {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}], "args": ["1", "2"]}
    applied = {"containers": [{"name": "b", "image": "z"}], "args": ["3"]}
    assert merge(current, applied) == {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}],
                                       "args": ["3"]}
    assert merge({"a": 1, "b": 2}, {"b": None}) == {"a": 1}


def test_cel_mutations_run_after_the_built_in_ones_whatever_the_policy_order():
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "a-first"},
                "spec": {"rules": [{"rule": "defaults.gpu-toleration"}], "mutations": [TOLERATION]}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is not None, errors
    steps = [b.rule.id for _, b in PolicySet((policy,)).mutation_steps]
    assert steps == ["defaults.gpu-toleration", "gpu-toleration"]


def test_a_mutation_that_never_settles_is_an_error():
    grows = {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'replace', path: '/metadata/name',"
                                                                  " value: object.metadata.name + 'x'}]"}}
    decision = evaluate(job(), cel_policy(grows))
    assert outcomes(decision.results)["mutations[0]"] == (Outcome.ERROR, "mutations did not settle")


def test_a_patch_at_a_missing_path_is_an_error_that_the_failure_policy_decides():
    missing = {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'replace', path: '/nope/x', "
                                                                    "value: 1}]"}}
    denied = evaluate(job(), cel_policy(missing))
    outcome, note = outcomes(denied.results)["mutations[0]"]
    assert outcome is Outcome.ERROR and "JSONPatch" in note
    assert not denied.allowed
    assert evaluate(job(), cel_policy(missing, failurePolicy="Ignore")).allowed


def test_a_failed_test_op_leaves_the_object_as_it_was_and_is_no_error():
    guarded = {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'test', path: '/kind', value: "
                                                                    "'Pod'}, JSONPatch{op: 'add', path: '/x', "
                                                                    "value: 1}]"}}
    decision = evaluate(job(), cel_policy(guarded))
    assert decision.patch == []
    assert outcomes(decision.results)["mutations[0]"] == (Outcome.SKIP, "nothing to change")


def test_a_false_match_condition_skips_the_mutation():
    decision = evaluate(job(), cel_policy(TTL, matchConditions=[{"name": "never", "expression": "false"}]))
    assert decision.patch == []
    assert outcomes(decision.results)["ttl"] == (Outcome.SKIP, "matchCondition never is false")


def test_a_root_named_only_inside_a_path_string_is_not_read():
    nested = {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: "
                                                                   "'/spec/template/metadata', value: {}}]"}}
    decision = evaluate(job(), cel_policy(nested))
    assert decision.mutated["spec"]["template"]["metadata"] == {}


def test_struct_syntax_is_rewritten_outside_strings_only():
    made = rewrite("[JSONPatch{op: 'add', path: 'JSONPatch{op: 1}', value: Object.spec{a: 1}}]")
    assert made.text == "[{'op': 'add', 'path': 'JSONPatch{op: 1}', 'value': {'a': 1}}]"


def load_errors(spec_yaml: str) -> list[str]:
    text = "apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata:\n  name: p\nspec:\n" + spec_yaml
    policies, problems = load_policy_text(text, "p.yaml")
    assert not (policies and problems)
    return [str(p) for p in problems]


@pytest.mark.parametrize(("spec", "expected"), [
    ("  mutations:\n  - patchType: JSONPatch\n    jsonPatch:\n"
     "      expression: \"[JSONPatch{op: 'add', value: nope}]\"\n",
     "p.yaml:9: spec.mutations[0].jsonPatch.expression: CEL 1:30: undeclared reference to 'nope'"),
    ("  mutations:\n  - patchType: JSONPatch\n    action: deny\n    jsonPatch: {expression: '[]'}\n",
     "p.yaml:8: spec.mutations[0].action: a mutation takes no action"),
    ("  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration: {expression: '[]'}\n",
     "p.yaml:8: spec.mutations[0].applyConfiguration.expression: CEL 1:1: the expression's type is list<dyn>, "
     "not an Object{...}"),
    ("  mutations:\n  - patchType: JSONPatch\n    jsonPatch: {expression: '[template]'}\n",
     "p.yaml:8: spec.mutations[0].jsonPatch.expression: template is set only in mutations with forEach: template"),
    ("  mutations:\n  - patchType: JSONPatch\n    applyConfiguration: {expression: 'Object{}'}\n",
     "p.yaml:7: spec.mutations[0]: value error, patchType JSONPatch needs jsonPatch.expression"),
])
def test_a_broken_mutation_is_a_load_error_at_its_file_line_and_column(spec: str, expected: str):
    errors = load_errors(spec)
    assert any(e.startswith(expected) for e in errors), errors


def test_without_the_cel_extra_mutations_load_and_say_they_were_not_applied(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(env, "_cel", None)
    decision = evaluate(job(), cel_policy(TTL))
    assert decision.patch == []
    assert outcomes(decision.results)["ttl"] == (
        Outcome.SKIP, "CEL mutations cannot be applied: cel-expr-python is not installed (pip install 'mlgate[cel]')")


def test_a_move_op_with_from_is_applied_as_rfc_6902_says():
    move = {"patchType": "JSONPatch", "jsonPatch": {"expression": "has(object.metadata.annotations) ? [] : "
                                                                 "[JSONPatch{op: 'add', path: '/metadata/annotations',"
                                                                 " value: {}}, JSONPatch{op: 'copy', from: "
                                                                 "'/metadata/name', path: '/metadata/annotations/n'}]"}}
    decision = evaluate(job(), cel_policy(move))
    assert decision.mutated["metadata"]["annotations"] == {"n": job()["metadata"]["name"]}
