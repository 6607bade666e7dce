"""/healthz and /readyz answered on the metrics port's threads, so that no probe queues behind admission work.

The admission endpoints run on one event loop; a review of a few MiB, or a burst of small ones, keeps it busy for
longer than the kubelet's probe timeout (timeoutSeconds, 1 s by default: https://kubernetes.io/docs/tasks/
configure-pod-container/configure-liveness-readiness-startup-probes/#configure-probes). A readiness probe that
times out on every replica under a burst empties the Service's endpoints, and with failurePolicy Fail the API
server then refuses every job. The plain-HTTP metrics port is served by `http.server` threads of its own, so the
probes are answered there (manifests/deployment.yaml, charts/mlgate/templates/deployment.yaml), as the reconciler
and the audit already do.

A liveness probe off the loop must still notice a loop that no longer turns: the loop beats every `BEAT` seconds,
and /healthz answers 503 once it has not beaten for `Settings.loop_stall` seconds, well past the longest a review
may hold it (its deadline, 4.5 s).

    GET /healthz   200 {"status": "ok", "loopSeconds": ...}; 503 {"status": "stalled", ...} past loop_stall
    GET /readyz    200 or 503, the same JSON as /readyz on the TLS port (`Service.readiness`)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

BEAT = 0.25  # seconds between beats: a stall is seen to within this

ProbeAnswer = tuple[int, bytes]


class Heartbeat:
    """When the serving loop last ran a callback of its own (until it runs, when it was made, or this was)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = time.monotonic()  # counted from the loop's making, not from the process's start
        loop.call_soon(self._beat, loop)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = time.monotonic()
        loop.call_later(BEAT, self._beat, loop)

    def silent_for(self) -> float:
        return max(time.monotonic() - self.last, 0.0)


class Probes:
    """The answers of the two probe paths: a status and a JSON body each, computed on the probing thread."""

    def __init__(self, heartbeat: Heartbeat, stall: float, readiness: Callable[[], tuple[bool, dict[str, Any]]]):
        self.heartbeat = heartbeat
        self.stall = stall
        self.readiness = readiness  # reads snapshots only, so any thread may call it (the mlgate_ready gauge does)

    def answer(self, path: str) -> ProbeAnswer | None:
        """The answer to a GET of `path`, or None if it is not a probe path."""
        if path == "/healthz":
            silent = self.heartbeat.silent_for()
            if silent >= self.stall:
                return 503, _json({"status": "stalled", "loopSeconds": round(silent, 3),
                                   "detail": f"the serving loop has not run for {silent:.1f} s "
                                             f"(limit {self.stall:g} s)"})
            return 200, _json({"status": "ok", "loopSeconds": round(silent, 3)})
        if path == "/readyz":
            ready, detail = self.readiness()
            return 200 if ready else 503, _json(detail)
        return None


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
