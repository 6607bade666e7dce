"""The one entry point: `evaluate(obj, policies, facts=...) -> Decision`.

As admission does, mutations run first (fixed order, re-applied until nothing changes),
then every check runs on the mutated object. The patch is the RFC 6902 diff between the
object as given and as mutated.

An UPDATE is judged on what it changes, as Kyverno's `allowExistingViolations` and CRD
validation ratcheting do: a finding the old object had already (same policy, rule, path,
reason and detail) warns instead of denying, so a job stored before a policy existed can
still be labelled, suspended or resumed. An object being deleted (`deletionTimestamp` set)
is not judged at all: the only UPDATE it gets is the removal of its finalizers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Literal

from mlgate.engine.depth import too_deep
from mlgate.engine.exceptions import Subject, apply_exceptions
from mlgate.engine.match import Scope, applies, unseen_namespace
from mlgate.engine.patch import MAX_COPY_DEPTH, diff, restore, snapshot
from mlgate.engine.policyset import Binding, Policy, PolicySet, UnknownKinds
from mlgate.model.exceptions import NO_EXCEPTIONS, Exceptions
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import (
    KEPT_PER_RULE,
    PRE_EXISTING,
    Action,
    Decision,
    Finding,
    Outcome,
    RuleResult,
    Skipped,
    Unchecked,
    Unevaluable,
)
from mlgate.model.workload import Unwritable, Workload, as_dict
from mlgate.rules.registry import Context, MutationFailed
from mlgate.workloads.catalog import KindCatalog
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
    deadline: float | None = None,
    exceptions: Exceptions = NO_EXCEPTIONS,
) -> Decision:
    """The decision on `obj`. With a `deadline` (a time.monotonic() value), the work stops at the first rule
    boundary past it and DeadlineExceeded is raised: a caller that gave up gets no work done for it after.
    `exceptions` (MLPolicyExceptions, judged at their `now`) take the findings they cover out of checks' results."""
    try:
        return _evaluate(obj, policies, facts=facts, operation=operation, old_obj=old_obj, mutate=mutate,
                         deadline=deadline, exceptions=exceptions)
    except RecursionError:  # a value nested deeper than the engine can walk (engine/depth.py)
        refusal = too_deep(obj)
        return Decision(allowed=False, results=[refusal])


