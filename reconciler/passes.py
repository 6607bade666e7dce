"""One level-triggered pass over one owner, whatever its kind: the skeleton the TrainingJob (reconcile.py) and
InferenceService (inference.py) passes share.

`run_pass(kind, client, namespace, name, policies)`:
1. Read the owner (through `reader`: the API client, or the informers' cache in the controller); gone -> done.
2. Being deleted -> `children.finalize`, with the kind's `release` before the finalizer comes off.
3. No finalizer yet -> add it (a 409: the pass stops, the next starts from fresh state).
4. `kind.plan`: the pre-flight verdict, the desired children and the owned ones read.
5. `kind.converge`: the writes that make the children match; None when the owner changed under it (requeued).
6. `write_status`: `kind.status` computes the new status (pure); it is written through the status subresource
   only when it differs, with the owner's resourceVersion. A 409 reads the owner again from the API (never the
   cache: it lost the same race), plans again (`kind.replan`) and retries, at most STATUS_RETRIES times, then
   asks for another pass. A phase change records the Event `kind.phase_event` names (a Warning for Failed);
   a Stalled change records its own (refusals.stall_event).
7. `kind.settle`: what follows the status (clean-up, TTL, when to look again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from mlgate.engine import PolicySet
from mlgate.model.facts import ClusterFacts

from .cache import Reader
from .children import ChildKey, OwnerKind, ensure_finalizer, finalize
from .client import KubeClient
from .events import record_event
from .reasons import Reason
from .refusals import Refusals, stall_event
from .results import PassResult, on_conflict
from .status import now_rfc3339

__all__ = ["STATUS_RETRIES", "Context", "Converged", "OwnerPass", "Plan", "Written", "run_pass", "write_status"]

STATUS_RETRIES = 5


@dataclass(frozen=True)
class Context:
    """What every step of a pass may use."""

    client: KubeClient  # writes, and reads after a lost race
    reader: Reader  # every other read
    policies: PolicySet
    facts: ClusterFacts | None  # None: the pre-flight reads the namespace's labels
    now: Callable[[], str]


@dataclass(frozen=True)
class Plan:
    """What a pass wants and what it saw."""

    owner: dict[str, Any]
    verdict: Reason | None  # the pre-flight refusal: nothing is materialized
    desired: list[dict[str, Any]]
    owned: dict[ChildKey, dict[str, Any]]  # updated in place by the pass's creates, patches and deletes


class Converged(NamedTuple):
    plan: Plan  # with the owner as the last write left it
    refusals: Refusals


class Written(NamedTuple):
    status: dict[str, Any]  # as now stored (as last read when every write lost a race)
    plan: Plan  # what the status was computed from (nothing owned when every write lost a race)


class OwnerPass(Protocol):
    """An owner kind as the skeleton needs it."""

    @property
    def kind(self) -> OwnerKind: ...

    def plan(self, ctx: Context, owner: dict[str, Any]) -> Plan: ...

    def replan(self, ctx: Context, fresh: dict[str, Any], plan: Plan) -> Plan:
        """After a lost status write: `fresh` is the owner as the API has it now."""
        ...

    def converge(self, ctx: Context, plan: Plan, result: PassResult) -> Converged | None: ...

    def status(self, plan: Plan, refusals: Refusals, result: PassResult, stamp: str) -> dict[str, Any]: ...

    def phase_event(self, status: dict[str, Any]) -> Reason | None: ...

    def settle(self, ctx: Context, written: Written, result: PassResult) -> None: ...

    def release(self, ctx: Context, owner: dict[str, Any], result: PassResult) -> None: ...


def run_pass(kind: OwnerPass, client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
             facts: ClusterFacts | None = None, now: Callable[[], str] = now_rfc3339,
             reader: Reader | None = None) -> PassResult:
    ctx = Context(client, reader or client, policies, facts, now)
    result = PassResult()
    owner = ctx.reader.get(kind.kind.api_version, kind.kind.kind, namespace, name)
    if owner is None:
        return result
    if owner["metadata"].get("deletionTimestamp"):
        deleting = owner  # narrowed to a dict for the closure
        finalize(client, owner, kind.kind, result, reader=ctx.reader,
                 before_release=lambda: kind.release(ctx, deleting, result))
        return result
    with_finalizer = ensure_finalizer(client, owner, result)
    if with_finalizer is None:
        return result
    converged = kind.converge(ctx, kind.plan(ctx, with_finalizer), result)
    if converged is not None:
        kind.settle(ctx, write_status(ctx, kind, converged, result), result)
    return result


def write_status(ctx: Context, kind: OwnerPass, converged: Converged, result: PassResult) -> Written:
    plan, refusals = converged
    for _ in range(STATUS_RETRIES):
        owner = plan.owner
        old = owner.get("status") or {}
        stamp = ctx.now()
        new = kind.status(plan, refusals, result, stamp)
        if new == old:
            return Written(new, plan)
        with on_conflict() as conflict:
            ctx.client.replace_status({**owner, "status": new})
        if not conflict.lost:
            result.status_written = True
            _announce(ctx, kind, owner, old=old, new=new, stamp=stamp)
            return Written(new, plan)
        meta = owner["metadata"]
        fresh = ctx.client.get(kind.kind.api_version, kind.kind.kind, meta["namespace"], meta["name"])
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return Written(old, plan)
        plan = kind.replan(ctx, fresh, plan)
    result.requeue = True
    return Written(plan.owner.get("status") or {}, replace(plan, owned={}))


def _announce(ctx: Context, kind: OwnerPass, owner: dict[str, Any], *, old: dict[str, Any], new: dict[str, Any],
              stamp: str) -> None:
    """The phase's Event when the phase changed, then the Stalled condition's (unless it says the same)."""
    announced = None
    if new.get("phase") != old.get("phase"):
        event = kind.phase_event(new)
        if event is not None:
            record_event(ctx.client, owner, event.reason, event.message, warning=new.get("phase") == "Failed",
                         stamp=stamp)
            announced = event.reason
    stall_event(ctx.client, owner, old, new, stamp, announced=announced)
