"""Warning Events for the denials that nobody else shows to the object's owner.

The API server returns a denial to whoever sent the request. A person running kubectl, or a CI job, reads it
there, so an Event would only repeat it. An object that a controller creates (the Pods of a Job or a PyTorchJob)
is denied to that controller, and the people who own the job never see the answer. So the webhook records one
events.k8s.io/v1 Warning Event for each denied request sent by a service account or another `system:` identity,
and only for those:
- never for a dry run: the webhooks are registered with `sideEffects: None`, and a dry run has no effect to
  report;
- never for mlgate's own reconciler, whose refusals already become Events on the owner (mlgate_reconciler.refusals);
- only for a namespaced object, in its namespace, regarding its controlling owner when it has one, so that
  `kubectl describe pytorchjob/NAME` shows it, else regarding the object itself.

A controller retries a refused create every few seconds: one Event per (namespace, regarding, message) per
`window` (10 minutes) is recorded, and at most `rate` a second overall (burst `burst`). Events are best effort and
sent from a thread of their own; a slow or refusing API server never delays an answer (as client-go's recorder,
an event is not worth a retry).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .metrics import Metrics
from .review import Admission, AdmissionRequest

__all__ = ["DenialEvents", "denial_event", "event_poster", "reported_elsewhere"]

log = logging.getLogger("mlgate.webhook.events")
API_VERSION = "events.k8s.io/v1"
CONTROLLER = "mlgate.dev/webhook"
REASON = "AdmissionDenied"
NOTE_LIMIT = 1024  # bytes: the API server refuses a longer note
FIELD_LIMIT = 128  # reportingInstance, action, reason
OWN_RECONCILER = ":mlgate-reconciler"  # system:serviceaccount:<namespace>:mlgate-reconciler
PENDING_LIMIT = 256  # events waiting to be sent; older ones are dropped past it
Post = Callable[[str, dict[str, Any]], None]  # (namespace, event); raises when the API server refuses it


def reported_elsewhere(request: AdmissionRequest) -> str | None:
    """Why a denial of `request` needs no Event (someone already tells the owner), or None when it does."""
    if request.dry_run:
        return "a dry run"
    if not request.user.startswith("system:"):
        return "the sender reads the denial in the API server's answer"
    if request.user.endswith(OWN_RECONCILER):
        return "mlgate's reconciler records its refusals on the owner"
    if not request.namespace:
        return "a cluster-scoped object has no namespace to hold an Event"
    return None


def regarding(request: AdmissionRequest) -> dict[str, str]:
    """The object's controlling owner (what a person looks at), else the object itself (no uid: never stored)."""
    obj = request.obj or {}
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, dict) and owner.get("controller") is True and owner.get("kind") and owner.get("name"):
            return {"apiVersion": str(owner.get("apiVersion", "")), "kind": str(owner["kind"]),
                    "name": str(owner["name"]), "namespace": request.namespace, "uid": str(owner.get("uid", ""))}
    name = request.name or str(meta.get("name") or meta.get("generateName") or "")
    return {"apiVersion": str(obj.get("apiVersion", "")), "kind": request.kind, "name": name,
            "namespace": request.namespace}


def denial_event(admission: Admission, now: datetime, instance: str) -> dict[str, Any]:
    """The Event telling that `admission` was denied, named after what it regards and the moment."""
    request = admission.request
    about = regarding(request)
    message = str((admission.response.get("status") or {}).get("message") or "denied")
    verb = "creating" if request.operation == "CREATE" else "updating"
    subject = f"{request.kind} {request.name or about['name']}".strip()
    note = _cut(f"mlgate denied {verb} {subject} (sent by {request.user}): {message}", NOTE_LIMIT)
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    suffix = hashlib.sha256(f"{request.uid}/{stamp}".encode()).hexdigest()[:10]
    base = about["name"][:242].rstrip("-.") or request.kind.lower() or "object"
    return {
        "apiVersion": API_VERSION, "kind": "Event",
        "metadata": {"name": f"{base}.{suffix}", "namespace": request.namespace},
        "eventTime": stamp, "type": "Warning", "reason": REASON, "action": request.operation.title()[:FIELD_LIMIT],
        "reportingController": CONTROLLER, "reportingInstance": instance[:FIELD_LIMIT],
        "regarding": about, "note": note,
    }


class DenialEvents:
    """Takes denials on the serving loop (cheap, never blocks) and sends their Events from a thread."""

    def __init__(self, post: Post, metrics: Metrics, instance: str, *, window: float = 600.0, rate: float = 1.0,
                 burst: int = 20, clock: Callable[[], float] = time.monotonic) -> None:
        self.post, self.metrics, self.instance = post, metrics, instance
        self.window, self.rate, self.burst, self.clock = window, rate, burst, clock
        self.tokens, self.refilled = float(burst), clock()
        self.seen: dict[tuple[str, ...], float] = {}  # dedup key -> when last recorded
        self.pending: deque[dict[str, Any]] = deque(maxlen=PENDING_LIMIT)
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def denied(self, admission: Admission) -> bool:
        """Queue the Event of a denial if one is due; True when queued."""
        if admission.verdict != "denied" or reported_elsewhere(admission.request) is not None:
            return False
        event = denial_event(admission, datetime.now(UTC), self.instance)
        about = event["regarding"]
        key = (admission.request.namespace, about["kind"], about["name"],
               str((admission.response.get("status") or {}).get("message")))
        now = self.clock()
        if now - self.seen.get(key, -self.window) < self.window or not self._take(now):
            self.metrics.denial_events.labels("skipped").inc()
            return False
        if len(self.seen) > 4 * PENDING_LIMIT:  # forget what is past its window
            self.seen = {k: t for k, t in self.seen.items() if now - t < self.window}
        self.seen[key] = now
        self.pending.append(event)
        self.wake.set()
        return True

    def _take(self, now: float) -> bool:
        self.tokens = min(float(self.burst), self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def send_pending(self) -> None:
        while self.pending:
            event = self.pending.popleft()
            try:
                self.post(event["metadata"]["namespace"], event)
            except Exception as exc:  # best effort: counted and logged, never retried
                self.metrics.denial_events.labels("error").inc()
                log.warning("event on %s %s/%s not recorded: %s", event["regarding"]["kind"],
                            event["metadata"]["namespace"], event["regarding"]["name"], str(exc)[:200])
            else:
                self.metrics.denial_events.labels("recorded").inc()

    def start(self) -> None:
        def loop() -> None:
            while not self.stopped.is_set():
                self.wake.wait()
                self.wake.clear()
                self.send_pending()

        self._thread = threading.Thread(target=loop, name="mlgate-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def event_poster(*, kubeconfig: str | None, in_cluster: bool) -> Post:
    """POST an events.k8s.io/v1 Event with the Kubernetes client (imported only in a cluster)."""
    from kubernetes import client

    from mlgate.kube.watch import api_client

    api = client.EventsV1Api(api_client(kubeconfig, in_cluster))

    def post(namespace: str, event: dict[str, Any]) -> None:
        api.create_namespaced_event(namespace, event)  # type: ignore[arg-type]  # the client serializes a dict

    return post


def _cut(text: str, limit: int) -> str:
    raw = text.encode()
    return text if len(raw) <= limit else raw[: limit - 3].decode(errors="ignore") + "..."
