"""Reports for `mlgate validate`: text for people; json, junit and sarif for machines.

Every format reads the same records; only text goes through colour-free, stable wording
so that golden files can pin it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree as ET

from mlgate import __version__
from mlgate.cli.review import Record

FORMATS = ("text", "json", "junit", "sarif")


def summary(records: Sequence[Record]) -> dict[str, int]:
    counts = {"documents": len(records), "allowed": 0, "denied": 0, "skipped": 0, "errors": 0, "warnings": 0}
    for record in records:
        counts[{"error": "errors"}.get(record.status, record.status)] += 1
        counts["warnings"] += len(record.decision.warnings) if record.decision else 0
    return counts


def render(records: Sequence[Record], fmt: str) -> str:
    return {"text": text, "json": as_json, "junit": junit, "sarif": sarif}[fmt](records)


def _identity(record: Record) -> str:
    meta = record.metadata
    name = meta.get("name") or meta.get("generateName") or "?"
    namespace = meta.get("namespace")
    return f"{record.data.get('kind', '?')} {namespace + '/' if namespace else ''}{name}"


def text(records: Sequence[Record]) -> str:
    lines: list[str] = []
    for record in records:
        doc = record.document
        head = f"{doc.where} [doc {doc.index}]"
        if record.status == "error":
            lines.append(f"{head} ERROR {doc.error}")
            continue
        assert record.decision is not None
        if record.status == "skipped":
            lines.append(f"{head} {_identity(record)}: skipped ({record.decision.note})")
            continue
        lines.append(f"{head} {_identity(record)}: {record.status.upper()}")
        for v in record.violations:
            mark = "DENY" if v.action == "deny" else v.action.upper()
            where = f"{doc.source}:{v.line}" if v.line else doc.source
            lines.append(f"  {mark} {v.message}")
            lines.append(f"       at {where}")
        if record.decision.patch:
            lines.append(f"  MUTATE {len(record.decision.patch)} patch operation(s); `mlgate mutate` shows the result")
    counts = summary(records)
    lines.append(
        f"{counts['documents']} document(s): {counts['allowed']} allowed, {counts['denied']} denied, "
        f"{counts['skipped']} skipped, {counts['errors']} error(s)"
    )
    return "\n".join(lines) + "\n"


def record_json(record: Record) -> dict[str, Any]:
    doc = record.document
    decision = record.decision
    meta = record.metadata
    return {
        "source": doc.source,
        "document": doc.index,
        "line": doc.line,
        "apiVersion": record.data.get("apiVersion"),
        "kind": record.data.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "status": record.status,
        "allowed": decision.allowed if decision else False,
        "error": doc.error,
        "note": decision.note if decision else "",
        "violations": [
            {"policy": v.policy, "rule": v.rule, "action": v.action, "path": v.path, "reason": v.reason,
             "message": v.message, "fix": v.fix, "line": v.line}
            for v in record.violations
        ],
        "warnings": decision.warnings if decision else [],
        "patch": decision.patch if decision else [],
    }


def as_json(records: Sequence[Record]) -> str:
    return json.dumps({"results": [record_json(r) for r in records], "summary": summary(records)}, indent=2) + "\n"


def junit(records: Sequence[Record]) -> str:
    counts = summary(records)
    suite = ET.Element("testsuite", name="mlgate", tests=str(counts["documents"]),
                       failures=str(counts["denied"]), errors=str(counts["errors"]), skipped=str(counts["skipped"]))
    for record in records:
        case = ET.SubElement(suite, "testcase", classname=record.document.source,
                             name=f"[doc {record.document.index}] {_identity(record)}")
        if record.status == "error":
            ET.SubElement(case, "error", message=record.document.error or "error")
        elif record.status == "skipped":
            ET.SubElement(case, "skipped", message=record.decision.note if record.decision else "")
        elif record.status == "denied":
            blocking = [v for v in record.violations if v.action == "deny" or v.reason == "could not evaluate"]
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
            location: dict[str, Any] = {"artifactLocation": {"uri": record.document.source}}
            if v.line:
                location["region"] = {"startLine": v.line}
            results.append({
                "ruleId": v.rule,
                "level": "error" if v.action == "deny" else "warning",
                "message": {"text": v.message},
                "locations": [{"physicalLocation": location,
                               "logicalLocations": [{"fullyQualifiedName": v.path or "/"}]}],
                "properties": {"policy": v.policy},
            })
        if record.status == "error":
            results.append({"ruleId": "parse", "level": "error", "message": {"text": record.document.error},
                            "locations": [{"physicalLocation": {"artifactLocation": {"uri": record.document.source},
                                                                "region": {"startLine": record.document.line}}}]})
    run = {"tool": {"driver": {"name": "mlgate", "version": __version__, "rules": list(rules.values())}},
           "results": results}
    document = {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "runs": [run]}
    return json.dumps(document, indent=2) + "\n"
