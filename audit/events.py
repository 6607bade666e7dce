"""Warning Events on offending objects, as plain data, and the token bucket that paces them.

An event is due when an object's results turn to fail (state.py decides when); it is an events.k8s.io/v1 Event
(the API `kubectl events` and `kubectl describe` read) with reason PolicyViolation, which is the reason Kyverno's
events use, so dashboards that watch for it see mlgate's too. Pure: no client, no clock (the caller passes `now`).

The Event's rules checked against k8s.io/kubernetes pkg/apis/core/validation/events.go (v1.35): eventTime,
reportingController, reportingInstance, action and reason are required; note at most 1 kB; the event lives in its
object's namespace, and a cluster-scoped object's event in `default`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mlgate.model.results import Outcome
from mlgate.reports import Judged

API_VERSION = "events.k8s.io/v1"
REASON = "PolicyViolation"
ACTION = "Audit"
CONTROLLER = "mlgate.dev/audit"
NOTE_LIMIT = 1024  # bytes: the API server refuses a longer note
FIELD_LIMIT = 128  # reportingInstance, action, reason


def warning_event(judged: Judged, now: datetime, instance: str) -> dict[str, Any]:
    """The Event telling that `judged` fails, named after the object and the moment (so never a clash)."""
    ref = judged.ref
    failing = [r for r in sorted(judged.results, key=lambda r: (r.policy, r.rule)) if r.outcome is Outcome.FAIL]
    first = failing[0].messages(1)[0] if failing else "fails"
    more = f" (and {len(failing) - 1} more failing rule(s))" if len(failing) > 1 else ""
    note = _cut(f"mlgate audit: {first}{more}", NOTE_LIMIT)
    moment = now if now.tzinfo else now.replace(tzinfo=UTC)
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    suffix = hashlib.sha256(f"{ref.kind}/{ref.namespace}/{ref.name}/{stamp}".encode()).hexdigest()[:10]
    name = f"{ref.name[:242]}.{suffix}"  # client-go names events <object>.<unique>
    return {
        "apiVersion": API_VERSION, "kind": "Event",
        "metadata": {"name": name, "namespace": ref.namespace or "default"},
        "eventTime": stamp, "type": "Warning", "reason": REASON, "action": ACTION,
        "reportingController": CONTROLLER, "reportingInstance": instance[:FIELD_LIMIT],
        "regarding": ref.reference(), "note": note,
    }


def event_path(event: dict[str, Any]) -> str:
    return f"/apis/{API_VERSION}/namespaces/{event['metadata']['namespace']}/events"


@dataclass
class Bucket:
    """A token bucket that never waits: `take` hands out what is there, refilled at `rate` per second up to
    `burst`. The audit loop sends that many events and leaves the rest due for a later round."""

    rate: float
    burst: int
    tokens: float = -1.0
    last: float | None = None

    def take(self, wanted: int, now: float) -> int:
        if self.last is None:
            self.tokens, self.last = float(self.burst), now
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate)
        self.last = now
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted


def _cut(text: str, limit: int) -> str:
    raw = text.encode()
    return text if len(raw) <= limit else raw[: limit - 3].decode(errors="ignore") + "..."
