"""Reports for CI systems: JUnit XML (one test case per object, or per test-suite expectation) and SARIF 2.1.0
(one result per finding, for code scanning).

What blocks is a failure (JUnit) or an `error` (SARIF); warnings and audit findings are kept, as the test case's
output and as `warning` and `note` results; what a rule could not look at is said too, as a SARIF result of kind
`open` (neither pass nor fail). Every text here is built from the records' fields.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit
from xml.etree import ElementTree as ET

from mlgate import __version__
from mlgate.cli.review import Item, Record
from mlgate.model.results import unchecked_text
from mlgate.rules.registry import catalog

if TYPE_CHECKING:
    from mlgate.cli.outcomes import CaseOutcome

RULES_DOC = "rules.md"  # under the docs URL; one anchor per rule id
# Where docs/ is published: the repository's own docs/ folder where it is hosted (OWNER as in the README's
# snippets). SARIF wants helpUri absolute (sarif-2.1.0 schema, reportingDescriptor.helpUri: "format": "uri"),
# so a relative path is refused by strict consumers; `validate --docs-url` (or MLGATE_DOCS_URL) points elsewhere.
DOCS_URL = "https://github.com/OWNER/mlgate/blob/main/docs/"
LEVELS = {"violations": "error", "warnings": "warning", "audit": "note"}
LABELS = {"violations": "DENY", "warnings": "WARN", "audit": "AUDIT"}
# results that are no rule's: the object could not be read, or the engine could not evaluate it at all
INPUT_RULES = {"parse": "the document is no Kubernetes object mlgate can read",
               "evaluate": "the engine could not evaluate the object"}
# what mlgate validate checks of a kind whose CRD it has: no policy's rules, documented beside them
CRD_CHECKS = {"schema": "the object holds to its CRD's openAPIV3Schema, as the API server applies it",
              "cel": "the object holds to its CRD's x-kubernetes-validations CEL rules"}


def junit(records: Sequence[Record]) -> str:
    denied = sum(r.status == "denied" for r in records)
    errors = sum(r.status == "error" for r in records)
    skipped = sum(r.status == "skipped" for r in records)
    suite = ET.Element("testsuite", name="mlgate", tests=str(len(records)), failures=str(denied),
                       errors=str(errors), skipped=str(skipped))
    for record in records:
        case = ET.SubElement(suite, "testcase", classname=record.source, name=f"[{record.position}] {record.identity}",
                             file=record.source, line=str(record.line))
        if record.status == "error":
            ET.SubElement(case, "error", message=record.error or "error")
        elif record.status == "skipped":
            ET.SubElement(case, "skipped", message=record.note)
        elif record.status == "denied":
            blocking = _lines(record, "violations")
            failure = ET.SubElement(case, "failure", message=blocking[0] if blocking else "denied")
            failure.text = "\n".join(blocking)
        said = [f"{LABELS[level]} {line}" for level in ("warnings", "audit") for line in _lines(record, level)]
        said += [f"SKIP [{u.policy}/{u.rule}] {unchecked_text(u.reason)}" for u in record.unchecked]
        said += [f"{e.label} {e.message()}" for e in record.excepted]
        if said:
            ET.SubElement(case, "system-out").text = "\n".join(said)
    return _xml(suite)


def _lines(record: Record, level: str) -> list[str]:
    """The messages of one of the record's lists, each rule's uncounted findings after its kept ones."""
    items: list[Item] = getattr(record, level)
    lines = [item.message() for item in items]
    lines += [f"[{d.policy}/{d.rule}] and {d.count:,} more findings" for d in record.dropped if d.level == level]
    return lines


def junit_outcomes(outcomes: Sequence[CaseOutcome]) -> str:
    """`mlgate test -o junit`: one test suite per PolicyTest, one test case per expected result."""
    root = ET.Element("testsuites", name="mlgate test", tests=str(len(outcomes)),
                      failures=str(sum(not o.passed for o in outcomes)))
    suites: dict[str, ET.Element] = {}
    for o in outcomes:
        if o.suite not in suites:
            suites[o.suite] = ET.SubElement(root, "testsuite", name=o.suite)
        case = ET.SubElement(suites[o.suite], "testcase", classname=o.suite, name=f"{o.policy}/{o.rule} {o.resource}",
                             file=o.file, line=str(o.line))
        if not o.passed:
            failure = ET.SubElement(case, "failure", message=f"expected {o.expected}, got {o.actual}")
            failure.text = o.detail or None
    for element in suites.values():
        cases = element.findall("testcase")
        element.set("tests", str(len(cases)))
        element.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    return _xml(root)


def _xml(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def sarif(records: Sequence[Record], docs_url: str = DOCS_URL) -> str:
    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []

    def add(rule: str, policy: str, text: str, where: dict[str, Any], **extra: Any) -> None:
        rules.setdefault(rule, _rule(rule, docs_url))
        results.append({"ruleId": rule, **extra, "message": {"text": text}, "locations": [where],
                        **({"properties": {"policy": policy}} if policy else {})})

    for record in records:
        uri = artifact_uri(record.source)
        for level, items in (("violations", record.violations), ("warnings", record.warnings),
                             ("audit", record.audit)):
            for item in items:
                add(item.rule, item.policy, item.message(), _location(uri, item.line, item.path), level=LEVELS[level])
        for d in record.dropped:
            add(d.rule, d.policy, f"[{d.policy}/{d.rule}] and {d.count:,} more findings",
                _location(uri, record.line), level=LEVELS[d.level])
        for u in record.unchecked:  # `open`: the tool could not tell pass from fail; SARIF then wants level none
            add(u.rule, u.policy, f"[{u.policy}/{u.rule}] {unchecked_text(u.reason)}", _location(uri, record.line),
                kind="open", level="none")
        for e in record.excepted:  # an excepted finding is a suppressed result; an expired exception, a note
            justification = {"kind": "external", "status": "accepted",
                              "justification": f"MLPolicyException {e.namespace}/{e.name} until {e.expires}"}
            add(e.rule, e.policy, e.message(), _location(uri, record.line), level="note",
                **({} if e.expired else {"suppressions": [justification]}))
        if record.status == "error":
            add("evaluate" if record.kind else "parse", "", record.error or "error", _location(uri, record.line),
                level="error")
    run = {"tool": {"driver": {"name": "mlgate", "version": __version__, "rules": list(rules.values())}},
           "results": results}
    document = {"version": "2.1.0", "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "runs": [run]}
    return json.dumps(document, indent=2) + "\n"


def _rule(rule_id: str, docs_url: str) -> dict[str, Any]:
    if rule_id in INPUT_RULES:
        return {"id": rule_id, "shortDescription": {"text": INPUT_RULES[rule_id]}}
    spec = catalog().get(rule_id)
    summary = spec.summary if spec else CRD_CHECKS.get(rule_id, rule_id)
    return {"id": rule_id, "shortDescription": {"text": summary},
            "helpUri": f"{urljoin(docs_url.rstrip('/') + '/', RULES_DOC)}#{rule_id}"}


def absolute_url(value: str) -> str | None:
    """What is wrong with `value` as the base of helpUri (None when it is an absolute http(s) URL)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{value!r} is not an absolute http(s) URL"
    return None


def artifact_uri(source: str, sep: str = os.sep) -> str:
    """A file name as a URI reference: spaces, `#`, `%` and the `<>` of `<stdin>` percent-encoded. On Windows
    (`sep` a backslash) its separators become the `/` of RFC 3986 section 3.3, and a path with a drive letter a
    `file:` URI, so code scanning finds the same file it would on Linux."""
    if sep == "\\":
        path = PureWindowsPath(source)
        return path.as_uri() if path.is_absolute() else quote(path.as_posix(), safe="/")
    return quote(source, safe="/")


def _location(uri: str, line: int | None, path: str = "") -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": uri}}
    if line:
        physical["region"] = {"startLine": line}
    location: dict[str, Any] = {"physicalLocation": physical}
    if path:
        location["logicalLocations"] = [{"fullyQualifiedName": path}]
    return location
