"""Engine results as PolicyReports: one report per namespace, a ClusterPolicyReport for cluster-scoped objects.

Pure: results in, report objects (plain dicts) out; no clock, no client. The same objects come out of
`mlgate validate -o policyreport` and of the in-cluster audit, so a report that did not change serializes
byte for byte the same (compare.py tells the audit when to skip a write).

Schema: wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport, from kubernetes-sigs/wg-policy-prototypes
policy-report/crd/v1alpha2/ at commit 25056e1f3eb5cab1e693b8c880eb693a84e099af; openreports.io/v1alpha1 Report
and ClusterReport from openreports/reports-api config/crd/ at tag v0.2.1. Both results have: policy, rule,
result (pass|fail|warn|error|skip), severity (critical|high|medium|low|info), scored, category, source,
timestamp {seconds, nanos}, message, properties (string map) and resources (ObjectReferences).

What is listed, and what only counted (the size rule, docs/reports.md): every finding of a fail, warn or error is a
result of its own, naming its field path and fix in `properties`; past MESSAGES_PER_RULE findings of one rule on one
object, one more result counts the rest. Pass and skip are counted in `summary` only, except a skip that says what
the rule could not look at. A namespace whose report would outgrow REPORT_BUDGET is split by a hash of each
object's kind and name into 2, 4, 8 ... reports (`mlgate-1-of-4` ...): an object always lands in the same one,
so a change to one object rewrites one report.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from mlgate.model.results import (
    MESSAGES_PER_RULE,
    Action,
    Decision,
    Line,
    Outcome,
    RuleResult,
    rfc3339,
    unchecked_text,
)

ReportApi = Literal["wgpolicyk8s.io/v1alpha2", "openreports.io/v1alpha1"]
WGPOLICY: ReportApi = "wgpolicyk8s.io/v1alpha2"
OPENREPORTS: ReportApi = "openreports.io/v1alpha1"
REPORT_APIS: tuple[ReportApi, ...] = (WGPOLICY, OPENREPORTS)
# (namespaced kind, cluster-scoped kind) of each API
KINDS: Mapping[ReportApi, tuple[str, str]] = {
    WGPOLICY: ("PolicyReport", "ClusterPolicyReport"),
    OPENREPORTS: ("Report", "ClusterReport"),
}
SOURCE = "mlgate"
NAME = "mlgate"
MANAGED_BY = {"app.kubernetes.io/managed-by": "mlgate"}
# Severity follows the action the policy binds the rule with: what blocks is high, what warns medium, what is
# only recorded low. `critical` and `info` stay free for policies that want to say more later.
SEVERITY: Mapping[Action, str] = {Action.DENY: "high", Action.WARN: "medium", Action.AUDIT: "low"}
OUTCOMES = tuple(o.value for o in Outcome)  # the summary's keys, which are the CRDs' result enum
# One report's serialized size past which its namespace is split: a sixth of etcd's 1.5 MiB object limit, so
# readers that list every report (Policy Reporter, kubectl) stay light too.
REPORT_BUDGET = 256 * 1024
MAX_SPLIT = 1024  # reports per namespace at most: past it an object's results alone outgrow the budget
TEXT_LIMIT = 512  # characters of one message or property value


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """The object a result is about; namespace "" for a cluster-scoped one, uid "" when not known (offline)."""

    kind: str
    name: str
    namespace: str = ""
    api_version: str = ""
    uid: str = ""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        return cls(kind=_text(obj.get("kind")), name=_text(meta.get("name") or meta.get("generateName")),
                   namespace=_text(meta.get("namespace")), api_version=_text(obj.get("apiVersion")),
                   uid=_text(meta.get("uid")))

    def reference(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace,
               "uid": self.uid}
        return {k: v for k, v in ref.items() if v}


@dataclass(frozen=True)
class Judged:
    """One object and the engine's results on it."""

    ref: ObjectRef
    results: tuple[RuleResult, ...] = field(default=())

    @classmethod
    def of(cls, obj: Mapping[str, Any], decision: Decision) -> Judged:
        return cls(ObjectRef.of(obj), tuple(decision.results))


def listed_by_default(result: RuleResult) -> bool:
    """Fail, warn and error are listed finding by finding; pass and skip only counted, unless the skip is an
    exception's doing or says what the rule could not look at."""
    if result.outcome is Outcome.SKIP:
        return bool(result.unchecked or result.exceptions)
    return result.outcome is not Outcome.PASS


def list_everything(result: RuleResult) -> bool:
    return True


Listed = Callable[[RuleResult], bool]


def build_reports(judged: Iterable[Judged], *, now: datetime, api: ReportApi = WGPOLICY,
                  listed: Listed = listed_by_default, budget: int = REPORT_BUDGET) -> list[dict[str, Any]]:
    """The reports for `judged`, sorted by namespace then name (cluster report first); one per namespace that
    holds a judged object with results, split when it would outgrow `budget` bytes."""
    if api not in KINDS:
        raise ValueError(f"report api {api!r}: one of {', '.join(REPORT_APIS)}")
    stamp = timestamp(now)
    by_namespace: dict[str, list[_Entry]] = {}
    for item in judged:
        if item.results:
            by_namespace.setdefault(item.ref.namespace, []).append(_entry(item, stamp, listed))
    reports: list[dict[str, Any]] = []
    for namespace in sorted(by_namespace):
        parts = _split(sorted(by_namespace[namespace], key=lambda e: e.ref), budget)
        for index, part in enumerate(parts):
            name = NAME if len(parts) == 1 else f"{NAME}-{index + 1}-of-{len(parts)}"
            reports.append(_report(api, namespace, name, part))
    return reports


