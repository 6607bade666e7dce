"""What one pass did (`PassResult`), and `requeue_on_conflict`, the one way a pass treats a lost race.

Named apart from the engine's `mlgate.model.results.Outcome` (pass, fail, warn, error, skip of a rule): a pass
has no outcome of that kind, only writes made and a wish to run again. Why a condition says what it says is
reasons.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .client import ApiError

__all__ = ["Conflict", "PassResult", "on_conflict", "requeue_on_conflict"]


@dataclass
class PassResult:
    """What one pass did (for logs, metrics and tests)."""

    created: list[str] = field(default_factory=list)  # "Pod/llm-worker-0"
    deleted: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # children patched back to the spec
    restarted: list[str] = field(default_factory=list)  # failed pods deleted to be recreated (backoffLimit)
    status_written: bool = False
    finalized: bool = False  # the finalizer was removed (the owner can go)
    requeue: bool = False  # state moved under us; run again soon
    requeue_after: float | None = None  # seconds until the owner changes on its own (a deadline, a TTL)
    conflicts: dict[str, str] = field(default_factory=dict)  # "Service/shared" -> who holds that name instead

    @property
    def wrote(self) -> bool:
        return bool(self.created or self.deleted or self.repaired or self.restarted or self.status_written
                    or self.finalized)


@dataclass
class Conflict:
    lost: bool = False  # the block's write met a 409 (or a status it was told to expect)


@contextmanager
def on_conflict(*also: int) -> Iterator[Conflict]:
    """Run the block; a 409 from the API (someone wrote first: the resourceVersion sent is stale), or a status in
    `also` (404: deleted meanwhile), ends it quietly with `lost` set. Any other error goes on."""
    conflict = Conflict()
    try:
        yield conflict
    except ApiError as exc:
        if exc.status != 409 and exc.status not in also:
            raise
        conflict.lost = True


@contextmanager
def requeue_on_conflict(result: PassResult, *also: int) -> Iterator[Conflict]:
    """`on_conflict`, and the pass asks to run again soon, on fresh state."""
    with on_conflict(*also) as conflict:
        yield conflict
    if conflict.lost:
        result.requeue = True