def _evaluate(
    obj: dict[str, Any],
    policies: PolicySet,
    *,
    facts: ClusterFacts,
    operation: Literal["CREATE", "UPDATE"],
    old_obj: dict[str, Any] | None,
    mutate: bool,
    deadline: float | None,
    exceptions: Exceptions = NO_EXCEPTIONS,
) -> Decision:
    if operation == "UPDATE" and _being_deleted(obj):
        return Decision(allowed=True, note="being deleted: only its finalizers can change")
    kinds = policies.kinds
    # Mutations write to a copy (`obj` stays as given, for the patch); extracting from that copy at once lets
    # the first mutation round reuse this workload instead of extracting it again.
    described = kinds.find(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    writable = described is not None and described.mutable  # no copy for a kind mutations decline anyway
    try:
        frozen = snapshot(obj) if mutate and policies.mutation_steps and writable else None
    except RecursionError:  # nested past what a copy can hold (engine/depth.py): judged, but not mutated
        frozen, uncopyable = None, True
    else:
        uncopyable = False
    start: dict[str, Any] = restore(frozen) if frozen is not None else obj
    workload = extract(start, old_obj, kinds=kinds, facts=facts)
    candidates = policies.policies
    if workload is None:
        if not policies.any_kind:
            return Decision(allowed=True, note=f"no pod template to judge: {_kind(obj)}")
        workload, candidates = _bare(obj, old_obj), policies.any_kind  # a Service, a ConfigMap: only VAPs judge it
    context = Context(facts=facts, operation=operation, deadline=deadline)
    scope = Scope(workload, facts, operation)
    selected = [p for p in candidates if applies(p, scope)
                and (workload.known_kind or p.unknown_kinds is not UnknownKinds.IGNORE)]
    results: list[RuleResult] = [] if facts.known or not policies.selecting_namespaces \
        else _unseen(policies, selected, scope)
    mutated = obj
    settled = None
    if mutate:
        chosen = {id(p) for p in selected}
        steps = [(p, b) for p, b in policies.mutation_steps if id(p) in chosen]
        if workload.mutable and frozen is not None:
            mutated, mutation_results, settled = _mutate(obj, steps, context, old_obj, kinds,
                                                         first=(frozen, start, workload))
            results.extend(mutation_results)
        else:
            results.extend(_declined(steps, _why_not_mutated(workload, uncopyable)))
    target = settled or (extract(mutated, old_obj, kinds=kinds, facts=facts) if mutated is not obj else None) \
        or workload
    subject = Subject.of(obj, mutated) if exceptions.items else None
    known_kind = workload.known_kind
    for policy in selected:
        warn_only = not known_kind and policy.unknown_kinds is UnknownKinds.WARN
        policy_context = _for_policy(context, policy)
        for binding in policy.checks:
            if deadline is not None:
                context.check_deadline()
            result = _run_check(policy, binding, target, policy_context)
            if subject is not None:
                result = apply_exceptions(result, policy, subject, exceptions)
            results.append(replace(result, outcome=Outcome.WARN) if warn_only and result.blocks else result)
    patch = diff(obj, mutated) if mutated is not obj else []
    decision = Decision(allowed=True, results=results, patch=patch, mutated=mutated, notes=list(target.notes))
    decision.allowed = not decision.violations
    if not decision.allowed and old_obj is not None and operation == "UPDATE":
        _ratchet(decision, old_obj, policies, facts, deadline)
    return decision


def _ratchet(decision: Decision, old_obj: dict[str, Any], policies: PolicySet, facts: ClusterFacts,
             deadline: float | None) -> None:
    """Let denials whose every finding the old object had already pass as warnings; not a ValidatingAdmissionPolicy's,
    which the API server never ratchets."""
    before = evaluate(old_obj, policies, facts=facts, mutate=False, deadline=deadline)
    known = {(r.policy, r.rule, f.path, f.reason, f.detail) for r in before.results for f in r.findings}
    unratcheted = {p.key for p in policies.any_kind}
    for i, result in enumerate(decision.results):
        if result.outcome is Outcome.FAIL and result.policy not in unratcheted and all(
            (result.policy, result.rule, f.path, f.reason, f.detail) in known for f in result.findings
        ):
            decision.results[i] = replace(result, outcome=Outcome.WARN, note=PRE_EXISTING)
    decision.allowed = not decision.violations


def _unseen(policies: PolicySet, selected: list[Policy], scope: Scope) -> list[RuleResult]:
    """A skip that says "could not check" for each check of a policy whose namespaceSelector needed cluster facts
    that were not given: such a policy neither applies nor is silently left out."""
    chosen = {id(p) for p in selected}
    return [RuleResult(p.key, b.rule.id, b.action, Outcome.SKIP, note=why, failure_policy=p.failure_policy,
                       unchecked=(why,))
            for p in policies.selecting_namespaces if id(p) not in chosen and (why := unseen_namespace(p, scope))
            for b in p.bindings if b.rule.check is not None]


def _why_not_mutated(workload: Workload, uncopyable: bool) -> str:
    if uncopyable:
        return f"the object is nested deeper than {MAX_COPY_DEPTH} levels, too deep to copy: not mutated"
    if workload.known_kind:
        return f"{workload.kind} pods are built by its operator from fields mlgate does not write: not mutated"
    return f"{workload.kind or 'this'} is a kind no description knows: not mutated"


def _declined(steps: list[tuple[Policy, Binding]], why: str) -> list[RuleResult]:
    """Mutations that cannot apply to this object: each one a skip that says why."""
    return [RuleResult(p.key, b.rule.id, b.action, Outcome.SKIP, note=why, failure_policy=p.failure_policy)
            for p, b in steps]


def _bare(obj: dict[str, Any], old_obj: dict[str, Any] | None) -> Workload:
    """An object without pod templates, as policies of any kind judge it: no templates, nothing to mutate."""
    meta = as_dict(obj.get("metadata"))
    return Workload(obj, str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
                    str(meta.get("name") or meta.get("generateName") or ""), str(meta.get("namespace") or ""),
                    old_obj=old_obj)


def _being_deleted(obj: dict[str, Any]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))


def _mutate(
    obj: dict[str, Any], steps: list[tuple[Policy, Binding]], context: Context, old_obj: dict[str, Any] | None,
    kinds: KindCatalog, *, first: tuple[bytes, dict[str, Any], Workload],
) -> tuple[dict[str, Any], list[RuleResult], Workload | None]:
    """Apply every mutation in order, round after round, until a round changes nothing.

    A rule that raises is dropped and its round starts again from the round's first state,
    so nothing it half-wrote survives. Rules that report their changes need no copy of the
    object around them; for the others a before/after snapshot tells. A round in which no
    rule changed anything needs no snapshot at its end either. The workload of the round that
    changed nothing still describes the result, so the checks take it as it is (third value).
    """
    if not steps:
        return obj, [], None
    round_start, current, reuse = first  # `obj` frozen, a copy of it, and that copy's workload
    ready: Workload | None = reuse  # for the first round only: after a round that wrote, extract afresh
    changed: set[tuple[str, str]] = set()
    errors: dict[tuple[str, str], str] = {}
    skipped: dict[tuple[str, str], str] = {}
    settled: Workload | None = None
    rounds = 0
    while rounds < MAX_MUTATION_ROUNDS:
        rounds += 1
        failed, moved, workload = _mutation_round(current, steps, context, old_obj, kinds, ready=ready,
                                                  changed=changed, errors=errors, skipped=skipped)
        ready = None
        if failed:  # each rule can fail once, so this cannot loop for ever
            rounds -= 1
            current = restore(round_start)
            continue
        if not moved:
            settled = workload
            break
        round_end = snapshot(current)
        if round_end == round_start:
            settled = workload
            break
        round_start = round_end
    else:
        for policy, binding in steps:
            errors.setdefault((policy.key, binding.rule.id), "mutations did not settle")
    results = []
    for policy, binding in steps:
        key = (policy.key, binding.rule.id)
        if key in errors:
            outcome, note = Outcome.ERROR, errors[key]
        elif key in skipped:
            outcome, note = Outcome.SKIP, skipped[key]
        elif key in changed:
            outcome, note = Outcome.PASS, "mutated"
        else:
            outcome, note = Outcome.SKIP, "nothing to change"
        results.append(
            RuleResult(policy.key, binding.rule.id, binding.action, outcome, note=note,
                       failure_policy=policy.failure_policy)
        )
    return current, results, settled


