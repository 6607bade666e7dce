"""Run the engine over documents and keep what a report needs: one compact record per object.

An object is a document, or one item of a `kind: List` document (kubectl applies each item on
its own). Every field path in a record, patch included, points into the document as written,
so an item's paths start with /items/N and its lines are exact.

Records hold no parsed object, so memory stays flat however many documents pass through.
Large inputs are spread over worker processes (one per usable CPU, started as the platform
allows: workers.py), file by file, and the records come back in input order.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from mlgate.cli.namespaces import DEFAULT_NAMESPACE, evaluate_in_namespace
from mlgate.cli.workers import pool_map, usable_cpus
from mlgate.engine import PolicySet
from mlgate.loading.builtin_schemas import BuiltinSchemas
from mlgate.loading.documents import Document, expand, read_documents
from mlgate.loading.exceptions import compile_exception, exceptions_against
from mlgate.loading.policies import LoadError, check_policy_object
from mlgate.loading.schemas import SchemaCatalog
from mlgate.loading.violations import Violation
from mlgate.model import pointer
from mlgate.model.exceptions import EXCEPTION_KIND, NO_EXCEPTIONS, Exceptions
from mlgate.model.facts import ClusterFacts
from mlgate.model.kinds import WORKLOAD_KIND_KINDS
from mlgate.model.namespaces import in_namespace
from mlgate.model.policy import API_VERSION, POLICY_KINDS
from mlgate.model.results import PRE_EXISTING, Action, Decision, Finding, Line, Outcome, RuleResult, rfc3339

GC_THRESHOLD = 200_000
Render = Callable[["Record"], "Record"]
FILES_PER_WORKER_MIN = 8  # below this, starting workers costs more than it saves


@dataclass(frozen=True)
class Settings:
    """What every object is judged against."""

    policies: PolicySet
    facts: ClusterFacts
    namespace: str = DEFAULT_NAMESPACE  # for objects that name none, as kubectl's context would give
    keep_mutated: bool = False
    schemas: SchemaCatalog | None = None  # CRD schemas the objects of their kinds must pass first
    exceptions: Exceptions = NO_EXCEPTIONS  # --exceptions: MLPolicyExceptions, judged at the run's start
    builtins: BuiltinSchemas | None = None  # built-in kinds' schemas: what the API server would not even decode


@dataclass
class Item:
    """One thing a report says about a rule's result on an object, as data: a finding (path, reason, detail,
    fix) or, for a rule that could not evaluate, `reason` "could not evaluate" and the cause in `detail`."""

    policy: str
    rule: str
    action: str  # deny | warn | audit, or error: the rule could not evaluate
    path: str
    reason: str
    detail: str
    fix: str = ""
    note: str = ""  # said after it in brackets, e.g. "already there before this update"
    line: int | None = None

    def message(self) -> str:
        """The engine's one format, `[policy/rule] reason: path: detail; fix`, built from the fields."""
        if self.action == "error":
            return Line(self.policy, self.rule, text=f"{self.reason}: {self.detail}").render()
        finding = Finding(self.path, self.reason, self.detail, self.fix)
        return Line(self.policy, self.rule, finding, note=self.note).render()


@dataclass
class Unlooked:
    """What a rule would have judged but could not look at, and why (no cluster facts, a claim not there yet)."""

    policy: str
    rule: str
    action: str
    reason: str


@dataclass
class Excepted:
    """What an MLPolicyException did to a rule's result: `count` findings excepted (`count` 0 and `expired`: an
    expired exception that would have excepted findings that now stand)."""

    policy: str
    rule: str
    namespace: str
    name: str
    expires: str  # RFC 3339
    count: int = 0
    expired: bool = False

    @property
    def label(self) -> str:
        return "NOTE" if self.expired else "SKIP"

    def message(self) -> str:
        """`[policy/rule] what the exception did`, built from the fields."""
        head = f"[{self.policy}/{self.rule}] "
        if self.expired:
            return f"{head}MLPolicyException {self.namespace}/{self.name} expired at {self.expires}; its findings stand"
        return f"{head}{self.count} finding(s) excepted by MLPolicyException {self.namespace}/{self.name} " \
               f"until {self.expires}"


