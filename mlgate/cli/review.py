"""Run the engine over documents and keep what a report needs, one record per document."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.documents import Document
from mlgate.loading.linemap import line_for, line_map
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Decision, Outcome


@dataclass
class Violation:
    policy: str
    rule: str
    action: str
    path: str
    reason: str
    message: str
    fix: str
    line: int | None = None


@dataclass
class Record:
    document: Document
    decision: Decision | None = None
    violations: list[Violation] = field(default_factory=list)

    @property
    def data(self) -> dict[str, Any]:
        return self.document.data or {}

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.data.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def status(self) -> str:
        """error | skipped | denied | allowed"""
        if self.document.error is not None or self.decision is None:
            return "error"
        if self.decision.note:
            return "skipped"
        return "allowed" if self.decision.allowed else "denied"


def review(
    documents: Iterable[Document], policies: PolicySet, facts: ClusterFacts = NO_FACTS, with_lines: bool = True
) -> Iterator[Record]:
    for document in documents:
        if document.data is None:
            yield Record(document)
            continue
        decision = evaluate(document.data, policies, facts=facts)
        yield Record(document, decision, _violations(document, decision, with_lines))


def _violations(document: Document, decision: Decision, with_lines: bool) -> list[Violation]:
    found: list[Violation] = []
    for result in decision.results:
        if result.outcome is Outcome.ERROR and result.blocks:
            found.append(Violation(result.policy, result.rule, result.action.value, "", "could not evaluate",
                                   result.messages()[0], ""))
        elif result.outcome in (Outcome.FAIL, Outcome.WARN):
            for finding, message in zip(result.findings, result.messages(), strict=True):
                found.append(Violation(result.policy, result.rule, result.action.value, finding.path,
                                       finding.reason, message, finding.fix))
    if found and with_lines and document.text:
        lines = _line_map(document)
        for violation in found:
            violation.line = line_for(lines, violation.path) if violation.path else document.line
    return found


def _line_map(document: Document) -> dict[str, int]:
    try:
        return line_map(document.text, document.line)
    except Exception:  # JSON documents and odd YAML: fall back to the document's first line
        return {"": document.line}
