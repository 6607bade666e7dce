"""What the monitoring tests read: the shipped PrometheusRule and dashboard, the metric names mlgate's processes
really export, and the metric names a PromQL expression selects.

The names come from the real registries (webhook, audit, reconciler), as a scrape would show them: a counter
`x` is exported as `x_total`, a histogram as `x_bucket`, `x_sum` and `x_count`.

Expressions are parsed by promql-parser (PyPI; GreptimeTeam's Rust port of Prometheus's own parser): syntax and
types (`rate` of an instant vector is refused), then every vector selector's name is read from the tree.
promtool is not used: building cmd/promtool from the github.com/prometheus/prometheus module (v0.316.0) did not
finish within 15 minutes on 2 cores, too much for the CI budget that already builds kube-apiserver and helm.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "monitoring"
PROMETHEUS_NAMES = frozenset({"up"})  # series Prometheus itself writes for each target
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count"),
            "gauge": ("",), "info": ("_info",), "untyped": ("",), "stateset": ("",), "gaugehistogram": ("",)}
# Grafana's built-in variables, as a Prometheus query would receive them.
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__range": "6h", "$__interval": "30s"}


def exported_metrics() -> dict[str, frozenset[str]]:
    """Every sample name each process exports, from a fresh instance of its real metrics class."""
    from mlgate_audit.metrics import Metrics as AuditMetrics
    from mlgate_reconciler.metrics import ReconcilerMetrics
    from mlgate_webhook.metrics import Metrics as WebhookMetrics

    registries = {"webhook": WebhookMetrics().registry, "audit": AuditMetrics().registry,
                  "reconciler": ReconcilerMetrics().registry}
    return {process: frozenset(sample_names(registry)) for process, registry in registries.items()}


def sample_names(registry: CollectorRegistry) -> Iterator[str]:
    for family in registry.collect():
        for suffix in SUFFIXES[family.type]:
            yield family.name + suffix


def selected_metrics(expr: str) -> set[str]:
    """The metric names an expression selects (`rate(x_total[5m])` selects `x_total`); ValueError, with the
    parser's reason, when the expression does not parse or its types do not match."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names: set[str] = set()
    unnamed: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:  # {__name__=~"..."}: a pattern, not a name that can be checked
                unnamed.append(str(node))

    try:
        promql_parser.walk(promql_parser.parse(expr), visit)
    except ValueError as exc:
        raise ValueError(f"{expr!r} does not parse: {exc}") from None
    if unnamed:
        raise ValueError(f"{expr!r} selects without a metric name: {', '.join(unnamed)}")
    return names


def prometheus_rule() -> dict[str, Any]:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text(encoding="utf-8"))


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in prometheus_rule()["spec"]["groups"] for rule in group["rules"]
            if "alert" in rule}


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "dashboard.json").read_text(encoding="utf-8"))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(board: dict[str, Any]) -> dict[str, str]:
    """Every PromQL query of the dashboard: panel targets and query variables, named where they are."""
    queries = {f"panel {p['id']} {p.get('title', '')!r} target {t.get('refId')}": t["expr"]
               for p in panels(board) for t in p.get("targets", []) if "expr" in t}
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            # label_values(metric, label): Grafana's own function around a selector
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            queries[f"variable {variable['name']}"] = inner.group(1) if inner else query
    return queries
