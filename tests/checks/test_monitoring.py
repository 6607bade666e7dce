"""The shipped alerts (manifests/monitoring/prometheusrule.yaml) and dashboard (dashboard.json) parse as PromQL
(promql-parser: syntax and types) and use only metric names that mlgate's processes export, as collected from
their real registries; the dashboard is a well-formed Grafana dashboard; every alert the install promises is
there."""

from __future__ import annotations

import re

import pytest
from monitoring_files import (
    PROMETHEUS_NAMES,
    alerts,
    dashboard,
    dashboard_queries,
    exported_metrics,
    panels,
    prometheus_rule,
    selected_metrics,
)

PROMISED_ALERTS = {
    "MlgateWebhookDown": "webhook down",
    "MlgateWebhookNoReadyReplicas": "no ready replicas",
    "MlgateAdmissionRejectionSpike": "rejection rate spike",
    "MlgateAdmissionLatencyHigh": "p99 latency over budget",
    "MlgateCertificateExpiresSoon": "certificate expiring within 7 days",
    "MlgatePolicyReloadFailing": "policy reload failing",
    "MlgatePolicyObjectRejected": "a cluster policy object that does not load",
    "MlgateAuditStale": "audit stale",
}
EXPORTED = frozenset().union(*exported_metrics().values())


def unknown_names(expr: str) -> set[str]:
    return selected_metrics(expr) - EXPORTED - PROMETHEUS_NAMES


# --- the parser finds names where the shipped expressions put them, and refuses what Prometheus would ----------

@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (namespace) (rate(a_total{result="denied", x=~"b|c"}[10m] offset 1d))', {"a_total"}),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval]))) > 1", {"h_bucket"}),
    ("min(c > 0) - time() < 7 * 86400 and on() absent(up{job='w'} == 1)", {"c", "up"}),
    ("x * ignoring(pod) group_left(team) y unless z or vector(0) * 1e3", {"x", "y", "z"}),
    ('topk(10, sum without (pod) (increase(r_total{q="a{b}"}[$__range])))', {"r_total"}),
])
def test_the_parser_finds_each_selected_metric_and_nothing_else(expr, names):
    assert selected_metrics(expr) == names


@pytest.mark.parametrize(("expr", "reason"), [
    ("sum by (namespace) (rate(mlgate_ready[5m])", "unclosed left parenthesis"),
    ("rate(mlgate_admission_requests_total) > 1", "expected type matrix in call to function 'rate'"),
    ("mlgate_ready offset", "expected duration"),
    ('sum({__name__=~"mlgate_.+"})', "selects without a metric name"),
])
def test_an_expression_prometheus_would_refuse_is_refused_with_the_reason(expr, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        selected_metrics(expr)


def test_a_name_no_process_exports_is_reported():
    assert unknown_names("rate(mlgate_policy_count[5m]) + mlgate_policies") == {"mlgate_policy_count"}


# --- what the processes export -----------------------------------------------------------------------------------

def test_each_process_exports_the_standard_metrics_and_no_created_series_nor_count_named_gauge():
    for process, names in exported_metrics().items():
        assert {"process_cpu_seconds_total", "python_info", "python_gc_objects_collected_total"} <= names, process
        assert not [n for n in names if n.endswith("_created")], process
    assert "mlgate_policies" in EXPORTED and "mlgate_policy_count" not in EXPORTED


# --- the PrometheusRule -----------------------------------------------------------------------------------------

def test_every_promised_alert_is_shipped_and_nothing_else():
    assert set(alerts()) == set(PROMISED_ALERTS)


@pytest.mark.parametrize("name", sorted(PROMISED_ALERTS))
def test_each_alert_selects_only_exported_metrics(name):
    expr = alerts()[name]["expr"]
    assert selected_metrics(expr), f"{name}: no metric found in {expr!r}"
    assert unknown_names(expr) == set(), f"{name} selects metrics nothing exports"


@pytest.mark.parametrize("name", sorted(PROMISED_ALERTS))
def test_each_alert_waits_has_a_severity_and_says_what_happened(name):
    rule = alerts()[name]
    assert re.fullmatch(r"\d+[mh]", rule["for"]), name
    assert rule["labels"]["severity"] in ("critical", "warning"), name
    assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_the_rule_is_a_prometheus_operator_object_with_unique_group_names():
    rule = prometheus_rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    groups = [g["name"] for g in rule["spec"]["groups"]]
    assert len(groups) == len(set(groups))


def test_the_certificate_alert_fires_a_week_before_expiry():
    expr = alerts()["MlgateCertificateExpiresSoon"]["expr"]
    assert "7 * 86400" in expr and "mlgate_certificate_expiry_timestamp_seconds" in expr


# --- the dashboard --------------------------------------------------------------------------------------------

def test_the_dashboard_has_unique_panel_ids_and_ref_ids_and_a_prometheus_datasource_variable():
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    for panel in panels(board):
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
        assert panel["type"] == "row" or panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    (datasource,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert datasource["name"] == "datasource" and datasource["query"] == "prometheus"
    assert board["uid"] == "mlgate" and isinstance(board["schemaVersion"], int)


def test_the_dashboard_panels_do_not_overlap():
    taken: dict[tuple[int, int], int] = {}
    for panel in panels(dashboard()):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"panel {panel['id']} overlaps panel {taken[(x, y)]}"
                taken[(x, y)] = panel["id"]


def test_every_dashboard_query_selects_only_exported_metrics():
    queries = dashboard_queries(dashboard())
    assert len(queries) >= 10
    wrong = {where: unknown_names(expr) for where, expr in queries.items() if unknown_names(expr)}
    empty = [where for where, expr in queries.items() if not selected_metrics(expr)]
    assert wrong == {} and empty == []


@pytest.mark.parametrize(("title", "metric"), [
    ("Admissions by verdict", "mlgate_admission_requests_total"),
    ("Admissions by kind", "mlgate_admission_requests_total"),
    ("Admission latency", "mlgate_admission_request_duration_seconds_bucket"),
    ("Top failing rules", "mlgate_rule_results_total"),
    ("Policy generation", "mlgate_policy_generation"),
    ("Serving certificate expires in", "mlgate_certificate_expiry_timestamp_seconds"),
])
def test_the_dashboard_shows_what_an_operator_looks_for(title, metric):
    (panel,) = [p for p in panels(dashboard()) if p["title"] == title]
    assert any(metric in selected_metrics(t["expr"]) for t in panel["targets"])
