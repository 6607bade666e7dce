"""The audit under test: `python -m mlgate_audit` as a real process against the control plane, and how to read
what it did (its PolicyReports, its /metrics, the Events it sent). Shared by tests/e2e and bench/audit_bench.py."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_plane import REPO, ControlPlane, Process, free_port, wait_for
from prometheus_client.parser import text_string_to_metric_families

REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"


@dataclass
class AuditProcess:
    cluster: ControlPlane
    directory: Path
    policy_paths: Sequence[Path] = (REPO / "policies",)
    resync: float = 600.0
    extra: Sequence[str] = ()
    port: int = 0
    process: Process | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        args = [sys.executable, "-m", "mlgate_audit", "--kubeconfig", str(self.cluster.kubeconfig),
                "--metrics-port", str(self.port), "--resync", str(self.resync), "--log-level", "info",
                "--identity", "e2e-audit", *self.extra]
        for path in self.policy_paths:
            args += ["-p", str(path)]
        self.process = Process("mlgate audit", args, self.directory / "audit.log",
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.cluster.processes.append(self.process)
        self.process.start()
        wait_for(f"the audit's metrics on port {self.port}", lambda: self.scrape() is not None, timeout,
                 alive=self.process.check_alive)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        """Every sample of /metrics: (name, sorted labels) -> value; None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=3) as response:
                text = response.read().decode()
        except OSError:
            return None
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        samples = self.scrape() or {}
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def writes(self) -> float:
        return self.metric("mlgate_audit_report_writes_total", verb="apply") + \
            self.metric("mlgate_audit_report_writes_total", verb="delete")

    def writes_in(self, namespace: str) -> int:
        """Report writes (applies and deletes) in one namespace, from the audit's log: other tests' namespaces in
        the shared cluster change on their own clocks (expiring exceptions, TTLs), which the metric counts too."""
        return len(re.findall(rf"report {re.escape(namespace)}/\S+ (?:written|deleted)", self.log()))

    def log(self) -> str:
        assert self.process is not None
        return self.process.log.read_text(encoding="utf-8", errors="replace")


def report(cluster: ControlPlane, namespace: str, name: str = "mlgate") -> dict[str, Any] | None:
    status, body = cluster.get(f"{REPORTS}/namespaces/{namespace}/policyreports/{name}")
    if status == 404:
        return None
    assert status == 200, (status, body[:300])
    return json.loads(body)  # type: ignore[no-any-return]


def reports(cluster: ControlPlane) -> list[dict[str, Any]]:
    status, body = cluster.get(f"{REPORTS}/policyreports")
    assert status == 200, (status, body[:300])
    return json.loads(body)["items"]  # type: ignore[no-any-return]


def findings(report_obj: dict[str, Any] | None, outcomes: Sequence[str] = ("fail", "warn")) -> dict[str, list[str]]:
    """kind/name -> sorted `policy/rule outcome` of each listed result with one of `outcomes`."""
    out: dict[str, list[str]] = {}
    for result in (report_obj or {}).get("results") or []:
        if result["result"] not in outcomes:
            continue
        for ref in result["resources"]:
            out.setdefault(f"{ref['kind']}/{ref['name']}", []).append(
                f"{result['policy']}/{result['rule']} {result['result']}")
    return {k: sorted(v) for k, v in out.items()}


def warning_events(cluster: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    events = json.loads(cluster.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json").check().stdout)
    return [e for e in events["items"] if (e.get("regarding") or {}).get("name") == name
            and e.get("reportingController") == "mlgate.dev/audit"]
