"""Property tests: real manifests (tests/fixtures/real) and the unit-test builders' objects with malformed
changes (tests/fuzz/shapes.py: type swaps, missing keys, 1e400/nan/inf/-1/2**63, 300-level nesting, unicode,
empty containers, `containers: 5`, names None), judged by the shipped policies (and the shipped set plus gang
injection for each scheduler of examples/policies, with and without cluster facts), as CREATE and as UPDATE
of another shape of the same manifest.

- No exception escapes `evaluate`, with mutation or without, nor the webhook's `parse_review` + `admit`.
- Every rule outcome is pass, fail, warn, skip, or an `error` whose note is a reason, never an exception's
  `Type: message` (the engine's wording for a rule that raised) nor "mutations did not settle".
- The mutation patch applies to the input with jsonpatch and gives the mutated object, and mutating that
  again patches nothing.
- `mlgate mig-lint` reports problems in malformed mig-parted configs (tests/fixtures/mig-configs) and never raises.

Bounded: MLGATE_FUZZ_EXAMPLES examples per property (default 1,000; tests/fuzz takes about 10 s on this
machine). Derandomized where CI=true, so CI runs the same examples every time; locally each run explores new
ones, and a failure prints the seed (`@reproduce_failure`) to replay it. Nothing is written to a hypothesis
database. `bench/fuzz.py` runs the same shapes by the million.
"""

from __future__ import annotations

import json
import os
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

from mlgate.engine import PolicySet, evaluate
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Outcome
from mlgate.rules.mig_layout import lint_mig_config
from mlgate_webhook.review import ReviewError, admit, make_review, parse_review

from .shapes import (
    SCHEDULERS,
    TESTS,
    UNSETTLED,
    Failures,
    cluster_facts,
    engine_level_errors,
    gang_policies,
    judge_all,
    looks_like_exception,
    mutated,
    patch_problems,
    raised_at,
    seed_objects,
    shipped_policies,
)

EXAMPLES = int(os.environ.get("MLGATE_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, database=None, derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True,
)
SEEDS = seed_objects()


class Case:
    """One fuzzed admission. Not a dataclass: hypothesis would print every field of a dataclass, the objects
    too (tens of kB); this prints what was done to which manifest."""

    def __init__(self, name: str, changes: list[str], obj: dict[str, Any], old: dict[str, Any] | None,
                 policies: PolicySet, facts: ClusterFacts, scheduler: str) -> None:
        self.name, self.changes, self.obj, self.old = name, changes, obj, old
        self.policies, self.facts, self.scheduler = policies, facts, scheduler

    def __repr__(self) -> str:
        gang = f"gang-{self.scheduler}" if self.policies is not shipped_policies() else "shipped only"
        return (f"Case({self.name!r}, {self.changes!r}, update={self.old is not None}, policies={gang}, "
                f"facts={self.facts is not NO_FACTS})")


@st.composite
def cases(draw: st.DrawFn) -> Case:
    name, origin = SEEDS[draw(st.integers(0, len(SEEDS) - 1))]
    rng = draw(st.randoms(use_true_random=False))
    obj, changes = mutated(origin, rng)
    old = draw(st.sampled_from(("none", "original", "another shape")))
    old_obj = None if old == "none" else origin if old == "original" else mutated(origin, rng)[0]
    scheduler = draw(st.sampled_from(SCHEDULERS))
    policies = draw(st.sampled_from((shipped_policies(), gang_policies(scheduler))))
    facts = draw(st.sampled_from((NO_FACTS, cluster_facts(scheduler))))
    return Case(name, changes, obj, old_obj, policies, facts, scheduler)


class Caught(Failures):
    """Fails the test on any exception the engine or the webhook caught and logged (a rule that raised, an
    engine failure), naming where it was raised."""

    def __exit__(self, *exc: object) -> None:
        super().__exit__()
        for caught in self.caught:
            pytest.fail(f"{type(caught).__name__}: {caught} raised at {raised_at(caught)}, caught by the engine")


def check_results(label: str, decision: Any) -> None:
    for result in decision.results:
        assert isinstance(result.outcome, Outcome)
        if result.outcome is Outcome.ERROR:
            assert result.note, f"{label}: {result.rule} errored without a reason"
            assert not looks_like_exception(result.note), f"{label}: {result.rule} raised: {result.note}"
            assert result.note != UNSETTLED, f"{label}: {result.rule}: {result.note}"
    assert engine_level_errors(decision) == []


@FUZZ
@given(cases())
def test_no_exception_escapes_evaluate_and_no_rule_raises(case: Case) -> None:
    note(repr(case))
    with Caught():
        for label, decision in judge_all(case.obj, case.policies, case.facts, case.old):
            check_results(label, decision)


@FUZZ
@given(cases(), st.sampled_from(("mutate", "validate")))
def test_the_webhook_answers_every_review_without_raising(case: Case, endpoint: str) -> None:
    note(repr(case))
    operation = "UPDATE" if case.old is not None else "CREATE"
    try:  # as json writes it: NaN and Infinity tokens, which no API server sends, must be a 400
        body = json.dumps(make_review(case.obj, operation, old=case.old)).encode()
    except (ValueError, RecursionError):
        reject()
    try:
        request = parse_review(body, "application/json")
    except ReviewError as refusal:
        assert 400 <= refusal.status < 500
        return
    with Caught():
        admission = admit(request, case.policies, case.facts, endpoint)  # type: ignore[arg-type]
    assert admission.verdict != "error", admission.messages
    assert admission.response["uid"] == request.uid
    orjson.dumps(admission.review())


@FUZZ
@given(cases())
def test_the_mutation_patch_applies_and_mutating_again_adds_nothing(case: Case) -> None:
    note(repr(case))
    operation = "UPDATE" if case.old is not None else "CREATE"
    with Caught():
        decision = evaluate(case.obj, case.policies, facts=case.facts, operation=operation, old_obj=case.old)
        assert patch_problems(case.obj, decision, case.policies, case.facts, operation, case.old) == []


MIG_CONFIGS = [doc for path in sorted((TESTS / "fixtures" / "mig-configs").glob("*.yaml"))
               for doc in yaml.safe_load_all(path.read_text()) if doc]


@FUZZ
@given(st.sampled_from(MIG_CONFIGS), st.randoms(use_true_random=False))
def test_mig_lint_reports_problems_in_a_malformed_mig_parted_config_without_raising(config, rng) -> None:
    layout, changes = mutated(config, rng)
    note(repr(changes))
    for problem in lint_mig_config(layout):
        assert problem.message


@pytest.mark.parametrize(("name", "obj"), SEEDS, ids=[name for name, _ in SEEDS])
@pytest.mark.parametrize("scheduler", ["volcano", "yunikorn"])
def test_every_seed_manifest_is_judged_without_a_rule_raising_and_its_defaults_settle(name, obj, scheduler):
    policies, facts = gang_policies(scheduler), cluster_facts(scheduler)
    with Failures() as failures:
        for label, decision in judge_all(obj, policies, facts, old_obj=obj):
            check_results(label, decision)
            if label == "CREATE":
                assert patch_problems(obj, decision, policies, facts) == []
    assert failures.caught == []
