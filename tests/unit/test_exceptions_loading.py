"""MLPolicyException files and objects: what loads, and the file, line and field of what does not.

One minimal valid exception and one policy; each case changes one field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import DELETE, change, policy_exception, policy_set

from mlgate.loading.exceptions import check_exception_object, compile_exception, load_exception_paths
from mlgate.loading.policies import PolicyLoadError, compile_policy
from mlgate.model.exceptions import PolicyException

RULE = "pod-security.baseline"
EXCEPTION: dict[str, Any] = policy_exception(RULE, "team-a", ["llama"], "NCCL needs NET_ADMIN (NET-1234)")
POLICIES = policy_set({"rule": RULE}, {"rule": "gpu.max", "params": {"perContainer": 8}}).policies


def errors_of(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in check_exception_object(document, POLICIES)]


def test_the_minimal_exception_loads():
    exception, errors = compile_exception(EXCEPTION, "<test>")
    assert errors == []
    assert isinstance(exception, PolicyException)
    assert (exception.namespace, exception.name, exception.rules) == ("team-a", "nccl-net-admin", (RULE,))
    assert check_exception_object(EXCEPTION, POLICIES) == []


@pytest.mark.parametrize(("where", "value", "field", "message"), [
    ("/spec/rules", [], "spec.rules", "list should have at least 1 item after validation, not 0"),
    ("/spec/rules", DELETE, "spec.rules", "required field is missing"),
    ("/spec/expiresAt", DELETE, "spec.expiresAt", "required field is missing"),
    ("/spec/reason", DELETE, "spec.reason", "required field is missing"),
    ("/spec/expiresAt", "2030-01-31", "spec.expiresAt",
     "must be an RFC 3339 date-time such as 2030-01-31T00:00:00Z, not '2030-01-31'"),
    ("/spec/expiresAt", "2030-01-31T00:00:00", "spec.expiresAt",
     "must be an RFC 3339 date-time such as 2030-01-31T00:00:00Z, not '2030-01-31T00:00:00'"),
    ("/spec/match", {}, "spec.match", "give exactly one of names or selector"),
    ("/spec/match", {"names": ["a"], "selector": {"matchLabels": {"a": "b"}}}, "spec.match",
     "give exactly one of names or selector"),
    ("/spec/match", {"selector": {}}, "spec.match",
     "an empty selector would match every object of the namespace; name the labels"),
    ("/spec/capabilities", ["ALL"], "spec.capabilities", '"ALL" cannot be excepted; name each capability'),
    ("/spec/namespaces", ["a"], "spec.namespaces", "unknown field"),
    ("/spec/rules", ["gpu.mx"], "spec.rules[0]", "unknown rule 'gpu.mx'; `mlgate rules` lists them"),
])
def test_a_malformed_exception_is_refused_at_its_field(where: str, value: Any, field: str, message: str):
    assert errors_of(change(EXCEPTION, where, value)) == [(field, message)]


def test_a_capability_narrowing_on_a_rule_whose_findings_are_not_capabilities_is_refused():
    broad = change(change(EXCEPTION, "/spec/rules", ["gpu.max"]), "/spec/capabilities", ["NET_ADMIN"])
    assert errors_of(broad) == [("spec.capabilities", "narrows only pod-security.baseline, pod-security.restricted; "
                                 "no finding of gpu.max is about capabilities")]


def test_an_exception_for_a_policy_not_in_force_is_refused():
    assert errors_of(change(EXCEPTION, "/spec/policy", "tset")) == [
        ("spec.policy", "no policy 'tset' is in force here (a ClusterMLPolicy, or an MLPolicy in namespace 'team-a')")]


def test_an_exception_for_a_rule_the_policy_does_not_bind_is_refused():
    assert errors_of(change(EXCEPTION, "/spec/rules", [RULE, "gpu.limits"])) == [
        ("spec.rules[1]", "policy 'test' has no rule 'gpu.limits'; it has gpu.max, pod-security.baseline")]


def test_a_policy_with_allow_exceptions_false_refuses_every_exception():
    closed = policy_set({"rule": RULE}, allowExceptions=False).policies
    assert [(e.field, e.message) for e in check_exception_object(EXCEPTION, closed)] == [
        ("spec.rules[0]", "policy 'test' allows no exceptions (allowExceptions: false), so "
                          "'pod-security.baseline' cannot be excepted")]


def test_a_policy_that_lists_rules_refuses_exceptions_for_the_others():
    listed = policy_set({"rule": RULE}, {"rule": "gpu.max"}, allowExceptions=["gpu.max"]).policies
    assert [(e.field, e.message) for e in check_exception_object(EXCEPTION, listed)] == [
        ("spec.rules[0]", "policy 'test' allows exceptions only for gpu.max, so 'pod-security.baseline' "
                          "cannot be excepted")]
    assert check_exception_object(change(EXCEPTION, "/spec/rules", ["gpu.max"]), listed) == []


def test_a_policy_that_allows_exceptions_for_a_rule_it_does_not_bind_does_not_load():
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
                "spec": {"allowExceptions": ["gpu.max"], "rules": [{"rule": RULE}]}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is None
    assert [(e.field, e.message) for e in errors] == [
        ("spec.allowExceptions[0]", "'gpu.max' is not a rule of this policy; one of: pod-security.baseline")]


def test_allow_exceptions_takes_a_boolean_not_a_string():
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
                "spec": {"allowExceptions": "false", "rules": [{"rule": RULE}]}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is None and {e.field for e in errors} >= {"spec.allowExceptions.bool"}


def test_file_errors_name_the_file_and_line(tmp_path: Path):
    path = tmp_path / "exceptions.yaml"
    broken = change(change(EXCEPTION, "/spec/expiresAt", "soon"), "/spec/rules", ["gpu.max"])
    path.write_text(yaml.safe_dump(EXCEPTION, sort_keys=False) + "---\n" + yaml.safe_dump(broken, sort_keys=False))
    with pytest.raises(PolicyLoadError) as caught:
        load_exception_paths([path], POLICIES)
    lines = path.read_text().splitlines()
    (error,) = caught.value.errors
    assert (error.source, error.field) == (str(path), "spec.expiresAt")
    assert lines[error.line - 1].strip() == "expiresAt: soon"  # type: ignore[operator]


def test_a_rule_the_policy_refuses_is_reported_at_its_line(tmp_path: Path):
    path = tmp_path / "exceptions.yaml"
    path.write_text(yaml.safe_dump(change(EXCEPTION, "/spec/rules", [RULE, "gpu.limits"]), sort_keys=False))
    with pytest.raises(PolicyLoadError) as caught:
        load_exception_paths([path], POLICIES)
    (error,) = caught.value.errors
    assert error.field == "spec.rules[1]"
    assert path.read_text().splitlines()[error.line - 1].strip() == "- gpu.limits"  # type: ignore[operator]


def test_two_exceptions_of_one_name_in_one_namespace_are_refused(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(EXCEPTION))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(EXCEPTION))
    with pytest.raises(PolicyLoadError, match="exception 'team-a/nccl-net-admin' is also defined in"):
        load_exception_paths([tmp_path], POLICIES)


def test_a_policy_document_in_an_exceptions_file_is_refused(tmp_path: Path):
    path = tmp_path / "exceptions.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy",
                                    "metadata": {"name": "p"}, "spec": {"rules": [{"rule": RULE}]}}))
    with pytest.raises(PolicyLoadError, match=re.escape("not an exception: expected apiVersion mlgate.dev/v1alpha1 "
                                                        "and kind MLPolicyException, got "
                                                        "mlgate.dev/v1alpha1/ClusterMLPolicy")):
        load_exception_paths([path], POLICIES)


def test_an_exception_without_a_namespace_is_in_default_as_kubectl_would_put_it():
    exception, _ = compile_exception(change(EXCEPTION, "/metadata/namespace", DELETE), "<test>")
    assert exception is not None and exception.namespace == "default"