def _mutation_round(
    current: dict[str, Any], steps: list[tuple[Policy, Binding]], context: Context, old_obj: dict[str, Any] | None,
    kinds: KindCatalog, *, ready: Workload | None, changed: set[tuple[str, str]],
    errors: dict[tuple[str, str], str], skipped: dict[tuple[str, str], str],
) -> tuple[bool, bool, Workload | None]:
    """One pass over the rules: (a rule raised, so the caller restores and retries; a rule changed
    the object; the workload the rules saw). A rule that declines (a `Skipped`, or a write the kind has
    no field for) is skipped from then on; what it half-wrote is undone the same way."""
    workload = ready or extract(current, old_obj, kinds=kinds, facts=context.facts)
    moved = False
    for policy, binding in steps:
        key = (policy.key, binding.rule.id)
        if key in errors or key in skipped or workload is None:
            continue
        if context.deadline is not None:
            context.check_deadline()
        rule = binding.rule
        before = None if rule.reports_changes else snapshot(current)
        try:
            claimed = rule.mutate(workload, binding.params, _for_policy(context, policy))  # type: ignore[misc]
        except Unwritable as exc:
            skipped[key] = str(exc)
            return True, moved, workload
        except MutationFailed as exc:  # the object's fault, not the rule's: no traceback
            errors[key] = str(exc)
            return True, moved, workload
        except Exception as exc:  # a rule bug must not take the request down
            log.exception("mutation %s/%s failed", policy.key, rule.id)
            errors[key] = f"{type(exc).__name__}: {exc}"
            return True, moved, workload
        if isinstance(claimed, Skipped):
            skipped[key] = claimed.reason
            if before is None or snapshot(current) == before:
                continue
            return True, moved, workload  # it wrote before it declined: undo the round
        if (bool(claimed) if before is None else snapshot(current) != before):
            changed.add(key)
            moved = True
    return False, moved, workload


def _for_policy(context: Context, policy: Policy) -> Context:
    """The context a policy's rules run in: most policies count the built-in GPU names, and share it."""
    return context if policy.gpus is context.gpus else replace(context, gpus=policy.gpus)


def _run_check(policy: Policy, binding: Binding, workload: Any, context: Context) -> RuleResult:
    outcome, note, dropped = Outcome.PASS, "", 0
    findings: tuple[Finding, ...] = ()
    unchecked: tuple[str, ...] = ()
    try:
        verdict = binding.rule.check(workload, binding.params, context)  # type: ignore[misc]
        if isinstance(verdict, Skipped):
            outcome, note = Outcome.SKIP, verdict.reason
            unchecked = () if verdict.looked else (verdict.reason,)
        elif isinstance(verdict, Unevaluable):
            outcome, note = Outcome.ERROR, verdict.reason
        else:
            found, dropped, missed = _kept(verdict)
            unchecked = tuple(dict.fromkeys(missed))
            if found:
                findings = tuple(sorted(found, key=_finding_order))
                outcome = Outcome.FAIL if binding.action is Action.DENY else Outcome.WARN
            elif unchecked:  # nothing wrong in what it saw, but it did not see everything
                outcome, note = Outcome.SKIP, "; ".join(unchecked)
    except Exception as exc:  # a rule bug becomes an `error` outcome, never a crash
        log.exception("check %s/%s failed", policy.key, binding.rule.id)
        outcome, findings, note, unchecked = Outcome.ERROR, (), f"{type(exc).__name__}: {exc}", ()
    return RuleResult(policy.key, binding.rule.id, binding.action, outcome, findings, note, policy.failure_policy,
                      dropped, unchecked)


def _kept(verdict: Iterable[Finding | Unchecked]) -> tuple[set[Finding], int, list[str]]:
    """The rule's distinct findings, the first KEPT_PER_RULE of them kept, how many more it made (counted, not
    remembered, so memory stays flat however many a rule makes), and what it could not look at."""
    found: set[Finding] = set()
    dropped = 0
    missed: list[str] = []
    for finding in verdict:
        if isinstance(finding, Unchecked):
            if len(missed) < KEPT_PER_RULE:
                missed.append(finding.reason)
        elif len(found) < KEPT_PER_RULE:
            found.add(finding)
        elif finding not in found:
            dropped += 1
    return found, dropped, missed


def _finding_order(finding: Finding) -> tuple[str, str, str]:
    return finding.path, finding.reason, finding.detail


def _kind(obj: dict[str, Any]) -> str:
    return f"{obj.get('apiVersion') or '?'}/{obj.get('kind') or '?'}"
