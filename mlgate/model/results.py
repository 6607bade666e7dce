"""Rule outcomes and the engine's decision, as plain data.

A rule never raises to say "no": it returns findings. The engine turns findings into a
`RuleResult` with one of five outcomes, and results into a `Decision`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"  # violated, and the action is deny
    WARN = "warn"  # violated, and the action is warn or audit
    ERROR = "error"  # could not be evaluated; the policy's failurePolicy decides
    SKIP = "skip"  # does not apply to this object


PRE_EXISTING = "already there before this update"  # the note of a denial that an UPDATE did not cause
# Findings per rule spelled out in a denial, the warnings and the decision log; the rest are counted
# ("and 7,996 more"), so one object with thousands of containers cannot make a 6 MB message. The results
# themselves keep every finding.
MESSAGES_PER_RULE = 20
# Findings per rule a result keeps; past it they are counted (`dropped`), so an object with 150,000 containers
# does not hold a million Finding objects in memory.
KEPT_PER_RULE = 1000


class Action(StrEnum):
    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"


class FailurePolicy(StrEnum):
    FAIL = "Fail"
    IGNORE = "Ignore"


# The userinfo of a URI (`https://user:TOKEN@host/...`): never repeated in a message, a log or a report
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@\"']*@")


def redact(text: str) -> str:
    """`text` with the credentials of every URI in it replaced by `***`."""
    return _USERINFO.sub(r"\1***@", text) if "@" in text else text


@dataclass(frozen=True, slots=True)  # slots make the frozen __init__, run for every rule result, cheaper
class Finding:
    """One violation: a stable short reason, the field path, what is wrong, what to do instead. A URI's
    credentials quoted in the detail or the fix are redacted here, once, for every output."""

    path: str
    reason: str
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if "@" in self.detail or "@" in self.fix:
            object.__setattr__(self, "detail", redact(self.detail))
            object.__setattr__(self, "fix", redact(self.fix))

    def message(self) -> str:
        text = f"{self.reason}: {self.path}: {self.detail}"
        return f"{text}; {self.fix}" if self.fix else text


def unchecked_text(reason: str) -> str:
    """How every output says what a rule could not look at."""
    return f"could not check: {reason}"


@dataclass(frozen=True, slots=True)
class Line:
    """One line a report says about a rule's result, as data: a finding, or (`finding` None) a text such as
    "could not evaluate: ..." or "and 7 more findings". Every output builds its wording from these fields;
    nothing parses a formatted line back apart."""

    policy: str
    rule: str
    finding: Finding | None = None
    text: str = ""
    note: str = ""  # said after the line in brackets, e.g. PRE_EXISTING

    @property
    def head(self) -> str:
        return f"[{self.policy}/{self.rule}]"

    def body(self) -> str:
        """The line without its `[policy/rule]` head: `reason: path: detail; fix (note)`."""
        text = self.finding.message() if self.finding is not None else self.text
        return f"{text} ({self.note})" if self.note else text

    def render(self) -> str:
        """The engine's one message format: `[policy/rule] reason: path: detail; fix`."""
        return f"{self.head} {self.body()}"

    def shortened(self, limit: int) -> str:
        """The line in at most `limit` characters. The policy, rule and reason always stay; then, as room allows:
        detail and fix without the path, the detail alone, the fix alone, and last the fix or text cut at a word."""
        full = self.render()
        if len(full) <= limit:
            return full
        note = f" ({self.note})" if self.note else ""
        finding = self.finding
        if finding is None:
            return _cut(full, limit)
        head = f"{self.head} {finding.reason}: "
        both = f"{finding.detail}; {finding.fix}" if finding.fix else finding.detail
        candidates = [head + both + note, head + finding.detail + note] + ([head + finding.fix] if finding.fix else [])
        for candidate in candidates:
            if len(candidate) <= limit:
                return candidate
        return _cut(candidates[-1], limit)


def _cut(text: str, limit: int) -> str:
    cut = text[: limit - 3]
    space = cut.rfind(" ", len(cut) - 16)  # end at a word unless that loses much
    return (cut[:space] if space > 0 else cut) + "..."


@dataclass(frozen=True)
class Skipped:
    """A rule's way to say it does not apply, and why; `looked=False` when it would apply but the rule could not
    look (no cluster facts, a claim the cluster does not have yet), which every report then says."""

    reason: str
    looked: bool = True


@dataclass(frozen=True, slots=True)
class Unchecked:
    """Yielded among a rule's findings: one thing the rule could not look at, and why (a claim not in the
    cluster yet). The rule's other findings stand; the result says what went unchecked."""

    reason: str


@dataclass(frozen=True)
class Unevaluable:
    """A rule's way to say it could not decide (missing or contradictory input)."""

    reason: str


