"""Prometheus metrics of one audit process, in a registry of its own.

    mlgate_audit_pass_seconds                     (histogram) one round: judging the dirty objects, writing reports
    mlgate_audit_full_pass_seconds                from start (or a policy change) to every object judged and written
    mlgate_audit_objects_judged_total
    mlgate_audit_objects                          stored objects held
    mlgate_audit_results{policy,rule,outcome}     the current results, summed over every judged object
    mlgate_audit_report_writes_total{verb}        apply | delete
    mlgate_audit_report_write_errors_total
    mlgate_audit_leader                           1 while this replica holds the Lease
    mlgate_audit_warning_events_total             Warning Events sent (an object's results turned to fail)
    mlgate_audit_warning_event_errors_total
    mlgate_audit_last_sync_timestamp_seconds      Unix time the Lease holder last had every report up to date
    process_*, python_info, python_gc_*           prometheus_client's standard collectors (no `_created` series)
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mlgate.reports import Judged

BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide, before any metric exists


class Metrics:
    def __init__(self, results: Iterable[Judged] | None = None) -> None:
        self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.pass_seconds = Histogram("mlgate_audit_pass_seconds", "One audit round.", buckets=BUCKETS,
                                      registry=self.registry)
        self.full_pass_seconds = Gauge("mlgate_audit_full_pass_seconds",
                                       "Seconds from start or a policy change to every object judged and reported.",
                                       registry=self.registry)
        self.judged = Counter("mlgate_audit_objects_judged", "Objects judged.", registry=self.registry)
        self.objects = Gauge("mlgate_audit_objects", "Stored objects held.", registry=self.registry)
        self.writes = Counter("mlgate_audit_report_writes", "Report writes.", ["verb"], registry=self.registry)
        self.write_errors = Counter("mlgate_audit_report_write_errors", "Report writes that failed.",
                                    registry=self.registry)
        self.events = Counter("mlgate_audit_warning_events", "Warning Events sent on objects turned to fail.",
                              registry=self.registry)
        self.event_errors = Counter("mlgate_audit_warning_event_errors", "Warning Events the API server refused.",
                                    registry=self.registry)
        self.leader = Gauge("mlgate_audit_leader", "1 while this replica holds the Lease.", registry=self.registry)
        # Starts at the process start, so that an audit that never gets its reports up to date goes stale too
        # (the PrometheusRule MlgateAuditStale alerts on its age).
        self.last_sync = Gauge("mlgate_audit_last_sync_timestamp_seconds",
                               "Unix time this replica, holding the Lease, last had every object judged and every "
                               "report written; the process start until then.", registry=self.registry)
        self.last_sync.set(time.time())
        self.source: Iterable[Judged] = results or ()
        self.registry.register(_Results(self))


class _Results(Collector):
    """Counted when scraped, from the results held: no series for history, only for what is there now."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("mlgate_audit_results", "Current rule results over the judged objects.",
                                   labels=["policy", "rule", "outcome"])
        tally = Tally((r.policy, r.rule, r.outcome.value) for judged in list(self.metrics.source)
                      for r in judged.results)
        for (policy, rule, outcome), count in sorted(tally.items()):
            family.add_metric([policy, rule, outcome], count)
        yield family
