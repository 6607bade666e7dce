"""MLPolicyExceptions applied to one check's result: the findings they cover leave it.

A finding is placed by its path alone, resolved against the object the checks judged: the
container it is about is the `containers`/`initContainers`/`ephemeralContainers` item its path
runs through, and the capability the `capabilities.add` item its path ends at. No message text
is read. An exception whose policy no longer allows exceptions for the rule does nothing (the
policy in force decides, whatever was allowed when the exception was stored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mlgate.engine.policyset import Policy
from mlgate.model import pointer
from mlgate.model.exceptions import Exceptions, PolicyException
from mlgate.model.results import ExceptionRef, Finding, Outcome, RuleResult

__all__ = ["CONTAINER_LISTS", "NARROWINGS", "Narrowing", "Subject", "apply_exceptions", "container_of"]

CONTAINER_LISTS = frozenset({"initContainers", "containers", "ephemeralContainers"})  # PodSpec's, as PSA visits


@dataclass(frozen=True)
class Narrowing:
    """A per-check narrowing: the spec field that names values, where a finding's path holds one, and the
    rules whose findings are placed there (`capabilities` on gpu.max would except nothing: a load error)."""

    field: str
    parent: tuple[str, ...]  # the tokens a finding's path ends with, before the list index
    rules: frozenset[str]


# Findings at securityContext.capabilities.add[i]: pod_security_baseline.capabilities_baseline and
# pod_security_restricted.capabilities_restricted (the restricted drop-ALL finding is not placed, so not excepted)
NARROWINGS = (
    Narrowing("capabilities", ("securityContext", "capabilities", "add"),
              frozenset({"pod-security.baseline", "pod-security.restricted"})),
)


@dataclass(frozen=True)
class Subject:
    """What exceptions match on: the object's namespace, name and labels, and the object the paths point into."""

    namespace: str
    name: str
    labels: dict[str, str]
    document: Mapping[str, Any]

    @classmethod
    def of(cls, obj: Mapping[str, Any], judged: Mapping[str, Any]) -> Subject:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        labels = meta.get("labels")
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), labels, judged)


def apply_exceptions(result: RuleResult, policy: Policy, subject: Subject, exceptions: Exceptions) -> RuleResult:
    """The result less the findings live exceptions cover: `skip` when none is left, naming the exceptions."""
    now = exceptions.now
    if not result.findings or now is None or not policy.allows_exception(result.rule):
        return result
    candidates = [e for e in exceptions.for_rule(policy.key, result.rule)
                  if e.covers_object(subject.namespace, subject.name, subject.labels)]
    if not candidates:
        return result
    live = [e for e in candidates if e.live(now)]
    used: dict[ExceptionRef, None] = {}
    kept: list[Finding] = []
    for finding in result.findings:
        by = next((e for e in live if covers_finding(e, finding, subject.document)), None)
        if by is None:
            kept.append(finding)
        else:
            used[by.ref] = None
    expired = tuple(dict.fromkeys(e.ref for e in candidates if not e.live(now)
                                  and any(covers_finding(e, f, subject.document) for f in kept)))
    if not used and not expired:
        return result
    excepted = len(result.findings) - len(kept)
    if kept or result.dropped:  # findings past those kept were never placed: they stand
        return replace(result, findings=tuple(kept), exceptions=tuple(used), excepted=excepted, expired=expired)
    names = ", ".join(str(ref) for ref in used)
    return replace(result, outcome=Outcome.SKIP, findings=(), note=f"excepted by MLPolicyException {names}",
                   exceptions=tuple(used), excepted=excepted, expired=expired)


def covers_finding(exception: PolicyException, finding: Finding, document: Mapping[str, Any]) -> bool:
    """Every narrowing the exception gives holds for the finding (none given: it covers every finding)."""
    if exception.containers and container_of(document, finding.path) not in exception.containers:
        return False
    for narrowing in NARROWINGS:
        named = getattr(exception, narrowing.field)
        if named and _value_at(document, finding.path, narrowing.parent) not in named:
            return False
    return True


def container_of(document: Mapping[str, Any], path: str) -> str | None:
    """The name of the innermost container the path runs through, or None for a pod-level field."""
    tokens = pointer.split(path)
    for i in range(len(tokens) - 2, -1, -1):
        if tokens[i] in CONTAINER_LISTS and tokens[i + 1].isdigit():
            container = pointer.resolve(document, pointer.join("", *tokens[: i + 2]))
            name = container.get("name") if isinstance(container, dict) else None
            return name if isinstance(name, str) else None
    return None


def _value_at(document: Mapping[str, Any], path: str, parent: tuple[str, ...]) -> str | None:
    tokens = pointer.split(path)
    if len(tokens) <= len(parent) or not tokens[-1].isdigit() or tuple(tokens[-len(parent) - 1:-1]) != parent:
        return None
    value = pointer.resolve(document, path)
    return value if isinstance(value, str) else None
