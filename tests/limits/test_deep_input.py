"""Deep input is judged, or refused with a finding that names where it is deep; never a RecursionError."""

from __future__ import annotations

from typing import Any

from mlgate.engine import evaluate
from mlgate.engine.depth import deepest, too_deep
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from tests.builders import DELETE, change, pytorchjob

SHIPPED = load_policy_paths([default_policy_dir()])
TOLERATIONS = "/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations"


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = {"a": [value]} if level % 2 else {"a": value}
    return value


def job_with_free_form_field(depth: int) -> dict[str, Any]:
    job = change(pytorchjob(), TOLERATIONS, DELETE)
    job["spec"]["extra"] = nested(depth)
    return job


def test_a_free_form_field_500_levels_deep_is_judged_and_still_gets_its_defaults() -> None:
    decision = evaluate(job_with_free_form_field(500), SHIPPED)
    assert decision.allowed, decision.deny_message()
    assert any(op["path"] == TOLERATIONS for op in decision.patch)
    assert not [r for r in decision.results if r.outcome.value == "error"]


def test_a_field_nested_past_python_s_recursion_limit_is_judged_and_mutated() -> None:
    decision = evaluate(job_with_free_form_field(1200), SHIPPED)  # 1,802 levels with its lists
    assert decision.allowed and any(op["path"] == TOLERATIONS for op in decision.patch)


def test_a_field_too_deep_to_copy_is_judged_and_its_mutations_skipped_with_the_reason() -> None:
    decision = evaluate(job_with_free_form_field(3000), SHIPPED)
    assert decision.allowed and decision.patch == []
    mutations = [r for r in decision.results if r.rule.startswith("defaults.")]
    assert mutations and all(r.outcome.value == "skip" and "too deep to copy" in r.note for r in mutations)
    privileged = job_with_free_form_field(3000)  # (built in place: copy.deepcopy cannot copy it either)
    worker = privileged["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["securityContext"]["privileged"] = True
    assert not evaluate(privileged, SHIPPED).allowed  # still judged


def test_a_value_the_engine_cannot_walk_is_refused_with_a_finding_naming_its_path() -> None:
    finding = too_deep(job_with_free_form_field(1500)).findings[0]
    assert (finding.reason, finding.path) == ("object nested too deep", "/spec/extra/a/0/a/a/0/a/a/0/a/a/…")
    assert "2252 levels deep" in finding.detail  # spec, extra, 1,500 mappings and the 750 lists among them


def test_the_deepest_path_is_found_without_recursion() -> None:
    depth, path = deepest({"spec": nested(50_000)})
    assert depth == 1 + 50_000 + 25_000 and len(path) == depth and path[:4] == ["spec", "a", "0", "a"]
