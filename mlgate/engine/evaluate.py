"""The one entry point: `evaluate(obj, policies, facts=...) -> Decision`.

As admission does, mutations run first (fixed order, re-applied until nothing changes),
then every check runs on the mutated object. The patch is the RFC 6902 diff between the
object as given and as mutated.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from mlgate.engine.match import applies
from mlgate.engine.patch import diff, restore, snapshot
from mlgate.engine.policyset import Binding, Policy, PolicySet
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Action, Decision, Finding, Outcome, RuleResult, Skipped, Unevaluable
from mlgate.rules.registry import Context
from mlgate.workloads.extract import extract

MAX_MUTATION_ROUNDS = 5
log = logging.getLogger("mlgate.engine")


def evaluate(
    obj: dict[str, Any],
    policies: PolicySet,
    *,
    facts: ClusterFacts = NO_FACTS,
    operation: Literal["CREATE", "UPDATE"] = "CREATE",
    old_obj: dict[str, Any] | None = None,
    mutate: bool = True,
) -> Decision:
    workload = extract(obj, old_obj)
    if workload is None:
        return Decision(allowed=True, note=f"not an ML workload: {_kind(obj)}")
    context = Context(facts=facts, operation=operation)
    selected = [p for p in policies.policies if applies(p, workload, facts)]
    results: list[RuleResult] = []
    mutated = obj
    if mutate:
        mutated, mutation_results = _mutate(obj, selected, context, old_obj)
        results.extend(mutation_results)
    target = (extract(mutated, old_obj) if mutated is not obj else None) or workload
    for policy in selected:
        for binding in policy.bindings:
            if binding.rule.check is not None:
                results.append(_run_check(policy, binding, target, context))
    patch = diff(obj, mutated) if mutated is not obj else []
    decision = Decision(allowed=True, results=results, patch=patch, mutated=mutated)
    decision.allowed = not decision.violations
    return decision


def _mutate(
    obj: dict[str, Any], policies: list[Policy], context: Context, old_obj: dict[str, Any] | None
) -> tuple[dict[str, Any], list[RuleResult]]:
    """Apply every mutation in order, round after round, until a round changes nothing.

    A rule that raises is dropped and its round starts again from the round's first state,
    so nothing it half-wrote survives. Rules that report their changes need no copy of the
    object around them; for the others a before/after snapshot tells.
    """
    steps = sorted(
        ((b.rule.order, p.key, i, p, b) for p in policies for i, b in enumerate(p.bindings) if b.rule.mutate),
        key=lambda s: s[:3],
    )
    if not steps:
        return obj, []
    round_start = snapshot(obj)
    current: dict[str, Any] = restore(round_start)
    changed: set[tuple[str, str]] = set()
    errors: dict[tuple[str, str], str] = {}
    rounds = 0
    while rounds < MAX_MUTATION_ROUNDS:
        rounds += 1
        failed = _mutation_round(current, steps, context, old_obj, changed=changed, errors=errors)
        if failed:  # each rule can fail once, so this cannot loop for ever
            rounds -= 1
            current = restore(round_start)
            continue
        round_end = snapshot(current)
        if round_end == round_start:
            break
        round_start = round_end
    else:
        for *_, policy, binding in steps:
            errors.setdefault((policy.key, binding.rule.id), "mutations did not settle")
    results = []
    for *_, policy, binding in steps:
        key = (policy.key, binding.rule.id)
        if key in errors:
            outcome, note = Outcome.ERROR, errors[key]
        elif key in changed:
            outcome, note = Outcome.PASS, "mutated"
        else:
            outcome, note = Outcome.SKIP, "nothing to change"
        results.append(
            RuleResult(policy.key, binding.rule.id, binding.action, outcome, note=note,
                       failure_policy=policy.failure_policy)
        )
    return current, results


def _mutation_round(
    current: dict[str, Any], steps: list[Any], context: Context, old_obj: dict[str, Any] | None,
    *, changed: set[tuple[str, str]], errors: dict[tuple[str, str], str],
) -> bool:
    """One pass over the rules; True when a rule raised (the caller restores and retries)."""
    workload = extract(current, old_obj)
    for *_, policy, binding in steps:
        key = (policy.key, binding.rule.id)
        if key in errors or workload is None:
            continue
        rule = binding.rule
        before = None if rule.reports_changes else snapshot(current)
        try:
            claimed = rule.mutate(workload, binding.params, context)  # type: ignore[misc]
        except Exception as exc:  # a rule bug must not take the request down
            log.exception("mutation %s/%s failed", policy.key, rule.id)
            errors[key] = f"{type(exc).__name__}: {exc}"
            return True
        if (bool(claimed) if before is None else snapshot(current) != before):
            changed.add(key)
    return False


def _run_check(policy: Policy, binding: Binding, workload: Any, context: Context) -> RuleResult:
    def result(outcome: Outcome, findings: tuple[Finding, ...] = (), note: str = "") -> RuleResult:
        return RuleResult(policy.key, binding.rule.id, binding.action, outcome, findings, note,
                          policy.failure_policy)

    try:
        verdict = binding.rule.check(workload, binding.params, context)  # type: ignore[misc]
        if isinstance(verdict, Skipped):
            return result(Outcome.SKIP, note=verdict.reason)
        if isinstance(verdict, Unevaluable):
            return result(Outcome.ERROR, note=verdict.reason)
        findings = tuple(sorted(set(verdict), key=lambda f: (f.path, f.reason, f.detail)))
    except Exception as exc:  # a rule bug becomes an `error` outcome, never a crash
        log.exception("check %s/%s failed", policy.key, binding.rule.id)
        return result(Outcome.ERROR, note=f"{type(exc).__name__}: {exc}")
    if not findings:
        return result(Outcome.PASS)
    return result(Outcome.FAIL if binding.action is Action.DENY else Outcome.WARN, findings)


def _kind(obj: dict[str, Any]) -> str:
    return f"{obj.get('apiVersion') or '?'}/{obj.get('kind') or '?'}"
