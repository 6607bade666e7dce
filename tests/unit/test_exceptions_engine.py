"""MLPolicyExceptions in the engine: which objects they match, when they expire, how narrowly they except.

The fixtures are one Job whose two containers each add a capability pod-security.baseline forbids
(`main`: NET_ADMIN; `nccl`: NET_ADMIN and SYS_ADMIN), one policy, and one minimal exception that
covers everything; each test changes one field of one of them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import change, job, policy_exception, policy_set

from mlgate.engine import PolicySet, evaluate
from mlgate.engine.exceptions import container_of
from mlgate.loading.exceptions import compile_exception
from mlgate.loading.policies import compile_policy
from mlgate.model.exceptions import Exceptions, PolicyException
from mlgate.model.results import Decision, ExceptionRef, Outcome, RuleResult

RULE = "pod-security.baseline"
EXPIRES = datetime(2030, 1, 31, tzinfo=UTC)
BEFORE, AFTER = EXPIRES - timedelta(seconds=1), EXPIRES
CONTAINERS = "/spec/template/spec/containers"


def two_containers() -> dict[str, Any]:
    obj = job()
    obj["metadata"]["labels"] = {"team": "vision"}
    obj = change(obj, f"{CONTAINERS}/0/securityContext/capabilities/add", ["NET_ADMIN"])
    nccl = {**obj["spec"]["template"]["spec"]["containers"][0], "name": "nccl"}
    obj = change(obj, f"{CONTAINERS}/-", nccl)
    return change(obj, f"{CONTAINERS}/1/securityContext/capabilities/add", ["NET_ADMIN", "SYS_ADMIN"])


OBJ = two_containers()
EXCEPTION: dict[str, Any] = policy_exception(RULE, "ml", ["train"], "NCCL over RoCE needs NET_ADMIN (NET-1234)")


def policies(**spec: Any) -> PolicySet:
    return policy_set({"rule": RULE}, **spec)


def excepted(document: dict[str, Any]) -> PolicyException:
    exception, errors = compile_exception(document, "<test>")
    assert exception is not None, errors
    return exception


def judge(obj: dict[str, Any] = OBJ, *documents: dict[str, Any], at: datetime = BEFORE,
          policy: PolicySet | None = None) -> tuple[Decision, RuleResult]:
    exceptions = Exceptions(tuple(excepted(d) for d in (documents or (EXCEPTION,))), now=at)
    decision = evaluate(obj, policy or policies(), exceptions=exceptions)
    (result,) = [r for r in decision.results if r.rule == RULE]
    return decision, result


def left(result: RuleResult) -> list[str]:
    return [f.path for f in result.findings]


REF = ExceptionRef("ml", "nccl-net-admin", EXPIRES)


def test_without_exceptions_the_job_is_denied_three_times():
    decision = evaluate(OBJ, policies())
    assert not decision.allowed
    assert len(decision.results[0].findings) == 3


def test_an_exception_covering_every_finding_turns_the_result_into_a_skip_naming_it():
    decision, result = judge()
    assert decision.allowed
    assert result.outcome is Outcome.SKIP
    assert result.exceptions == (REF,) and result.excepted == 3
    assert result.note == "excepted by MLPolicyException ml/nccl-net-admin"


def test_the_admission_warnings_name_the_exception_and_its_expiry():
    decision, _ = judge()
    assert decision.warnings == [
        f"[test/{RULE}] excepted by ml/nccl-net-admin until 2030-01-31T00:00:00Z (MLPolicyException)"]


@pytest.mark.parametrize(("where", "value"), [
    ("/metadata/name", "other"),
    ("/metadata/namespace", "other"),
])
def test_an_object_of_another_name_or_namespace_is_not_excepted(where: str, value: str):
    decision, result = judge(change(OBJ, where, value))
    assert not decision.allowed
    assert result.exceptions == () and len(result.findings) == 3


@pytest.mark.parametrize(("selector", "applies"), [
    ({"matchLabels": {"team": "vision"}}, True),
    ({"matchLabels": {"team": "nlp"}}, False),
    ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["vision", "nlp"]}]}, True),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
])
def test_a_label_selector_matches_objects_by_their_labels(selector: dict[str, Any], applies: bool):
    by_labels = change(EXCEPTION, "/spec/match", {"selector": selector})
    decision, _ = judge(OBJ, by_labels)
    assert decision.allowed is applies


def test_an_exception_just_before_its_expiry_applies():
    decision, _ = judge(at=BEFORE)
    assert decision.allowed


def test_an_exception_at_its_expiry_does_nothing_and_the_result_names_it_as_expired():
    decision, result = judge(at=AFTER)
    assert not decision.allowed
    assert result.outcome is Outcome.FAIL and len(result.findings) == 3
    assert result.exceptions == () and result.expired == (REF,)
    assert f"[test/{RULE}] not excepted: ml/nccl-net-admin expired at 2030-01-31T00:00:00Z (MLPolicyException)" \
        in decision.warnings


def test_a_container_narrowing_excepts_one_container_of_two():
    decision, result = judge(OBJ, change(EXCEPTION, "/spec/containers", ["nccl"]))
    assert not decision.allowed
    assert left(result) == [f"{CONTAINERS}/0/securityContext/capabilities/add/0"]
    assert result.exceptions == (REF,) and result.excepted == 2


def test_a_capability_narrowing_excepts_one_capability_of_two():
    _, result = judge(OBJ, change(EXCEPTION, "/spec/capabilities", ["NET_ADMIN"]))
    assert left(result) == [f"{CONTAINERS}/1/securityContext/capabilities/add/1"]  # SYS_ADMIN stands


def test_container_and_capability_narrowings_must_both_hold():
    narrow = change(change(EXCEPTION, "/spec/containers", ["nccl"]), "/spec/capabilities", ["NET_ADMIN"])
    _, result = judge(OBJ, narrow)
    assert left(result) == [f"{CONTAINERS}/0/securityContext/capabilities/add/0",
                            f"{CONTAINERS}/1/securityContext/capabilities/add/1"]
    assert result.excepted == 1


def test_a_container_narrowing_does_not_except_a_pod_level_finding():
    host_network = change(OBJ, "/spec/template/spec/hostNetwork", True)
    _, result = judge(host_network, change(EXCEPTION, "/spec/containers", ["main", "nccl"]))
    assert left(result) == ["/spec/template/spec/hostNetwork"]


def test_a_capability_narrowing_does_not_except_another_check_of_the_same_container():
    privileged = change(OBJ, f"{CONTAINERS}/1/securityContext/privileged", True)
    _, result = judge(privileged, change(EXCEPTION, "/spec/capabilities", ["NET_ADMIN", "SYS_ADMIN"]))
    assert left(result) == [f"{CONTAINERS}/1/securityContext/privileged"]


def test_a_live_exception_beside_an_expired_one_excepts_and_the_expired_one_is_not_blamed():
    expired = change(change(EXCEPTION, "/metadata/name", "old"), "/spec/expiresAt", "2020-01-01T00:00:00Z")
    decision, result = judge(OBJ, expired, EXCEPTION)
    assert decision.allowed and result.exceptions == (REF,) and result.expired == ()


def test_an_exception_for_another_policy_or_rule_does_nothing():
    for document in (change(EXCEPTION, "/spec/policy", "other"), change(EXCEPTION, "/spec/rules", ["gpu.max"])):
        decision, result = judge(OBJ, document)
        assert not decision.allowed and result.exceptions == ()


def test_a_policy_that_allows_no_exceptions_is_not_excepted_even_by_a_stored_exception():
    decision, result = judge(policy=policies(allowExceptions=False))
    assert not decision.allowed and result.exceptions == ()


def test_a_policy_that_lists_the_rule_is_excepted():
    decision, _ = judge(policy=policies(allowExceptions=[RULE]))
    assert decision.allowed


def test_an_mlpolicy_is_named_by_its_name_in_the_exceptions_namespace():
    document = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "MLPolicy",
                "metadata": {"name": "test", "namespace": "ml"}, "spec": {"rules": [{"rule": RULE}]}}
    policy, errors = compile_policy(document, "<test>")
    assert policy is not None, errors
    decision, _ = judge(policy=PolicySet((policy,)))
    assert decision.allowed


def test_the_container_a_path_is_about_is_read_from_the_object():
    assert container_of(OBJ, f"{CONTAINERS}/1/securityContext/capabilities/add/0") == "nccl"
    assert container_of(OBJ, "/spec/template/spec/hostNetwork") is None
    assert container_of(OBJ, f"{CONTAINERS}/7/securityContext") is None  # no such container


def test_exceptions_must_be_judged_at_a_time_with_a_zone():
    with pytest.raises(ValueError, match="time with a zone"):
        Exceptions((excepted(EXCEPTION),), now=datetime(2030, 1, 1))
