"""`mlgate validate -o policyreport`: the records' results as the PolicyReports the audit would write.

Multi-document YAML, one report a document, ready for `kubectl apply -f` where the report CRDs are installed.
Objects the engine could not evaluate at all are on stderr and in the exit code (2), not in a report: a report
result needs a policy and a rule. The results' timestamp is SOURCE_DATE_EPOCH when set (reproducible output, for
diffing in CI), else the time of the run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from io import StringIO

from mlgate.cli.review import Item, Record
from mlgate.loading.documents import dump_yaml
from mlgate.model import pointer
from mlgate.model.results import Action, Finding, Outcome, RuleResult
from mlgate.reports import Judged, ObjectRef, ReportApi, build_reports

SCHEMA_POLICY = "crd"  # review.py's name for what an object's CRD schema refuses


def judged(record: Record) -> Judged | None:
    """The object and its results, or None for a record with nothing a report can say."""
    if record.status == "error" or not record.kind or not record.name:
        return None
    ref = ObjectRef(kind=record.kind, name=record.name, namespace=record.namespace or "",
                    api_version=record.api_version or "", uid=record.uid or "")
    prefix = "" if record.item is None else pointer.join("/items", record.item)
    return Judged(ref, (*_schema_results(record.violations, prefix), *record.results))


def _schema_results(items: Sequence[Item], prefix: str) -> list[RuleResult]:
    """What the CRD schema refuses, one failed result per check (`schema`, `cel`), at paths in the object (not in a
    List document) like the engine's."""
    by_check: dict[str, list[Finding]] = {}
    for item in items:
        if item.policy == SCHEMA_POLICY:
            path = item.path.removeprefix(prefix)
            by_check.setdefault(item.rule, []).append(Finding(path, item.reason, item.detail, item.fix))
    return [RuleResult(SCHEMA_POLICY, check, Action.DENY, Outcome.FAIL, tuple(found))
            for check, found in sorted(by_check.items())]


def report_time() -> datetime:
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), UTC)
    return datetime.now(UTC)


def render(objects: Sequence[Judged], api: ReportApi) -> str:
    out = StringIO()
    dump_yaml(build_reports(objects, now=report_time(), api=api), out)
    return out.getvalue()
