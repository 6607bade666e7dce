"""Prometheus metrics of one webhook process, in a registry of its own.

    mlgate_admission_requests_total{endpoint,kind,result}
    mlgate_admission_request_duration_seconds{endpoint,kind,result}   (histogram)
    mlgate_rule_results_total{policy,rule,outcome}
    mlgate_policy_generation, mlgate_policies, mlgate_policy_reload_errors_total
    mlgate_policy_last_reload_ok                                       (1 or 0)
    mlgate_policy_object_rejected{kind,namespace,name,in_force}        1 per MLPolicy, ClusterMLPolicy or
                                                                       ClusterWorkloadKind that does not load
                                                                       (why: its status.loadError); in_force is
                                                                       last_good or none (policy_store.py)
    mlgate_certificate_expiry_timestamp_seconds, mlgate_certificate_reload_errors_total
    mlgate_connections_open, mlgate_connections_refused_total
    mlgate_ready                                                       (1 while /readyz says ready)
    mlgate_denial_events_total{result}                                 recorded, skipped (deduplicated or over the
                                                                       rate), error (webhook/events.py)
    process_*, python_info, python_gc_*                                prometheus_client's standard collectors

No `_created` series: in the text format Prometheus stores each as a series of its own, one more per counter and
histogram child, for a value no alert or panel reads.
`metrics_server` serves GET /metrics on a plain-HTTP port of its own (`mlgate serve --metrics-port`), as
Kyverno does, so a Prometheus scrape needs no TLS settings; the TLS port answers /metrics too. The same port answers
/healthz and /readyz on its own threads, so probes never queue behind admission work (webhook/probes.py).

`result` is the verdict (allowed, patched, denied, skipped, error) or the HTTP status of a
request that got no verdict (400, 408, 413, 415, 503). `kind` is the request's kind when the
policy set in force knows it (its kind table, or one of mlgate's own kinds), `other` when it does
not, and `unknown` when the request had none or was not read: a client cannot add label values.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING

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
from prometheus_client.exposition import CONTENT_TYPE_LATEST, MetricsHandler
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mlgate.model.kinds import WORKLOAD_KIND_KINDS
from mlgate.model.policy import POLICY_KINDS
from mlgate.model.results import RuleResult

if TYPE_CHECKING:
    from mlgate.workloads.catalog import KindCatalog

    from .probes import Probes

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
OWN_KINDS = frozenset((*POLICY_KINDS, *WORKLOAD_KIND_KINDS))  # MLPolicy, ClusterMLPolicy, (Cluster)WorkloadKind
OTHER_KIND = "other"  # a kind the policy set in force does not know
NO_KIND = "unknown"  # no kind: the request had none, or was refused before it was read
STANDARD_COLLECTORS = (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR)  # process_*, python_info, python_gc_*

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide, before any metric exists


class KindLabels:
    """The `kind` label of a request: its kind if the policy set in force knows it, else `other`.

    The kind names are taken from a catalog once, when a new one comes into force (one per policy
    set; most sets share the shipped table), and swapped as one tuple.
    """

    def __init__(self) -> None:
        self._known: tuple[KindCatalog | None, frozenset[str]] = (None, OWN_KINDS)

    def label(self, kind: str, catalog: KindCatalog | None) -> str:
        if not kind or kind == NO_KIND:
            return NO_KIND
        known = self._known
        if known[0] is not catalog:
            names = OWN_KINDS if catalog is None else OWN_KINDS | {spec.kind for spec in catalog.kinds}
            known = self._known = (catalog, names)
        return kind if kind in known[1] else OTHER_KIND


class RuleResultCounts(Collector):
    """mlgate_rule_results_total{policy,rule,outcome}, counted in a plain dict.

    A decision has a dozen rule results; a prometheus_client Counter child takes a lock per
    increment. The counts only change on the event loop's thread, and a scrape copies them
    in one step, so a dict is enough.
    """

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}

    def count(self, results: Iterable[RuleResult]) -> None:
        counts = self.counts
        for r in results:
            key = (r.policy, r.rule, r.outcome.value)
            counts[key] = counts.get(key, 0) + 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("mlgate_rule_results", "Rule outcomes in admission decisions",
                                     labels=["policy", "rule", "outcome"])
        for labels, value in list(self.counts.items()):
            family.add_metric(labels, value)
        yield family


class RejectedPolicyObjects(Collector):
    """mlgate_policy_object_rejected{kind,namespace,name,in_force}: one series per policy object that does not
    load, so an alert names it, and none once it loads or is deleted (the store swaps the whole tuple)."""

    def __init__(self) -> None:
        self.objects: tuple[tuple[str, str, str, str], ...] = ()

    def set(self, objects: Iterable[tuple[str, str, str, str]]) -> None:
        self.objects = tuple(objects)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("mlgate_policy_object_rejected",
                                   "1 per cluster policy object that does not load; in_force: last_good or none",
                                   labels=["kind", "namespace", "name", "in_force"])
        for labels in self.objects:
            family.add_metric(labels, 1)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        for collector in STANDARD_COLLECTORS:  # the default registry's own, shared: they read the process
            r.register(collector)
        labels = ["endpoint", "kind", "result"]
        self.requests = Counter("mlgate_admission_requests", "Admission requests answered", labels, registry=r)
        self.duration = Histogram("mlgate_admission_request_duration_seconds", "Time to answer an admission request",
                                  labels, buckets=BUCKETS, registry=r)
        self.rule_results = RuleResultCounts()
        r.register(self.rule_results)
        self.policy_generation = Gauge("mlgate_policy_generation", "Generation of the policy set in force",
                                       registry=r)
        # not mlgate_policy_count: `_count` is the suffix of a histogram's or summary's count series
        self.policy_count = Gauge("mlgate_policies", "Policies in the set in force", registry=r)
        self.policy_reload_errors = Counter("mlgate_policy_reload_errors",
                                            "Policy sets rejected; the last good set stayed in force", registry=r)
        self.policy_last_reload_ok = Gauge("mlgate_policy_last_reload_ok",
                                           "1 if the last policy load succeeded, 0 if it was rejected", registry=r)
        self.rejected_objects = RejectedPolicyObjects()
        r.register(self.rejected_objects)
        self.cert_expiry = Gauge("mlgate_certificate_expiry_timestamp_seconds",
                                 "notAfter of the serving certificate in use, as a Unix time", registry=r)
        self._children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self.cert_reload_errors = Counter("mlgate_certificate_reload_errors",
                                          "Certificate files that could not be loaded; the old pair stayed",
                                          registry=r)
        self.connections_open = Gauge("mlgate_connections_open",
                                      "Connections open, in the TLS handshake or past it", registry=r)
        self.connections_refused = Counter("mlgate_connections_refused",
                                           "Connections closed at accept because the connection limit was reached",
                                           registry=r)
        self.ready = Gauge("mlgate_ready", "1 while this replica is ready to serve (as /readyz), else 0",
                           registry=r)
        self.denial_events = Counter("mlgate_denial_events", "Warning Events on denials sent by controllers",
                                     ["result"], registry=r)
        self.kind_labels = KindLabels()

    def observe(self, endpoint: str, kind: str, result: str, seconds: float,
                rule_results: Iterable[RuleResult] = (), *, kinds: KindCatalog | None = None) -> None:
        """One answered request. `kind` as the request gave it: it is counted under its own name only
        when `kinds` (the catalog of the policy set in force) or mlgate itself knows it."""
        requests, duration = self._request_children(endpoint, self.kind_labels.label(kind, kinds), result)
        requests.inc()
        duration.observe(seconds)
        self.rule_results.count(rule_results)

    def _request_children(self, endpoint: str, kind: str, result: str) -> tuple[Counter, Histogram]:
        # labels() validates and locks on every call; the few label sets in use are looked up once
        key = (endpoint, kind, result)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.requests.labels(*key), self.duration.labels(*key))
        return children

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def metrics_server(metrics: Metrics, host: str, port: int, probes: Probes | None = None) -> ThreadingHTTPServer:
    """prometheus_client's own /metrics handler on a plain-HTTP server, bound (an OSError if the port is taken) but
    not serving yet: run its `serve_forever` on a thread, and `shutdown()` it. Port 0 picks a free port
    (`server.server_port`). With `probes`, GET /healthz and /readyz are answered here too (webhook/probes.py)."""

    class Handler(MetricsHandler.factory(metrics.registry)):  # type: ignore[misc]
        def do_GET(self) -> None:
            answer = probes.answer(self.path.split("?", 1)[0]) if probes is not None else None
            if answer is None:
                super().do_GET()
                return
            status, body = answer
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every 30 s from each Prometheus would drown the decision log

    return (_Server6 if ":" in host else _Server)((host, port), Handler)
