"""The policy set in force, reloaded when its sources change.

Sources implement `PolicySource`: a cheap `version()` that changes when the documents may have
changed (None while the source has nothing it may load yet), and `load()` that compiles them. Two exist:

- `DirectorySource`: policy files (a ConfigMap mount in the cluster), read whole on every poll and
  loaded only once they have settled (see `watch.Settler`): a file caught mid-write is never loaded.
- `ClusterPolicySource`: MLPolicy/ClusterMLPolicy/ClusterWorkloadKind objects, fed by a watch (see
  `kube.py`) with plain dicts, so it is tested without a cluster.

`PolicyStore.refresh()` compiles every source when any version changed.

- Policy files load whole or not at all (one repository, one owner): on any error in them the new
  set is rejected, the last good set stays in force, and the error goes to the log, to `status()`
  (shown by /readyz) and to the reload-error metric. Files that cannot be listed or read are such an
  error, and so are files that hold no policies, unless `allow_empty` says an empty set is meant
  (`serve --allow-empty-policies`): an empty set allows every request.
- Cluster objects are isolated per object (one tenant's typo never holds back the others): an object
  whose stored version does not load (its own errors, or a name or kind the files or an older object
  already have) is reported in its `status.loadError` (policy_status.py), in `status()["rejected"]`,
  the log and `mlgate_policy_object_rejected`, and the rest load. In its place stays the last version
  of it that loaded in this process, if there was one; otherwise it is left out. A later good version
  replaces it. That last good version lives in memory: a replica started after the broken version was
  stored has none and leaves the object out (the metric's `in_force` label says which).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from mlgate.engine import Policy, PolicySet
from mlgate.loading.policies import (
    LoadError,
    cluster_source,
    compile_document,
    duplicate_kinds,
    duplicate_names,
    kind_warnings,
    load_policy_text,
    policy_set,
)
from mlgate.model.kinds import KindSpec

from .metrics import Metrics
from .watch import ListDir, Settler, Snapshot, list_dir, read_snapshot

log = logging.getLogger("mlgate.webhook.policies")
CLUSTER_KINDS = ("MLPolicy", "ClusterMLPolicy", "ClusterWorkloadKind")
Document = Policy | KindSpec  # a policy, or the description of a kind the engine should judge
ObjectKey = tuple[str, str, str]  # kind, namespace ("" for cluster-scoped objects), name
DEFAULT_SETTLE = 2.0  # seconds; the webhook's poll interval (Settings.poll_interval)
EMPTY_HINT = "an empty policy set would allow every request; serve --allow-empty-policies if that is meant"


class PolicySource(Protocol):
    name: str

    def version(self) -> Hashable: ...  # None while there is nothing to load yet: no set is compiled

    def load(self) -> tuple[list[Document], list[str]]: ...


class DirectorySource:
    """Policy files and directories (hidden entries skipped, as a ConfigMap mount needs).

    `version()` reads them all and hands the settled content to `load()`, which compiles exactly
    those bytes: what is loaded is what was seen unchanged (`settle` seconds, see `watch.Settler`).
    Without `allow_empty`, a path that holds no policy documents, or files with no policy among
    them, is a load error. `listdir` lists a directory (os.scandir); a test may pass one that fails."""

    name = "files"

    def __init__(self, paths: Sequence[str | Path], *, allow_empty: bool = False, settle: float = DEFAULT_SETTLE,
                 listdir: ListDir = list_dir):
        self.paths = [str(p) for p in paths]
        self.allow_empty = allow_empty
        self._settler = Settler(lambda: read_snapshot(self.paths, listdir), settle)

    def version(self) -> Hashable:
        snapshot = self._settler.poll()
        return None if snapshot is None else snapshot.signature

    def load(self) -> tuple[list[Document], list[str]]:
        snapshot = self._settler.settled
        if snapshot is None:
            return [], ["policy files: not read yet"]
        documents, errors, per_file = _compile(snapshot)
        if not errors and not self.allow_empty:
            errors = self._emptiness(snapshot, documents, per_file)
        return ([], [str(e) for e in errors]) if errors else (documents, [])

    def _emptiness(self, snapshot: Snapshot, documents: list[Document], per_file: dict[str, int]) -> list[LoadError]:
        """Every path must hold a document, and the files together a policy."""
        errors = []
        for root in snapshot.roots:
            if not root.files:
                errors.append(LoadError(root.path, None, "", f"no policy files (*.yaml, *.yml, *.json); {EMPTY_HINT}"))
            elif not any(per_file.get(name) for name, _ in root.files):
                errors.append(LoadError(root.path, None, "", f"no policy documents in its {len(root.files)} "
                                        f"file(s); {EMPTY_HINT}"))
        if not errors and not any(isinstance(d, Policy) for d in documents):
            errors.append(LoadError(", ".join(self.paths), None, "", f"no policies, only WorkloadKinds; {EMPTY_HINT}"))
        return errors


def _compile(snapshot: Snapshot) -> tuple[list[Document], list[LoadError], dict[str, int]]:
    """What `load_documents` does, from the bytes read (not from the files, which may have changed since),
    and how many documents each file held."""
    documents: list[Document] = []
    per_file: dict[str, int] = {}
    described: list[tuple[str, KindSpec]] = []
    errors = [LoadError(where, None, "", what) for root in snapshot.roots for where, what in root.errors]
    for root in snapshot.roots:
        for source, data in root.files:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                errors.append(LoadError(source, None, "", f"cannot read: {exc}"))
                continue
            loaded, problems = load_policy_text(text, source)
            per_file[source] = len(loaded)
            documents.extend(loaded)
            described.extend((source, k) for k in loaded if isinstance(k, KindSpec))
            errors.extend(problems)
    errors.extend(duplicate_names(p for p in documents if isinstance(p, Policy)))
    errors.extend(duplicate_kinds(described))
    return documents, errors, per_file


class ClusterPolicySource:
    """MLPolicy, ClusterMLPolicy and ClusterWorkloadKind objects, kept from watch events (plain dicts).

    `synced` once every kind has been listed: before that, the policies stored in the cluster are
    unknown and a webhook must not report ready (it would admit what they deny). Each object is
    compiled on its own (`load_each`): a broken one never holds back the others."""

    name = "cluster"

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, Mapping[str, Any]] = {}
        self.load_errors: dict[ObjectKey, list[LoadError]] = {}  # per object, from the last load()
        self.rejected: dict[ObjectKey, bool] = {}  # objects with errors: True if the last good stays
        self._good: dict[ObjectKey, Document] = {}  # the version of each object in force
        self._revision = 0
        self._listed: set[str] = set()
        self._lock = threading.Lock()

    @property
    def synced(self) -> bool:
        return self._listed.issuperset(CLUSTER_KINDS)

    def replace(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            before = {k: _generation(v) for k, v in self._objects.items() if k[0] == kind}
            self._objects = {k: v for k, v in self._objects.items() if k[0] != kind}
            self._objects.update((_key(kind, o), o) for o in items)
            after = {k: _generation(v) for k, v in self._objects.items() if k[0] == kind}
            if kind not in self._listed or before != after or None in after.values():
                self._revision += 1  # a re-list that finds every spec as it was needs no reload
            self._listed.add(kind)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            key = _key(kind, obj)
            if event_type in ("ADDED", "MODIFIED"):
                before = self._objects.get(key)
                self._objects[key] = obj
                generation = _generation(obj)
                if before is not None and generation is not None and _generation(before) == generation:
                    return  # the spec is as it was (status or metadata changed, e.g. our loadError): no reload
            elif event_type == "DELETED":
                self._objects.pop(key, None)
            else:
                return
            self._revision += 1

    def objects(self) -> list[tuple[ObjectKey, Mapping[str, Any]]]:
        """(kind, namespace, name) and the object as last seen, status included."""
        with self._lock:
            return sorted(self._objects.items())

    def version(self) -> Hashable:
        return self._revision

    def load(self) -> tuple[list[Document], list[str]]:
        """Every object that loads, on its own; the errors of the others are per object (`load_errors`)."""
        return self.load_each(()), []

    def load_each(self, beside: Sequence[Document]) -> list[Document]:
        """The documents in force: each object's stored version if it loads and takes no name or kind that
        `beside` (the policy files) or an older object has, else its last good version if that takes none.

        `load_errors` gets every object's errors (none when its stored version loaded), which depend only on
        the stored objects and the files, never on this process's past: every replica writes the same
        status.loadError. `rejected` gets the objects with errors, True where the last good version stays."""
        names = {p.key: p.source for p in beside if isinstance(p, Policy)}
        kinds = {(k.group, k.kind): "the policy files" for k in beside if isinstance(k, KindSpec)}
        errors: dict[ObjectKey, list[LoadError]] = {}
        in_force: dict[ObjectKey, Document] = {}
        for key, obj in sorted(self.objects(), key=_claim_order):  # an older object keeps a name or kind it claimed
            source = cluster_source(*key)
            document, problems = compile_document({**obj, "kind": key[0]}, source)
            if document is not None:
                problems = _claim(document, source, names, kinds)
            errors[key] = problems
            if not problems and document is not None:
                in_force[key] = document
        for key, problems in sorted(errors.items()):
            last = self._good.get(key)
            if problems and last is not None and not _claim(last, cluster_source(*key), names, kinds):
                in_force[key] = last  # broken now: its last good version stays, unless another took its place
        self._good = in_force
        self.load_errors = errors
        self.rejected = {key: key in in_force for key, problems in errors.items() if problems}
        return [in_force[key] for key in sorted(in_force)]


def _claim_order(item: tuple[ObjectKey, Mapping[str, Any]]) -> tuple[str, ObjectKey]:
    """Oldest first (RFC 3339 times in UTC sort as strings), then by kind, namespace and name."""
    key, obj = item
    return str((obj.get("metadata") or {}).get("creationTimestamp") or ""), key


def _claim(document: Document, source: str, names: dict[str, str],
           kinds: dict[tuple[str, str], str]) -> list[LoadError]:
    """Take the document's policy name or described kind, or say who has it."""
    if isinstance(document, Policy):
        if document.key in names:
            return [LoadError(source, None, "metadata.name",
                              f"policy {document.key!r} is also defined in {names[document.key]}")]
        names[document.key] = source
        return []
    kind = (document.group, document.kind)
    if kind in kinds:
        return [LoadError(source, None, "spec.kind",
                          f"{document.group or 'core'}/{document.kind} is also described in {kinds[kind]}")]
    kinds[kind] = source
    return []