@dataclass
class Dropped:
    """Findings a rule made past the ones it kept: counted, not listed."""

    policy: str
    rule: str
    level: str  # the list its kept findings are in: violations | warnings | audit
    count: int


@dataclass
class Record:
    source: str
    index: int
    line: int  # where the object starts, or for a document that did not parse, the line of the error
    status: str  # allowed | denied | skipped | error
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    error: str | None = None
    note: str = ""
    notes: list[str] = field(default_factory=list)
    violations: list[Item] = field(default_factory=list)  # what blocks admission
    warnings: list[Item] = field(default_factory=list)  # what admission would answer with warnings
    audit: list[Item] = field(default_factory=list)  # what audit-action rules found: recorded, never shown to users
    unchecked: list[Unlooked] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    excepted: list[Excepted] = field(default_factory=list)  # what MLPolicyExceptions excepted, or no longer do
    patch: list[dict[str, Any]] = field(default_factory=list)
    mutated: dict[str, Any] | None = None  # kept only when asked for
    rendered: str | None = None  # the report's text for this record, when the worker wrote it
    item: int | None = None  # the position in a `kind: List` document's items
    totals: dict[str, int] = field(default_factory=dict)  # warnings, audit, unchecked: counted, dropped included
    uid: str | None = None
    results: list[RuleResult] = field(default_factory=list)  # the engine's own, for PolicyReports

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source  # a stored object has no lines

    @property
    def position(self) -> str:
        return f"doc {self.index}" if self.item is None else f"doc {self.index}, item {self.item}"

    @property
    def identity(self) -> str:
        namespace = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind or '?'} {namespace}{self.name or '?'}"


def review_document(document: Document, settings: Settings) -> list[Record]:
    """One record for the document, or one per item when it is a `kind: List`."""
    data = document.data
    if data is None:
        line = document.error_line or document.line
        return [Record(document.source, document.index, line, "error", error=document.error)]
    if not _is_list(data):
        return [_review_object(document, data, settings)]
    items = data.get("items")
    if not isinstance(items, list):
        return [Record(document.source, document.index, document.line_of("/items"), "error",
                       error="List items is not a list")]
    return [_review_object(document, item, settings, item=index) for index, item in enumerate(items)]


def _is_list(data: dict[str, Any]) -> bool:
    # an empty List holds nothing to judge: it is reported like any other kind
    return data.get("apiVersion") == "v1" and data.get("kind") == "List" and data.get("items") not in (None, [])


def _review_object(document: Document, obj: Any, settings: Settings, *, item: int | None = None) -> Record:
    prefix = "" if item is None else pointer.join("/items", item)
    line = document.line if item is None else document.line_of(prefix)
    record = Record(document.source, document.index, line, "error", item=item)
    problem = _not_an_object(obj)
    if problem:
        record.error = f"line {record.line}: item {item} {problem}"
        return record
    placed = in_namespace(obj, settings.namespace, settings.policies.kinds.cluster_scoped)
    meta = placed.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    record.api_version, record.kind = _text(placed.get("apiVersion")), _text(placed.get("kind"))
    record.name, record.namespace = _text(meta.get("name") or meta.get("generateName")), _text(meta.get("namespace"))
    record.uid = _text(meta.get("uid"))
    try:
        decision = evaluate_in_namespace(obj, settings.policies, settings.namespace, facts=settings.facts,
                                         exceptions=settings.exceptions)
    except Exception as exc:  # an engine bug on odd input: this object's error, the others are still judged
        record.error = f"could not evaluate: {type(exc).__name__}: {_first_line(exc)}"
        return record
    record.results = decision.results  # paths in the object, as a report about the object names them
    if prefix:
        decision = _under(decision, prefix)
    record.note, record.notes = decision.note, decision.notes
    record.status = "skipped" if decision.note else ("allowed" if decision.allowed else "denied")
    _add_results(record, document, decision, prefix)
    refused = _refusals(obj, settings)
    if refused is not None:
        _add_schema_results(record, document, refused, prefix)
    policy_errors = _policy_refusals(obj, settings.policies)
    if policy_errors:
        record.violations[:0] = [Item("mlgate", "load", "deny", prefix + (e.pointer or ""), f"invalid {record.kind}",
                                      e.message, line=document.line_of(prefix + (e.pointer or "")))
                                 for e in policy_errors]
        record.status = "denied"
    unstored = refused is not None and bool(refused.violations)  # refused before admission changes it: no patch
    record.patch = [] if unstored else decision.patch
    if settings.keep_mutated:
        record.mutated = obj if unstored or decision.mutated is None else decision.mutated
    return record


