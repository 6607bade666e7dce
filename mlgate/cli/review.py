"""Run the engine over documents and keep what a report needs: one compact record each.

Records hold no parsed object, so memory stays flat however many documents pass through.
Large inputs are spread over worker processes (one per core), file by file, and the
records come back in input order.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.loading.documents import Document, expand, read_documents
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Decision, Outcome

GC_THRESHOLD = 200_000
Render = Callable[["Record"], "Record"]
FILES_PER_WORKER_MIN = 8  # below this, starting workers costs more than it saves


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
    source: str
    index: int
    line: int
    status: str  # allowed | denied | skipped | error
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    error: str | None = None
    note: str = ""
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: dict[str, Any] | None = None  # kept only when asked for
    rendered: str | None = None  # the report's text for this record, when the worker wrote it

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def identity(self) -> str:
        namespace = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind or '?'} {namespace}{self.name or '?'}"


def review_document(
    document: Document, policies: PolicySet, facts: ClusterFacts = NO_FACTS, keep_mutated: bool = False
) -> Record:
    record = Record(document.source, document.index, document.line, "error", error=document.error)
    data = document.data
    if data is None:
        return record
    meta = data.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    record.api_version, record.kind = data.get("apiVersion"), data.get("kind")
    record.name, record.namespace = meta.get("name") or meta.get("generateName"), meta.get("namespace")
    decision = evaluate(data, policies, facts=facts)
    record.note = decision.note
    record.status = "skipped" if decision.note else ("allowed" if decision.allowed else "denied")
    record.violations = _violations(document, decision)
    record.warnings = decision.warnings
    record.patch = decision.patch
    if keep_mutated:
        record.mutated = decision.mutated if decision.mutated is not None else data
    return record


def review(
    paths: Sequence[str], policies: PolicySet, facts: ClusterFacts = NO_FACTS,
    keep_mutated: bool = False, jobs: int | None = None, *, render: Render | None = None,
) -> Iterator[Record]:
    """Records for every document under `paths`, in order; raises InputError for bad paths.

    With `render`, each record comes back as `render` left it (its report text written in the
    worker, so that only text and a few counts cross the process boundary).
    """
    files = list(expand(paths))
    # Manifests are acyclic data freed by reference counting; frequent cyclic collections
    # over the parse trees only cost time.
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 100)
    workers = min(jobs or len(os.sched_getaffinity(0)), max(len(files) // FILES_PER_WORKER_MIN, 1))
    if workers < 2 or "-" in files:
        for document in read_documents(files):
            record = review_document(document, policies, facts, keep_mutated)
            yield render(record) if render is not None else record
        return
    _WORKER_STATE.update(policies=policies, facts=facts, keep_mutated=keep_mutated, render=render)
    # fork: workers inherit the loaded policies instead of loading and pickling them again
    with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
        for records in pool.map(_review_file, files, chunksize=4):
            yield from records


_WORKER_STATE: dict[str, Any] = {}


def _review_file(path: str) -> list[Record]:
    state = _WORKER_STATE
    render = state["render"]
    records = [review_document(d, state["policies"], state["facts"], state["keep_mutated"])
               for d in read_documents([path])]
    return [render(r) for r in records] if render is not None else records


def _violations(document: Document, decision: Decision) -> list[Violation]:
    found: list[Violation] = []
    for result in decision.results:
        if result.outcome is Outcome.ERROR and result.blocks:
            found.append(Violation(result.policy, result.rule, result.action.value, "", "could not evaluate",
                                   result.messages()[0], ""))
        elif result.outcome in (Outcome.FAIL, Outcome.WARN):
            for finding, message in zip(result.findings, result.messages(), strict=True):
                found.append(Violation(result.policy, result.rule, result.action.value, finding.path,
                                       finding.reason, message, finding.fix))
    for violation in found:
        violation.line = document.line_of(violation.path)
    return found
