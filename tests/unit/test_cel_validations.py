"""MLPolicy CEL validations: compiled at load, judged by the engine as rules, findings at the user's own fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.exceptions import compile_exception
from mlgate.loading.policies import compile_policy, load_policy_text
from mlgate.model.exceptions import Exceptions
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome, RuleResult
from mlgate.rules.cel import env
from tests.builders import change, job, policy_exception, pytorchjob


def cel_policy(*validations: dict[str, Any], **spec: Any) -> PolicySet:
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "test"},
                "spec": {"validations": list(validations), **spec}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is not None, errors
    return PolicySet((policy,))


def results(obj: dict[str, Any], policies: PolicySet, **kwargs: Any) -> dict[str, RuleResult]:
    return {r.rule: r for r in evaluate(obj, policies, **kwargs).results}


def load_errors(spec_yaml: str) -> list[str]:
    text = "apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata:\n  name: p\nspec:\n" + spec_yaml
    policies, problems = load_policy_text(text, "p.yaml")
    assert not (policies and problems)
    return [str(p) for p in problems]


TEAM = {"name": "team-label", "expression": "object.metadata.?labels.team.orValue('') != ''",
        "message": "every training job names its team in the label team"}


def test_a_false_validation_denies_with_its_message_and_a_true_one_passes():
    policies = cel_policy(TEAM)
    denied = results(pytorchjob(), policies)["team-label"]
    assert denied.outcome is Outcome.FAIL
    assert [f.reason for f in denied.findings] == ["every training job names its team in the label team"]
    labelled = change(pytorchjob(), "/metadata/labels", {"team": "vision"})
    assert results(labelled, policies)["team-label"].outcome is Outcome.PASS


def test_a_validation_without_a_name_is_named_by_its_index():
    policies = cel_policy(TEAM, {"expression": "true"})
    assert set(results(pytorchjob(), policies)) == {"team-label", "validations[1]"}


def test_warn_and_audit_actions_admit_with_a_warning_as_rules_do():
    decision = evaluate(pytorchjob(), cel_policy({**TEAM, "action": "warn"}))
    assert decision.allowed
    assert [r.outcome for r in decision.results] == [Outcome.WARN]


def test_for_each_container_points_at_each_offending_container_in_the_users_object():
    registry = {"forEach": "container", "fieldPath": ".image", "expression": "container.image.startsWith('corp/')",
                "messageExpression": "'image ' + container.image + ' is not from corp/'"}
    result = results(pytorchjob(), cel_policy(registry))["validations[0]"]
    assert [f.path for f in result.findings] == [
        "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0/image",
        "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/image",
    ]
    assert result.findings[0].reason.startswith("image ") and "of Master pods" in result.findings[0].detail


def test_the_same_container_expression_judges_a_batch_job_at_its_own_path():
    registry = {"forEach": "container", "expression": "container.image.startsWith('corp/')"}
    result = results(job(), cel_policy(registry))["validations[0]"]
    assert [f.path for f in result.findings] == ["/spec/template/spec/containers/0"]


def test_for_each_template_sees_role_replicas_and_the_pod_spec():
    expression = "template.role != 'Worker' || template.replicas <= 2"
    policies = cel_policy({"forEach": "template", "expression": expression, "fieldPath": ".spec.containers"})
    assert results(pytorchjob(workers=2), policies)["validations[0]"].outcome is Outcome.PASS
    result = results(pytorchjob(workers=3), policies)["validations[0]"]
    assert [f.path for f in result.findings] == ["/spec/pytorchReplicaSpecs/Worker/template/spec/containers"]


def test_the_workload_view_counts_pods_and_gpus_as_the_built_in_rules_do():
    policies = cel_policy(
        {"name": "pods", "expression": "workload.pods == 4"},
        {"name": "per-job", "expression": "workload.gpus.perJob == 8"},
        {"name": "per-pod", "expression": "workload.gpus.maxPerPod == 2 && workload.gpus.maxPerContainer == 2"},
        {"name": "roles", "expression": "workload.roles.map(r, r.name) == ['Master', 'Worker']"
                                        " && workload.roles[1].gpusPerPod == 2"},
        {"name": "identity", "expression": "workload.kind == 'PyTorchJob' && workload.namespace == 'ml'"},
    )
    outcomes = {rule: r.outcome for rule, r in results(pytorchjob(workers=3, gpus=2), policies).items()}
    assert outcomes == dict.fromkeys(("pods", "per-job", "per-pod", "roles", "identity"), Outcome.PASS)


def test_a_variable_that_errs_fails_only_the_expressions_that_name_it():
    policies = cel_policy(
        {"name": "uses", "expression": "variables.team == 'a'"},
        {"name": "again", "expression": "variables.team == 'a' && variables.team.size() == 1"},
        {"name": "names-broken", "expression": "variables.broken"},
        variables=[{"name": "team", "expression": "object.metadata.labels.team"},
                   {"name": "broken", "expression": "object.metadata.nothing.here == 1"}],
    )
    labelled = change(pytorchjob(), "/metadata/labels", {"team": "a"})
    outcomes = {r: v.outcome for r, v in results(labelled, policies).items()}
    assert outcomes == {"uses": Outcome.PASS, "again": Outcome.PASS, "names-broken": Outcome.ERROR}


def test_a_false_match_condition_skips_the_validations():
    policies = cel_policy(TEAM, matchConditions=[{"name": "gpu-jobs", "expression": "workload.gpus.perJob > 100"}])
    result = results(pytorchjob(), policies)["team-label"]
    assert (result.outcome, result.note) == (Outcome.SKIP, "matchCondition gpu-jobs is false")


def test_params_are_the_policys_own_values():
    policies = cel_policy({"expression": "object.metadata.namespace in params.namespaces"},
                          params={"namespaces": ["ml"]})
    assert results(pytorchjob(), policies)["validations[0]"].outcome is Outcome.PASS


def test_a_runtime_error_is_an_error_that_the_failure_policy_decides():
    broken = {"name": "broken", "expression": "object.spec.missing.field == 1"}
    failing = evaluate(pytorchjob(), cel_policy(broken))
    assert [r.outcome for r in failing.results] == [Outcome.ERROR] and not failing.allowed
    assert "missing" in failing.results[0].note
    assert evaluate(pytorchjob(), cel_policy(broken, failurePolicy="Ignore")).allowed


def test_a_comprehension_past_the_iteration_budget_errs_instead_of_running_on():
    endless = {"expression": "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b,"
                             " [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a + b + c + d > 0))))"}
    result = results(pytorchjob(), cel_policy(endless))["validations[0]"]
    assert result.outcome is Outcome.ERROR and "budget" in result.note


def test_namespace_object_comes_from_the_cluster_facts():
    facts = StaticFacts.from_objects([{"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "ml", "labels": {"tier": "prod"}}}])
    policies = cel_policy({"expression": "namespaceObject.metadata.labels.tier == 'prod'"})
    assert results(pytorchjob(), policies, facts=facts)["validations[0]"].outcome is Outcome.PASS


def test_an_exception_names_a_validation_by_its_name():
    exception, problems = compile_exception(policy_exception("team-label", "ml", ["mnist"], "legacy job"), "<test>")
    assert exception is not None, problems
    excepted = results(pytorchjob(), cel_policy(TEAM), exceptions=Exceptions((exception,), datetime.now(UTC)))
    assert excepted["team-label"].outcome is Outcome.SKIP and excepted["team-label"].excepted == 1


def test_kubernetes_library_functions_are_there():
    expression = ("quantity('1') == quantity('1000m') && quantity('2Gi').isGreaterThan(quantity('1G'))"
                  " && [1, 2, 3].sum() == 6 && 'abc123'.find('[0-9]+') == '123'"
                  " && url('https://a.b:8080/x').getPort() == '8080' && cidr('10.0.0.0/8').containsIP('10.1.2.3')"
                  " && ip('::1').family() == 6 && '%s-%d'.format(['a', 1]) == 'a-1' && 'A'.lowerAscii() == 'a'")
    assert results(pytorchjob(), cel_policy({"expression": expression}))["validations[0]"].outcome is Outcome.PASS


def test_a_gpu_count_written_as_a_yaml_integer_is_a_quantity():
    expression = "container.resources.limits.all(r, quantity(container.resources.limits[r]).asInteger() <= 1)"
    policies = cel_policy({"forEach": "container", "expression": expression})
    assert results(pytorchjob(gpus=1), policies)["validations[0]"].outcome is Outcome.PASS
    assert results(pytorchjob(gpus=2), policies)["validations[0]"].outcome is Outcome.FAIL


@pytest.mark.parametrize(("spec", "expected"), [
    ("  validations:\n    - expression: \"object.metadata.name + 1 == 'a'\"\n",
     "p.yaml:7: spec.validations[0].expression: CEL 1:26: found no matching overload for '_==_' applied to "
     "'(int, string)'"),
    ("  validations:\n    - expression: \"object.metadata.name ==\"\n",
     "p.yaml:7: spec.validations[0].expression: CEL 1:24: Syntax error: mismatched input '<EOF>'"),
    ("  validations:\n    - expression: \"semver('1.0.0').major() == 1\"\n",
     "p.yaml:7: spec.validations[0].expression: CEL 1:7: semver: semver is a Kubernetes CEL library mlgate does "
     "not support (docs/authoring.md lists what it does)"),
    ("  validations:\n    - expression: \"container.image != ''\"\n",
     "p.yaml:7: spec.validations[0].expression: container is set only in validations with forEach: container"),
    ("  validations:\n    - expression: \"variables.tem == ''\"\n",
     "p.yaml:7: spec.validations[0].expression: no variable 'tem' is declared before this; declared: none"),
    ("  validations:\n    - expression: \"object.metadata.name.size()\"\n",
     "p.yaml:7: spec.validations[0].expression: CEL 1:1: the expression's type is int, not bool"),
    ("  validations:\n    - {expression: 'true', fieldPath: 'spec..x'}\n",
     "p.yaml:7: spec.validations[0].fieldPath: 'spec..x' is not a field path such as .image or "
     ".resources.limits['nvidia.com/gpu']"),
    ("  validations:\n    - {name: Team.Label, expression: 'true'}\n",
     "p.yaml:7: spec.validations[0].name: string should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"),
    ("  match: {}\n", "p.yaml:5: spec: value error, a policy needs rules, validations or mutations"),
])
def test_a_broken_expression_is_a_load_error_at_its_file_line_and_column(spec: str, expected: str):
    (error,) = load_errors(spec)
    assert error.startswith(expected)


def test_without_the_cel_extra_validations_load_and_say_they_could_not_be_checked(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(env, "_cel", None)
    result = results(pytorchjob(), cel_policy(TEAM))["team-label"]
    assert result.outcome is Outcome.SKIP
    assert result.unchecked == ("CEL validations cannot be checked: cel-expr-python is not installed "
                                "(pip install 'mlgate[cel]')",)


def test_a_variable_is_evaluated_once_however_many_expressions_name_it(monkeypatch: pytest.MonkeyPatch):
    policies = cel_policy(*({"name": f"uses-{i}", "expression": "variables.team != ''"} for i in range(3)),
                          variables=[{"name": "team", "expression": "object.metadata.?labels.team.orValue('')"}])
    (variable,) = policies.policies[0].bindings[0].rule.check.__self__.program.variables.values()  # type: ignore[union-attr]
    runs: list[object] = []
    real = env.run
    monkeypatch.setattr(env, "run", lambda program, bound: runs.append(program) or real(program, bound))
    assert {r.outcome for r in results(pytorchjob(), policies).values()} == {Outcome.FAIL}
    assert runs.count(variable.program) == 1