class Refusals(NamedTuple):
    """What an object's schema refuses: `source` names the check in reports (crd, kubernetes)."""

    source: str
    violations: list[Violation]
    unchecked: list[tuple[str, str]]  # (check, why it was not)


def _refusals(obj: dict[str, Any], settings: Settings) -> Refusals | None:
    """What the schema of the object's kind refuses (its CRD's, else its built-in kind's), or None when no schema
    here describes the kind."""
    verdict = settings.schemas.check(obj) if settings.schemas is not None else None
    if verdict is not None:
        return Refusals("crd", verdict.violations, verdict.unchecked)
    found = settings.builtins.check(obj) if settings.builtins is not None else None
    return None if found is None else Refusals("kubernetes", found, [])


def _policy_refusals(obj: dict[str, Any], policies: PolicySet) -> list[LoadError]:
    """What the webhook refuses at `kubectl apply` of an MLPolicy, ClusterMLPolicy, (Cluster)WorkloadKind or
    MLPolicyException among the inputs, by the loader's own checks (webhook/review.py, `_admit_policy`): a policy
    repository's CI fails where the cluster would. An exception is held against the policies loaded here only when
    it names one of them; which others are in force is the cluster's to say."""
    if obj.get("apiVersion") != API_VERSION:
        return []
    if obj.get("kind") == EXCEPTION_KIND:
        exception, errors = compile_exception(obj, "")
        named = [p for p in policies.policies if exception is not None and exception.names_policy(p.key)]
        return errors if exception is None else exceptions_against(exception, named) if named else []
    if obj.get("kind") in (*POLICY_KINDS, *WORKLOAD_KIND_KINDS):
        return check_policy_object(obj)
    return []


def _not_an_object(obj: Any) -> str:
    """Why a List item is no Kubernetes object, or "" (documents were checked when parsed)."""
    if not isinstance(obj, dict):
        return f"is a {type(obj).__name__}, not a Kubernetes object"
    if not obj.get("kind") or not obj.get("apiVersion"):
        return f"has no {'kind' if not obj.get('kind') else 'apiVersion'}"
    return ""


def _under(decision: Decision, prefix: str) -> Decision:
    """The decision on a List item, its paths (findings, patch) moved under the item's pointer."""
    results = [_result_under(r, prefix) for r in decision.results]
    patch = [{**op, **{k: prefix + op[k] for k in ("path", "from") if k in op}} for op in decision.patch]
    return replace(decision, results=results, patch=patch)


def _result_under(result: RuleResult, prefix: str) -> RuleResult:
    if not result.findings:
        return result
    return replace(result, findings=tuple(replace(f, path=prefix + f.path) for f in result.findings))