def rfc3339(moment: datetime) -> str:
    """A time as Kubernetes writes one: `2030-01-31T12:00:00Z`."""
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class ExceptionRef:
    """An MLPolicyException a result names: one that excepted findings, or an expired one that would have."""

    namespace: str
    name: str
    expires_at: datetime

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)  # slots make the frozen __init__, run for every rule result, cheaper
class RuleResult:
    policy: str
    rule: str
    action: Action
    outcome: Outcome
    findings: tuple[Finding, ...] = ()
    note: str = ""  # why it was skipped or errored
    failure_policy: FailurePolicy = FailurePolicy.FAIL
    dropped: int = 0  # findings past KEPT_PER_RULE, counted but not kept
    unchecked: tuple[str, ...] = ()  # what the rule would have judged but could not look at, and why
    exceptions: tuple[ExceptionRef, ...] = ()  # live MLPolicyExceptions that excepted some or all findings
    excepted: int = 0  # how many findings they excepted (no longer in `findings`)
    expired: tuple[ExceptionRef, ...] = ()  # expired MLPolicyExceptions that would have excepted a finding left

    @property
    def total(self) -> int:
        """How many findings the rule made, kept or not."""
        return len(self.findings) + self.dropped

    def lines(self, limit: int | None = None) -> list[Line]:
        """One line per finding; past `limit` findings, one line that counts the rest."""
        if self.outcome is Outcome.ERROR:
            return [Line(self.policy, self.rule, text=f"could not evaluate: {self.note}")]
        note = PRE_EXISTING if self.note == PRE_EXISTING else ""
        shown = self.findings if limit is None else self.findings[:limit]
        lines = [Line(self.policy, self.rule, f, note=note) for f in shown]
        if len(shown) < self.total:
            lines.append(Line(self.policy, self.rule, text=f"and {self.total - len(shown):,} more findings"))
        return lines

    def exception_lines(self) -> list[Line]:
        """What exceptions did to this result: one line per exception that applied, one per expired one. The
        name comes first: a warning cut to length (kubectl shows 120 characters) loses the kind, then the date."""
        return ([Line(self.policy, self.rule, text=f"excepted by {e} until {rfc3339(e.expires_at)} (MLPolicyException)")
                 for e in self.exceptions]
                + [Line(self.policy, self.rule, text=f"not excepted: {e} expired at {rfc3339(e.expires_at)} "
                                                     "(MLPolicyException)") for e in self.expired])

    def messages(self, limit: int | None = None) -> list[str]:
        """`lines` in the engine's one format: `[policy/rule] reason: path: detail; fix`."""
        return [line.render() for line in self.lines(limit)]

    @property
    def blocks(self) -> bool:
        if self.outcome is Outcome.FAIL:
            return True
        return self.outcome is Outcome.ERROR and self.failure_policy is FailurePolicy.FAIL


@dataclass
class Decision:
    """What the engine says about one object."""

    allowed: bool
    results: list[RuleResult] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: dict[str, Any] | None = None
    note: str = ""  # why the object was not judged at all, e.g. "no pod template to judge"
    notes: list[str] = field(default_factory=list)  # how it was judged, where a reader must know (unknown kind)

    @property
    def violations(self) -> list[RuleResult]:
        # `blocks`, inlined: this runs over every result of every review
        return [r for r in self.results if r.outcome is Outcome.FAIL
                or (r.outcome is Outcome.ERROR and r.failure_policy is FailurePolicy.FAIL)]

    @property
    def warning_lines(self) -> list[Line]:
        out: list[Line] = []
        for r in self.results:
            warned = r.outcome is Outcome.WARN and r.action is not Action.AUDIT  # a deny an UPDATE did not cause too
            if warned or (r.outcome is Outcome.ERROR and not r.blocks):
                out.extend(r.lines(MESSAGES_PER_RULE))
            if (r.exceptions or r.expired) and r.action is not Action.AUDIT:  # what an exception excepted is said
                out.extend(r.exception_lines())
        return out

    @property
    def warnings(self) -> list[str]:
        return [line.render() for line in self.warning_lines]

    @property
    def unchecked_lines(self) -> list[Line]:
        """What enforcing rules could not look at (audit rules aside): said beside the verdict, never silent."""
        return [Line(r.policy, r.rule, text=unchecked_text(reason))
                for r in self.results if r.action is not Action.AUDIT for reason in r.unchecked]

    @property
    def audit_annotations(self) -> dict[str, str]:
        return {
            f"{r.policy}.{r.rule}": "; ".join(line.body() for line in r.lines(MESSAGES_PER_RULE))
            for r in self.results
            if r.outcome is Outcome.WARN and r.action is Action.AUDIT
        }

    def deny_message(self) -> str:
        return "\n".join(m for r in self.violations for m in r.messages(MESSAGES_PER_RULE))
