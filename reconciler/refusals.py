"""Children the API server would not create, and the Stalled condition that says so: shared by the TrainingJob
and InferenceService passes.

`create_children` creates the missing children one by one, so one refusal never stops the others, and sorts what
the API refused into `Refusals`:
- `quota`: a ResourceQuota's 403 ("exceeded quota", or "failed quota" for a pod without the requests or limits
  the quota requires), with the API's message;
- `unserved`: a PodGroup whose kind the API server does not serve (404: the gang scheduler's CRDs are missing);
- `refused`: any other 4xx in REFUSED (invalid, forbidden by admission, too large): "<status>: <message>";
- `conflicts`: a 409 from a same-named object someone else controls (children.create_missing reads it).
Quota and unserved kinds ask for a prompt retry (`PassResult.requeue`): they clear by themselves. The last two make
`create_stall`'s Stalled/ChildRefused or Stalled/NameConflict; `stalled_on` puts it into a status,
`stall_event` records a Warning Event when it flips, and `stall_backoff` spaces the retries out: as long as
the owner has been stalled, 5 s to 5 min, never every second (a fix needs a person).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .children import ChildKey, create_missing
from .client import ApiError, KubeClient
from .events import record_event
from .reasons import Reason
from .results import PassResult
from .status import STALLED, condition, parse_time, set_condition

__all__ = ["CHILD_REFUSED", "INVALID_NAME", "NAME_CONFLICT", "POLICY_VIOLATION", "QUOTA_REFUSALS", "REFUSED",
           "STALL_BACKOFF", "Refusals", "create_children", "create_stall", "stall_backoff",
           "stall_event", "stalled_on"]

# in the ResourceQuota admission plugin's 403 messages: over the quota, or a pod without the requests or
# limits a quota on them requires ("failed quota: <name>: must specify limits.cpu for: ...")
QUOTA_REFUSALS = ("exceeded quota", "failed quota")
REFUSED = (400, 403, 404, 413, 422)  # creates the API refuses for good until something changes (not 409, 429)
POLICY_VIOLATION, INVALID_NAME = "PolicyViolation", "InvalidName"  # pre-flight reasons of the Failed condition
NAME_CONFLICT, CHILD_REFUSED = "NameConflict", "ChildRefused"  # Stalled reasons this module sets
STALL_BACKOFF = (5.0, 300.0)  # seconds: the first retry of a refused create, and the longest wait


@dataclass
class Refusals:
    """Children the API would not create in this pass, by "Kind/name"; the others were still created."""

    quota: dict[str, str] = field(default_factory=dict)  # a ResourceQuota's 403: the API's message
    unserved: dict[str, str] = field(default_factory=dict)  # a PodGroup kind without its CRDs (404): apiVersion
    refused: dict[str, str] = field(default_factory=dict)  # any other 4xx in REFUSED: "<status>: <message>"
    conflicts: dict[str, str] = field(default_factory=dict)  # a 409 from someone else's object: its controller


def create_children(client: KubeClient, desired: list[dict[str, Any]], owned: dict[ChildKey, dict[str, Any]],
                    result: PassResult) -> Refusals:
    """Create the missing children one by one; those the API refuses (see the module) are returned, and the
    others still created. Any other error (5xx, 429) raises: the pass is retried as a whole."""
    refused = Refusals()
    for child in desired:
        child_name = f"{child['kind']}/{child['metadata']['name']}"
        try:
            create_missing(client, [child], owned, result)
        except ApiError as exc:
            message = exc.message
            if exc.status == 403 and any(refusal in message for refusal in QUOTA_REFUSALS):
                refused.quota[child_name] = message
            elif exc.status == 404 and child["kind"] == "PodGroup":
                refused.unserved[child_name] = child["apiVersion"]
            elif exc.status in REFUSED:  # said in the status and retried with a backoff (stall_backoff)
                refused.refused[child_name] = f"{exc.status}: {message}"
                continue
            else:
                raise
            result.requeue = True  # quota may free up, CRDs may be installed: look again later
    refused.conflicts = dict(result.conflicts)
    return refused


def create_stall(refusals: Refusals, owner: str = "job") -> Reason | None:
    """(reason, message) for the Stalled condition when a create was refused for good or hit a name conflict;
    `owner` names the owner in the advice ("job", "service")."""
    if refusals.conflicts:
        held = "; ".join(f"{_child(name)} exists and belongs to {holder}"
                         for name, holder in sorted(refusals.conflicts.items()))
        return Reason(NAME_CONFLICT, f"{held}, not to this {owner}: rename the {owner}, or delete or rename the "
                                     "other object; retried with a backoff")
    if refusals.refused:
        first = sorted(refusals.refused)[0]
        others = f" (and {len(refusals.refused) - 1} more)" if len(refusals.refused) > 1 else ""
        return Reason(CHILD_REFUSED, f"{_child(first)}{others} could not be created: {refusals.refused[first]}; "
                                     f"fix the {owner}'s spec, or what refuses it (an admission webhook or policy); "
                                     "retried with a backoff")
    return None


def _child(name: str) -> str:
    kind, _, child = name.partition("/")
    return f"{kind} {child!r}"


def stall_backoff(status: dict[str, Any], now: str) -> float | None:
    """Seconds until an owner stalled on a refused create looks again: as long as it has been stalled (so the
    waits double), within STALL_BACKOFF; None when it is not stalled so."""
    stalled = condition(status, STALLED) or {}
    if stalled.get("status") != "True" or stalled.get("reason") not in (NAME_CONFLICT, CHILD_REFUSED):
        return None
    since = stalled.get("lastTransitionTime")
    elapsed = (parse_time(now) - parse_time(str(since))).total_seconds() if since else 0.0
    low, high = STALL_BACKOFF
    return min(high, max(low, elapsed))


def stalled_on(old: dict[str, Any], new: dict[str, Any], cause: Reason, stamp: str) -> dict[str, Any]:
    """`new` with Stalled True for `cause`, its lastTransitionTime kept from `old` while it stays True (the
    status computation knows only the causes it observes, and would flip it to False in between)."""
    before = [c for c in old.get("conditions") or [] if c.get("type") == STALLED]
    stalled, = set_condition(before, STALLED, "True", *cause, now=stamp)
    conditions = [c for c in new.get("conditions") or [] if c.get("type") != STALLED]
    at = next((i for i, c in enumerate(new.get("conditions") or []) if c.get("type") == STALLED), len(conditions))
    return {**new, "conditions": [*conditions[:at], stalled, *conditions[at:]]}


def stall_event(client: KubeClient, owner: dict[str, Any], old: dict[str, Any], new: dict[str, Any], stamp: str,
                *, announced: str | None) -> None:
    """A Kubernetes Event when Stalled flips or names another cause (not for a new message alone, nor when
    the phase's event just said the same reason: `announced`, None when no phase event was recorded)."""
    before, after = condition(old, STALLED) or {}, condition(new, STALLED)
    if after is None or (before.get("status"), before.get("reason")) == (after.get("status"), after.get("reason")):
        return
    if announced is not None and announced == after.get("reason"):
        return
    record_event(client, owner, str(after.get("reason")), str(after.get("message")),
                 warning=after.get("status") == "True", stamp=stamp)