def _text(value: Any) -> str | None:
    # YAML turns `name: 2024-01-01` into a date; the API server would see the text
    return None if value is None or value == "" else str(value)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def review(paths: Sequence[str], settings: Settings, jobs: int | None = None, *,
           render: Render | None = None) -> Iterator[Record]:
    """Records for every object under `paths`, in order; raises InputError for bad paths.

    With `render`, each record comes back as `render` left it (its report text written in the
    worker, so that only text and a few counts cross the process boundary).
    """
    files = list(expand(paths))
    # Manifests are acyclic data freed by reference counting; frequent cyclic collections
    # over the parse trees only cost time.
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 50, 100)
    workers = min(jobs or usable_cpus(), max(len(files) // FILES_PER_WORKER_MIN, 1))
    if workers < 2 or "-" in files:
        for document in read_documents(files):
            for record in review_document(document, settings):
                yield render(record) if render is not None else record
        return
    for records in pool_map(_review_file, files, workers, initializer=_start_worker, initargs=(settings, render),
                            chunksize=4):
        yield from records


_WORKER_STATE: dict[str, Any] = {}


def _start_worker(settings: Settings, render: Render | None) -> None:
    """Once per worker: what every file is judged with (a spawned worker's GC settings are its own)."""
    _WORKER_STATE.update(settings=settings, render=render)
    gc.set_threshold(GC_THRESHOLD, 50, 100)


def _review_file(path: str) -> list[Record]:
    settings, render = _WORKER_STATE["settings"], _WORKER_STATE["render"]
    records = [r for d in read_documents([path]) for r in review_document(d, settings)]
    return [render(r) for r in records] if render is not None else records


def _add_results(record: Record, document: Document, decision: Decision, prefix: str = "") -> None:
    """Sort every rule result into the record's lists, from the results' own fields."""
    lists = {"violations": record.violations, "warnings": record.warnings, "audit": record.audit}
    for result in decision.results:
        level = _level(result)
        record.unchecked += [Unlooked(result.policy, result.rule, result.action.value, r) for r in result.unchecked]
        record.excepted += [Excepted(result.policy, result.rule, e.namespace, e.name, rfc3339(e.expires_at),
                                     result.excepted) for e in result.exceptions]
        record.excepted += [Excepted(result.policy, result.rule, e.namespace, e.name, rfc3339(e.expires_at),
                                     expired=True) for e in result.expired]
        if level is None:
            continue
        if result.outcome is Outcome.ERROR:
            # labelled by what happened: a warn or audit rule that cannot evaluate still denies under Fail
            items = [Item(result.policy, result.rule, "error", prefix, "could not evaluate", result.note)]
        else:
            note = PRE_EXISTING if result.note == PRE_EXISTING else ""
            items = [Item(result.policy, result.rule, result.action.value, f.path, f.reason, f.detail, f.fix, note)
                     for f in result.findings]
        for item in items:
            item.line = document.line_of(item.path)
        lists[level] += items
        if result.dropped:
            record.dropped.append(Dropped(result.policy, result.rule, level, result.dropped))
    record.totals = {
        "warnings": len(record.warnings) + sum(d.count for d in record.dropped if d.level == "warnings"),
        "audit": len(record.audit) + sum(d.count for d in record.dropped if d.level == "audit"),
        "unchecked": len(record.unchecked),
    }


def _add_schema_results(record: Record, document: Document, refused: Refusals, prefix: str) -> None:
    """What the object's schema refuses, as `[crd/schema]`, `[crd/cel]` or `[kubernetes/schema]` denials ahead of
    the policies' findings: the API server refuses such an object whatever admission says."""
    source = refused.source
    items = [Item(source, v.check, "deny", prefix + v.path, v.reason, v.detail, v.fix) for v in refused.violations]
    for item in items:
        item.line = document.line_of(item.path)
    record.violations[:0] = items
    record.unchecked += [Unlooked(source, check, "deny", reason) for check, reason in refused.unchecked]
    record.totals["unchecked"] = len(record.unchecked)
    if items:
        record.status = "denied"


def _level(result: RuleResult) -> str | None:
    """The list a result's findings go in, or None when it found nothing."""
    if result.blocks:
        return "violations"
    if result.outcome is Outcome.ERROR:
        return "warnings"  # failurePolicy Ignore: admitted, and said
    if result.outcome is Outcome.WARN:
        return "audit" if result.action is Action.AUDIT else "warnings"  # a deny an UPDATE did not cause warns
    return None
