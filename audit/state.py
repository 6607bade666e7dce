"""What the audit knows, as plain data: the stored objects, their latest results, and what needs doing.

Pure: watch events, policy and facts changes come in; objects to judge and reports to write go out. No client,
no clock, no thread (runner.py brings those). Memory is one slim copy of each stored object plus its latest
results and one digest per report: it grows with what is stored, never with history.

- An object is judged again when its spec or metadata changes (a status-only update keeps its generation and
  labels, and is not), when the policy set or the facts change, and on each resync.
- A namespace's reports are built again only when one of its objects' results changed, or it lost its last
  object; a built report is written only when its digest (content without timestamps) differs from the one last
  written. So an unchanged object costs no write, and a changed one at most one: its namespace's report.
- A Warning Event is due when an object's results turn to fail: it did not fail before (as last judged, or as the
  stored reports said when this replica started leading). A resync that finds the same failure is not a turn.
  Due events are a set of objects, so a burst of them waits in memory bounded by what is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mlgate.kube.objects import controlled_by_judged, opted_out, slim
from mlgate.model.facts import ClusterFacts
from mlgate.model.results import Decision, Outcome
from mlgate.reports import WGPOLICY, Judged, ReportApi, build_reports, digest
from mlgate.workloads.catalog import KindCatalog

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Evaluate = Callable[[dict[str, Any]], Decision]


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), str(meta.get("namespace") or ""),
            str(meta.get("name") or ""))


def _fingerprint(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a re-judgement depends on: not status, not resourceVersion."""
    meta = obj.get("metadata") or {}
    generation = meta.get("generation")
    body = generation if generation is not None else repr({k: v for k, v in obj.items() if k != "status"})
    return body, repr(meta.get("labels")), repr(meta.get("annotations"))


@dataclass
class AuditState:
    catalog: KindCatalog
    api: ReportApi = WGPOLICY
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    seen: dict[Key, tuple[Any, ...]] = field(default_factory=dict)
    results: dict[Key, Judged] = field(default_factory=dict)
    dirty: set[Key] = field(default_factory=set)
    dirty_namespaces: set[str] = field(default_factory=set)
    written: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, report name) -> digest
    synced: set[str] = field(default_factory=set)  # kinds listed at least once
    failing: set[Key] = field(default_factory=set)  # objects whose results include a fail, as last known
    events_due: set[Key] = field(default_factory=set)  # objects whose results turned to fail, not yet told

    # --- what comes in ---------------------------------------------------------------------------

    def replace(self, kind: str, items: Iterable[Mapping[str, Any]]) -> None:
        """A full LIST of one kind (`apiVersion/Kind`): objects gone from it are dropped."""
        fresh = {key_of(item): item for item in items}
        for key in [k for k in self.objects.keys() | self.failing if f"{k[0]}/{k[1]}" == kind and k not in fresh]:
            self._drop(key)
        for item in fresh.values():
            self._put(item)
        self.synced.add(kind)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            self._drop(key_of(obj))
        elif event_type in ("ADDED", "MODIFIED"):
            self._put(obj)

    def everything_changed(self) -> None:
        """The policy set or the facts changed, or a resync is due: judge every object again."""
        self.dirty.update(self.objects)

    def namespace_changed(self, namespace: str) -> None:
        """A namespace's labels changed (an opt-out set or removed): judge its objects again."""
        self.dirty.update(k for k in self.objects if k[2] == namespace)

    def forget_written(self) -> None:
        """After leadership changed hands the stored reports may be another replica's: compare afresh."""
        self.written.clear()
        self.dirty_namespaces.update(ns for _, _, ns, _ in self.objects)

    # --- what goes out ---------------------------------------------------------------------------

    def judge(self, evaluate: Evaluate, facts: ClusterFacts, limit: int | None = None) -> int:
        """Judge up to `limit` dirty objects; the number judged. An object in an opted-out namespace has no
        results (the webhook never sees it), so its report entry goes."""
        count = 0
        while self.dirty and (limit is None or count < limit):
            key = self.dirty.pop()
            obj = self.objects.get(key)
            if obj is None:
                continue
            count += 1
            namespace = key[2]
            judged = None
            if not (namespace and opted_out(facts.namespace_labels(namespace))):
                judged = Judged.of(obj, evaluate(obj))
            before = self.results.get(key)
            if judged is None:
                self.results.pop(key, None)
            else:
                self.results[key] = judged
            if before != judged:
                self.dirty_namespaces.add(key[2])
            self._note_failing(key, judged)
        return count

    def seed_failing(self, keys: Iterable[Key]) -> None:
        """The objects the stored reports list as failing: what a new leader takes as already told, so a restart
        does not tell every failure again."""
        known = set(keys)
        self.events_due -= known
        self.failing |= {k for k in known if k not in self.results  # a kind listed already: only what exists
                         and (f"{k[0]}/{k[1]}" not in self.synced or k in self.objects)}

    def take_events(self, limit: int) -> list[tuple[Key, Judged]]:
        """Up to `limit` due events, each object with its failing results; an object fixed meanwhile is dropped."""
        taken: list[tuple[Key, Judged]] = []
        while self.events_due and len(taken) < limit:
            key = self.events_due.pop()
            judged = self.results.get(key)
            if judged is not None and _fails(judged):
                taken.append((key, judged))
        return taken

    def reports(self, now: datetime) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """(the reports to write, the (namespace, name) of reports to delete), for the namespaces whose results
        changed; a report whose content is the one last written is left out."""
        writes: list[dict[str, Any]] = []
        deletes: list[tuple[str, str]] = []
        for namespace in sorted(self.dirty_namespaces):
            built = build_reports([j for k, j in self.results.items() if k[2] == namespace], now=now, api=self.api)
            names = {r["metadata"]["name"] for r in built}
            writes += [r for r in built if self.written.get((namespace, r["metadata"]["name"])) != digest(r)]
            deletes += sorted((ns, n) for (ns, n) in self.written if ns == namespace and n not in names)
        self.dirty_namespaces.clear()
        return writes, deletes

    def wrote(self, report: Mapping[str, Any]) -> None:
        meta = report["metadata"]
        self.written[(str(meta.get("namespace") or ""), str(meta["name"]))] = digest(report)

    def deleted(self, namespace: str, name: str) -> None:
        self.written.pop((namespace, name), None)

    def failed(self, namespace: str) -> None:
        """A write failed: build the namespace's reports again next round."""
        self.dirty_namespaces.add(namespace)

    # --- bookkeeping -----------------------------------------------------------------------------

    def _put(self, obj: Mapping[str, Any]) -> None:
        if controlled_by_judged(obj, self.catalog):
            return  # judged through its owner, as `mlgate validate --cluster` does
        key = key_of(obj)
        mark = _fingerprint(obj)
        if self.seen.get(key) == mark:
            return
        self.seen[key] = mark
        self.objects[key] = slim(dict(obj))
        self.dirty.add(key)

    def _note_failing(self, key: Key, judged: Judged | None) -> None:
        if judged is not None and _fails(judged):
            if key not in self.failing:
                self.events_due.add(key)
            self.failing.add(key)
        else:
            self.failing.discard(key)
            self.events_due.discard(key)

    def _drop(self, key: Key) -> None:
        self.objects.pop(key, None)
        self.seen.pop(key, None)
        self.dirty.discard(key)
        self.failing.discard(key)
        self.events_due.discard(key)
        if self.results.pop(key, None) is not None:
            self.dirty_namespaces.add(key[2])


def _fails(judged: Judged) -> bool:
    return any(r.outcome is Outcome.FAIL for r in judged.results)