def timestamp(moment: datetime) -> dict[str, int]:
    """A metav1.Timestamp-shaped value, as the CRDs' `timestamp` wants it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return {"seconds": int(moment.timestamp()), "nanos": moment.microsecond * 1000}


@dataclass
class _Entry:
    """One object's part of a report: its results, their counts and their size."""

    ref: ObjectRef
    results: list[dict[str, Any]]
    counts: dict[str, int]
    size: int


def _entry(item: Judged, stamp: dict[str, int], listed: Listed) -> _Entry:
    reference = item.ref.reference()
    results: list[dict[str, Any]] = []
    counts = dict.fromkeys(OUTCOMES, 0)
    for result in sorted(item.results, key=lambda r: (r.policy, r.rule)):
        if not listed(result):
            counts[result.outcome.value] += 1
            continue
        for line in _lines(result):
            results.append(_result(result, line, reference, stamp))
            counts[result.outcome.value] += 1
    size = len(json.dumps(results, separators=(",", ":"))) if results else 0
    return _Entry(item.ref, results, counts, size)


def _lines(result: RuleResult) -> list[Line]:
    if result.outcome in (Outcome.PASS, Outcome.SKIP):  # a listed pass or skip: one result that says why
        text = unchecked_text("; ".join(result.unchecked)) if result.unchecked else result.note
        return [Line(result.policy, result.rule, text=text)]
    return result.lines(MESSAGES_PER_RULE)


def _result(result: RuleResult, line: Line, reference: dict[str, str], stamp: dict[str, int]) -> dict[str, Any]:
    finding = line.finding
    properties: dict[str, str] = {}
    if finding is not None:  # the reason and path as data beside the detail, not inside it
        message = finding.detail
        properties.update(path=finding.path, reason=finding.reason)
        if finding.fix:
            properties["fix"] = _cut(finding.fix)
    else:
        message = line.text
    if line.note:
        properties["note"] = line.note
    if result.exceptions:  # who excepted findings of this rule, and until when
        properties["exceptions"] = _cut(", ".join(f"{e} (until {rfc3339(e.expires_at)})" for e in result.exceptions))
    if result.expired:
        properties["expiredExceptions"] = _cut(", ".join(f"{e} (expired {rfc3339(e.expires_at)})"
                                                         for e in result.expired))
    entry: dict[str, Any] = {
        "policy": result.policy, "rule": result.rule, "result": result.outcome.value,
        "severity": SEVERITY[result.action], "scored": True, "category": result.rule.split(".", 1)[0],
        "source": SOURCE, "timestamp": dict(stamp), "resources": [dict(reference)],  # copies: no YAML aliases
    }
    if properties:
        entry["properties"] = properties
    if message:
        entry["message"] = _cut(message)
    return entry


def _split(entries: list[_Entry], budget: int) -> list[list[_Entry]]:
    """The entries in as few hash buckets (a power of two) as keep every bucket of more than one object within
    `budget`; empty buckets dropped, each kept in its objects' order."""
    total = sum(e.size for e in entries)
    parts = 1
    while total > budget * parts * 7 // 8 and parts < MAX_SPLIT:  # some room: hashes do not split evenly
        parts *= 2
    while True:
        buckets: list[list[_Entry]] = [[] for _ in range(parts)]
        for entry in entries:
            buckets[_bucket(entry.ref, parts)].append(entry)
        if parts >= MAX_SPLIT or all(len(b) < 2 or sum(e.size for e in b) <= budget for b in buckets):
            return [b for b in buckets if b]
        parts *= 2


def _bucket(ref: ObjectRef, parts: int) -> int:
    # kind and name, not uid: the report an object lands in must not depend on whether its uid is known
    return zlib.crc32(f"{ref.kind}/{ref.name}".encode()) % parts


def _report(api: ReportApi, namespace: str, name: str, part: list[_Entry]) -> dict[str, Any]:
    namespaced, cluster = KINDS[api]
    metadata: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {}),
                                "labels": dict(MANAGED_BY)}
    summary = dict.fromkeys(OUTCOMES, 0)
    results = []
    for entry in part:
        results.extend(entry.results)
        for outcome, count in entry.counts.items():
            summary[outcome] += count
    report: dict[str, Any] = {"apiVersion": api, "kind": namespaced if namespace else cluster,
                              "metadata": metadata}
    if api == OPENREPORTS:
        report["source"] = SOURCE  # openreports also names the engine once for the whole report
    report["results"] = results
    report["summary"] = summary
    return report


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def _text(value: Any) -> str:
    return "" if value is None else str(value)