def _generation(obj: Mapping[str, Any]) -> int | None:
    generation = (obj.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


def _key(kind: str, obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


class PolicyStore:
    def __init__(self, sources: Sequence[PolicySource], metrics: Metrics | None = None):
        self.sources = list(sources)
        self.metrics = metrics
        self.current: PolicySet | None = None
        self.errors: list[str] = []  # of the last load: what rejected the set, and each cluster object's
        self.rejected: dict[str, dict[str, Any]] = {}  # cluster objects that did not load, by source name
        self.synced = False  # every source had listed its documents when the set was last compiled
        self.pending: list[str] = []  # sources with nothing to load yet (files not settled since the start)
        self._versions: tuple[Hashable, ...] | None = None
        self._documents: list[Document] | None = None  # of the set in force
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Reload if a source changed; True when a new set came into force."""
        with self._lock:
            synced = all(getattr(s, "synced", True) for s in self.sources)  # read before the versions
            versions = tuple(s.version() for s in self.sources)
            self.synced = synced
            self.pending = [s.name for s, v in zip(self.sources, versions, strict=True) if v is None]
            if self.pending or versions == self._versions:
                return False
            self._versions = versions
            documents, errors = self._load_whole()
            if errors:
                self._reject(errors)
                return False
            clusters = [s for s in self.sources if isinstance(s, ClusterPolicySource)]
            for cluster in clusters:  # after the files: a name or kind the files have is theirs
                documents.extend(cluster.load_each(documents))
            self._report_objects(clusters)
            if self.current is not None and documents == self._documents:
                if self.metrics:  # e.g. a broken object left out, or files fixed back to the set in force
                    self.metrics.policy_last_reload_ok.set(1)
                return False
            self._accept(documents)
            return True

    def _load_whole(self) -> tuple[list[Document], list[str]]:
        """The documents of the sources that load whole or not at all (policy files), and their errors."""
        documents: list[Document] = []
        errors: list[str] = []
        for source in self.sources:
            if not isinstance(source, ClusterPolicySource):
                loaded, problems = source.load()
                documents.extend(loaded)
                errors.extend(problems)
        errors.extend(str(e) for e in duplicate_names(p for p in documents if isinstance(p, Policy)))
        described = Counter((d.group, d.kind) for d in documents if isinstance(d, KindSpec))
        errors.extend(f"{group or 'core'}/{kind} is described by {count} WorkloadKinds in the policy files; keep one"
                      for (group, kind), count in described.items() if count > 1)
        return documents, errors

    def _report_objects(self, clusters: Sequence[ClusterPolicySource]) -> None:
        """The cluster objects that did not load: in the log (once per change), `status()` and the metric."""
        rejected: dict[str, dict[str, Any]] = {}
        series: list[tuple[str, str, str, str]] = []
        for cluster in clusters:
            for key, kept in cluster.rejected.items():
                where = cluster_source(*key)
                errors = [e.detail for e in cluster.load_errors[key]]
                rejected[where] = {"errors": errors, "inForce": "lastGood" if kept else "none"}
                series.append((*key, "last_good" if kept else "none"))
                if self.rejected.get(where) != rejected[where]:
                    log.error("%s not loaded: %s; %s", where, "; ".join(errors),
                              "its last good version stays in force" if kept else "it is left out",
                              extra={"fields": {"object": where, "errors": errors}})
        self.rejected = rejected
        self.errors = [f"{where}: {error}" for where, r in rejected.items() for error in r["errors"]]
        if self.metrics:
            self.metrics.rejected_objects.set(series)

    def _reject(self, errors: list[str]) -> None:
        self.errors = errors
        current = self.current
        kept = f"generation {current.generation} stays in force" if current is not None else "no policy set in force"
        log.error("policy set rejected (%d errors); %s", len(errors), kept,
                  extra={"fields": {"errors": errors}})
        if self.metrics:
            self.metrics.policy_reload_errors.inc()
            self.metrics.policy_last_reload_ok.set(0)

    def _accept(self, documents: list[Document]) -> None:
        generation = (self.current.generation if self.current is not None else 0) + 1
        self.current = policy_set(documents, generation)
        self._documents = documents
        policies = self.current.policies
        log.log(logging.INFO if policies else logging.WARNING,
                "policy set %d in force: %d policies%s", generation, len(policies),
                "" if policies else "; every admission request is allowed",
                extra={"fields": {"generation": generation, "policies": [p.key for p in policies]}})
        if self.metrics:
            self.metrics.policy_generation.set(generation)
            self.metrics.policy_count.set(len(policies))
            self.metrics.policy_last_reload_ok.set(1)
        for warning in kind_warnings(self.current):
            log.warning("policy warning: %s", warning, extra={"fields": {"source": warning.source}})

    def status(self) -> dict[str, Any]:
        """What /readyz shows. `lastError`: what rejected the last load of the files, or every error of the
        cluster objects that did not load; `rejected`: those objects, their errors and what stands in for them."""
        current = self.current
        return {
            "loaded": current is not None,
            "generation": current.generation if current is not None else 0,
            "policies": [p.key for p in current.policies] if current is not None else [],
            "lastError": list(self.errors),
            "rejected": dict(self.rejected),
            "synced": self.synced,
            "pending": list(self.pending),
        }
