"""Prometheus metrics of one webhook process, in a registry of its own.

    mlgate_admission_requests_total{endpoint,kind,result}
    mlgate_admission_request_duration_seconds{endpoint,kind,result}   (histogram)
    mlgate_rule_results_total{policy,rule,outcome}
    mlgate_policy_generation, mlgate_policy_count, mlgate_policy_reload_errors_total
    mlgate_policy_last_reload_ok                                       (1 or 0)
    mlgate_certificate_expiry_timestamp_seconds, mlgate_certificate_reload_errors_total

`result` is the verdict (allowed, patched, denied, skipped, error) or the HTTP status of a
request that got no verdict (400, 408, 413, 415, 503).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from mlgate.model.results import RuleResult

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


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


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        labels = ["endpoint", "kind", "result"]
        self.requests = Counter("mlgate_admission_requests", "Admission requests answered", labels, registry=r)
        self.duration = Histogram("mlgate_admission_request_duration_seconds", "Time to answer an admission request",
                                  labels, buckets=BUCKETS, registry=r)
        self.rule_results = RuleResultCounts()
        r.register(self.rule_results)
        self.policy_generation = Gauge("mlgate_policy_generation", "Generation of the policy set in force",
                                       registry=r)
        self.policy_count = Gauge("mlgate_policy_count", "Policies in the set in force", registry=r)
        self.policy_reload_errors = Counter("mlgate_policy_reload_errors",
                                            "Policy sets rejected; the last good set stayed in force", registry=r)
        self.policy_last_reload_ok = Gauge("mlgate_policy_last_reload_ok",
                                           "1 if the last policy load succeeded, 0 if it was rejected", registry=r)
        self.cert_expiry = Gauge("mlgate_certificate_expiry_timestamp_seconds",
                                 "notAfter of the serving certificate in use, as a Unix time", registry=r)
        self._children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self.cert_reload_errors = Counter("mlgate_certificate_reload_errors",
                                          "Certificate files that could not be loaded; the old pair stayed",
                                          registry=r)

    def observe(self, endpoint: str, kind: str, result: str, seconds: float,
                rule_results: Iterable[RuleResult] = ()) -> None:
        requests, duration = self._request_children(endpoint, kind, result)
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
