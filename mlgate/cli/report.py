"""Reports for `mlgate validate`: text for people (text.py); json, junit and sarif for machines (ci.py).

Every format reads the same records. Text and json are written as records arrive, and the reporter keeps only
counts of them, so memory stays flat however many objects pass through; junit and sarif are written whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from typing import IO, Any

from mlgate.cli import policyreports
from mlgate.cli.ci import DOCS_URL, junit, sarif
from mlgate.cli.review import Item, Record
from mlgate.cli.text import PLAIN, Style, text_record, text_summary
from mlgate.model.results import redact
from mlgate.reports import WGPOLICY, Judged, ReportApi


def summary(records: Sequence[Record]) -> dict[str, int]:
    counts = {"documents": len(records), "allowed": 0, "denied": 0, "skipped": 0, "errors": 0,
              "warnings": 0, "audit": 0, "unchecked": 0}
    for record in records:
        counts[{"error": "errors"}.get(record.status, record.status)] += 1
        for name, total in record.totals.items():
            counts[name] += total
    return counts


class Reporter:
    """Writes a report as records arrive; text and json stream, junit and sarif collect, policyreport keeps the
    results only."""

    def __init__(self, fmt: str, out: IO[str], style: Style = PLAIN, report_api: ReportApi = WGPOLICY,
                 docs_url: str = DOCS_URL):
        self.fmt, self.out, self.style, self.report_api = fmt, out, style, report_api
        self.docs_url = docs_url  # sarif: the base of each rule's helpUri
        self.records: list[Record] = []
        self.judged: list[Judged] = []

    def add(self, record: Record) -> None:
        if self.fmt == "text":
            self.out.write(record.rendered if record.rendered is not None else text_record(record, self.style))
        elif self.fmt == "json":
            text = record.rendered if record.rendered is not None else _indented(record_json(record))
            self.out.write(('{\n  "results": [\n' if not self.records else ",\n") + text)
        elif self.fmt == "policyreport" and (judged := policyreports.judged(record)) is not None:
            self.judged.append(judged)
        self.records.append(_compact(record) if self.fmt in ("text", "json", "policyreport") else record)

    @property
    def render(self) -> Callable[[Record], Record] | None:
        """For streamed formats: what turns a full record into its text and the counts the summary needs."""
        return partial(_rendered, self.fmt, self.style) if self.fmt in ("text", "json") else None

    def finish(self) -> dict[str, int]:
        """Ends the report; the summary's counts."""
        counts = summary(self.records)
        if self.fmt == "text":
            self.out.write(text_summary(counts))
        elif self.fmt == "json":
            head = "" if self.records else '{\n  "results": ['
            self.out.write(f'{head}\n  ],\n  "summary": {json.dumps(counts)}\n}}\n')
        elif self.fmt == "policyreport":
            self.out.write(policyreports.render(self.judged, self.report_api))
        else:
            self.out.write(junit(self.records) if self.fmt == "junit" else sarif(self.records, self.docs_url))
        return counts


def _rendered(fmt: str, style: Style, record: Record) -> Record:
    compact = _compact(record)
    compact.error = record.error  # the command also reports it on stderr
    compact.rendered = text_record(record, style) if fmt == "text" else _indented(record_json(record))
    return compact


def _compact(record: Record) -> Record:
    """What the summary needs, so streamed reports do not hold every finding."""
    return Record(record.source, record.index, record.line, record.status, totals=record.totals)


def _indented(value: dict[str, Any]) -> str:
    # one result per line: compact JSON goes through the C encoder, indented JSON does not
    # default=str: YAML reads unquoted dates as dates, and the API server would see their text
    return "    " + json.dumps(value, separators=(",", ":"), default=str)


def record_json(record: Record) -> dict[str, Any]:
    return {
        "source": record.source,
        "document": record.index,
        "item": record.item,
        "line": record.line,
        "apiVersion": record.api_version,
        "kind": record.kind,
        "name": record.name,
        "namespace": record.namespace,
        "status": record.status,
        "allowed": record.status in ("allowed", "skipped"),
        "error": record.error,
        "note": record.note,
        "notes": record.notes,
        "violations": [item_json(i) for i in record.violations],
        "warnings": [item_json(i) for i in record.warnings],
        "audit": [item_json(i) for i in record.audit],
        "unchecked": [asdict(u) for u in record.unchecked],
        "dropped": [asdict(d) for d in record.dropped],
        "excepted": [asdict(e) for e in record.excepted],
        "patch": _redacted(record.patch),
    }


def item_json(item: Item) -> dict[str, Any]:
    return {"policy": item.policy, "rule": item.rule, "action": item.action, "path": item.path,
            "reason": item.reason, "detail": item.detail, "fix": item.fix, "note": item.note, "line": item.line,
            "message": item.message()}


def _redacted(patch: list[dict[str, Any]]) -> Any:
    """The patch as the report shows it: a URI's credentials copied into it (a checkpoint URI set as an env
    var, say) are not repeated. `mlgate mutate` still writes the object as the API server would store it."""
    if not patch:
        return patch
    text = json.dumps(patch, default=str)
    return json.loads(redact(text)) if "@" in text else patch
