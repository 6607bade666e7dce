"""Prometheus metrics of one reconciler process, and its small HTTP endpoint.

    mlgate_reconcile_duration_seconds{kind}            (histogram, one observation per pass)
    mlgate_reconcile_errors_total{kind}                passes that raised (the key is retried with backoff)
    mlgate_workqueue_depth                             keys ready or waiting for their time
    mlgate_api_writes_total{verb,kind}                 create, patch, status, delete sent to the API server
    mlgate_leader                                      1 while this process holds the Lease (or runs unelected)
    process_*, python_info, python_gc_*                prometheus_client's standard collectors (no `_created` series)

GET /metrics (Prometheus text), /healthz (the process serves), /readyz (200 "ok", else 503 and one line saying
why: the API server cannot be reached, or an informer has not finished its first LIST; a follower is ready too, so a
rolling update never waits on the leader). The audit serves the same endpoint with its own metrics and readiness.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["ReconcilerMetrics", "serve_metrics"]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide, before any metric exists


class ReconcilerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)
        self.duration = Histogram("mlgate_reconcile_duration_seconds", "Duration of one reconcile pass.",
                                  ["kind"], buckets=BUCKETS, registry=r)
        self.errors = Counter("mlgate_reconcile_errors_total", "Reconcile passes that raised.", ["kind"], registry=r)
        self.depth = Gauge("mlgate_workqueue_depth", "Keys ready or waiting in the work queue.", registry=r)
        self.writes = Counter("mlgate_api_writes_total", "Writes sent to the API server.", ["verb", "kind"],
                              registry=r)
        self.leader = Gauge("mlgate_leader", "1 while this process is the leader.", registry=r)

    def write(self, verb: str, kind: str) -> None:
        self.writes.labels(verb, kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def serve_metrics(render: Callable[[], bytes], host: str, port: int,
                  not_ready: Callable[[], str | None]) -> ThreadingHTTPServer:
    """Serve on a daemon thread; `server.shutdown()` stops it. Port 0 picks a free one (server.server_port).
    `render` gives the metrics' text; `not_ready` None when ready, else why not."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, render(), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                self._send(200, b"ok\n")
            elif self.path == "/readyz":
                why = not_ready()
                self._send(200 if why is None else 503, f"{why or 'ok'}\n".encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="mlgate-metrics", daemon=True).start()
    return server
