"""Reports for `mlgate validate`: text for people; json, junit and sarif for machines.

Every format reads the same records; only text goes through colour-free, stable wording
so that golden files can pin it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import IO, Any
from xml.etree import ElementTree as ET

from mlgate import __version__
from mlgate.cli.review import Record
from mlgate.model.results import redact


def summary(records: Sequence[Record]) -> dict[str, int]:
    counts = {"documents": len(records), "allowed": 0, "denied": 0, "skipped": 0, "errors": 0, "warnings": 0}
    for record in records:
        counts[{"error": "errors"}.get(record.status, record.status)] += 1
        counts["warnings"] += len(record.warnings)
    return counts


class Reporter:
    """Writes a report as records arrive; text and json stream, junit and sarif collect."""

    def __init__(self, fmt: str, out: IO[str]):
        self.fmt, self.out = fmt, out
        self.records: list[Record] = []

    def add(self, record: Record) -> None:
        if self.fmt == "text":
            self.out.write(record.rendered if record.rendered is not None else text_record(record))
        elif self.fmt == "json":
            text = record.rendered if record.rendered is not None else _indented(record_json(record))
            self.out.write(('{\n  "results": [\n' if not self.records else ",\n") + text)
        self.records.append(_compact(record) if self.fmt in ("text", "json") else record)

    @property
    def render(self) -> Callable[[Record], Record] | None:
        """For streamed formats: what turns a full record into its text and the counts the summary needs."""
        return partial(_rendered, self.fmt) if self.fmt in ("text", "json") else None

    def finish(self) -> None:
        counts = summary(self.records)
        if self.fmt == "text":
            self.out.write(text_summary(counts))
        elif self.fmt == "json":
            head = "" if self.records else '{\n  "results": ['
            self.out.write(f'{head}\n  ],\n  "summary": {json.dumps(counts)}\n}}\n')
        else:
            self.out.write(junit(self.records) if self.fmt == "junit" else sarif(self.records))


def _rendered(fmt: str, record: Record) -> Record:
    compact = _compact(record)
    compact.error = record.error  # the command also reports it on stderr
    compact.rendered = text_record(record) if fmt == "text" else _indented(record_json(record))
    return compact


def _compact(record: Record) -> Record:
    """What the summary needs, so streamed reports do not hold every finding."""
    return Record(record.source, record.index, record.line, record.status, warnings=record.warnings)


def _indented(value: dict[str, Any]) -> str:
    # one result per line: compact JSON goes through the C encoder, indented JSON does not
    # default=str: YAML reads unquoted dates as dates, and the API server would see their text
    return "    " + json.dumps(value, separators=(",", ":"), default=str)


def text_record(record: Record) -> str:
    head = f"{record.where} [{record.position}]"
    if record.status == "error":
        subject = f" {record.identity}:" if record.kind else ""  # known when evaluation, not parsing, failed
        return f"{head}{subject} ERROR {record.error}\n"
    if record.status == "skipped":
        return f"{head} {record.identity}: skipped ({record.note})\n"
    lines = [f"{head} {record.identity}: {record.status.upper()}"]
    lines += [f"  NOTE {note}" for note in record.notes]
    for v in record.violations:
        lines.append(f"  {v.action.upper()} {v.message}")
        lines.append(f"       at {record.source}:{v.line}" if v.line else f"       at {record.source}")
    if record.patch:
        lines.append(f"  MUTATE {len(record.patch)} patch operation(s); `mlgate mutate` shows the result")
    return "\n".join(lines) + "\n"


def text_summary(counts: dict[str, int]) -> str:
    return (
        f"{counts['documents']} document(s): {counts['allowed']} allowed, {counts['denied']} denied, "
        f"{counts['skipped']} skipped, {counts['errors']} error(s)\n"
    )


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
        "violations": [
            {"policy": v.policy, "rule": v.rule, "action": v.action, "path": v.path, "reason": v.reason,
             "message": v.message, "fix": v.fix, "line": v.line}
            for v in record.violations
        ],
        "warnings": record.warnings,
        "patch": _redacted(record.patch),
    }


def junit(records: Sequence[Record]) -> str:
    counts = summary(records)
    suite = ET.Element("testsuite", name="mlgate", tests=str(counts["documents"]),
                       failures=str(counts["denied"]), errors=str(counts["errors"]), skipped=str(counts["skipped"]))
    for record in records:
        case = ET.SubElement(suite, "testcase", classname=record.source,
                             name=f"[{record.position}] {record.identity}")
        if record.status == "error":
            ET.SubElement(case, "error", message=record.error or "error")
        elif record.status == "skipped":
            ET.SubElement(case, "skipped", message=record.note)
        elif record.status == "denied":
            blocking = [v for v in record.violations if v.blocks]
            failure = ET.SubElement(case, "failure", message=blocking[0].message if blocking else "denied")
            failure.text = "\n".join(v.message for v in blocking)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def sarif(records: Sequence[Record]) -> str:
    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for record in records:
        for v in record.violations:
            rules.setdefault(v.rule, {"id": v.rule, "shortDescription": {"text": v.reason}})
            location: dict[str, Any] = {"artifactLocation": {"uri": record.source}}
            if v.line:
                location["region"] = {"startLine": v.line}
            results.append({
                "ruleId": v.rule,
                "level": "error" if v.blocks else "warning",
                "message": {"text": v.message},
                "locations": [{"physicalLocation": location,
                               "logicalLocations": [{"fullyQualifiedName": v.path or "/"}]}],
                "properties": {"policy": v.policy},
            })
        if record.status == "error":
            rule_id = "evaluate" if record.kind else "parse"
            results.append({"ruleId": rule_id, "level": "error", "message": {"text": record.error},
                            "locations": [{"physicalLocation": {"artifactLocation": {"uri": record.source},
                                                                "region": {"startLine": record.line}}}]})
    run = {"tool": {"driver": {"name": "mlgate", "version": __version__, "rules": list(rules.values())}},
           "results": results}
    document = {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "runs": [run]}
    return json.dumps(document, indent=2) + "\n"


def _redacted(patch: list[dict[str, Any]]) -> Any:
    """The patch as the report shows it: a URI's credentials copied into it (a checkpoint URI set as an env
    var, say) are not repeated. `mlgate mutate` still writes the object as the API server would store it."""
    if not patch:
        return patch
    text = json.dumps(patch, default=str)
    return json.loads(redact(text)) if "@" in text else patch
