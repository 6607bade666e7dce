"""The policy set in force, reloaded when its sources change; a broken set is rejected whole.

Sources implement `PolicySource`: a cheap `version()` that changes when the documents may have
changed, and `load()` that compiles them. Two exist:

- `DirectorySource`: policy files (a ConfigMap mount in the cluster), polled by mtime.
- `ClusterPolicySource`: MLPolicy/ClusterMLPolicy objects, fed by a watch (see `kube.py`) with
  plain dicts, so it is tested without a cluster.

`PolicyStore.refresh()` compiles every source when any version changed. On any error the new
set is rejected as a whole, the last good set stays in force, and the error goes to the log,
to `status()` (shown by /readyz) and to the reload-error metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from mlgate.engine import Policy, PolicySet
from mlgate.loading.policies import (
    LoadError,
    PolicyLoadError,
    cluster_source,
    compile_document,
    duplicate_names,
    load_documents,
    policy_set,
)
from mlgate.model.kinds import KindSpec

from .metrics import Metrics
from .watch import content_signature, manifest_files

log = logging.getLogger("mlgate.webhook.policies")
CLUSTER_KINDS = ("MLPolicy", "ClusterMLPolicy", "ClusterWorkloadKind")
Document = Policy | KindSpec  # a policy, or the description of a kind the engine should judge


class PolicySource(Protocol):
    name: str

    def version(self) -> Hashable: ...

    def load(self) -> tuple[list[Document], list[str]]: ...


class DirectorySource:
    """Policy files and directories (hidden entries skipped, as a ConfigMap mount needs)."""

    name = "files"

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [str(p) for p in paths]

    def version(self) -> Hashable:
        return content_signature(manifest_files(self.paths))

    def load(self) -> tuple[list[Document], list[str]]:
        try:
            return load_documents(manifest_files(self.paths)), []
        except PolicyLoadError as exc:
            return [], [str(e) for e in exc.errors]


class ClusterPolicySource:
    """MLPolicy, ClusterMLPolicy and ClusterWorkloadKind objects, kept from watch events (plain dicts).

    `synced` once both kinds have been listed: before that, the policies stored in the cluster are
    unknown and a webhook must not report ready (it would admit what they deny)."""

    name = "cluster"

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.load_errors: dict[tuple[str, str, str], list[LoadError]] = {}  # per object, from the last load()
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

    def objects(self) -> list[tuple[tuple[str, str, str], Mapping[str, Any]]]:
        """(kind, namespace, name) and the object as last seen, status included."""
        with self._lock:
            return sorted(self._objects.items())

    def version(self) -> Hashable:
        return self._revision

    def load(self) -> tuple[list[Document], list[str]]:
        policies: list[Document] = []
        errors: list[str] = []
        by_object: dict[tuple[str, str, str], list[LoadError]] = {}
        for (kind, namespace, name), obj in self.objects():
            policy, problems = compile_document({**obj, "kind": kind}, cluster_source(kind, namespace, name))
            errors.extend(str(p) for p in problems)
            by_object[(kind, namespace, name)] = problems
            if policy is not None:
                policies.append(policy)
        self.load_errors = by_object
        return policies, errors


def _generation(obj: Mapping[str, Any]) -> int | None:
    generation = (obj.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


def _key(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


class PolicyStore:
    def __init__(self, sources: Sequence[PolicySource], metrics: Metrics | None = None):
        self.sources = list(sources)
        self.metrics = metrics
        self.current: PolicySet | None = None
        self.errors: list[str] = []
        self.synced = False  # every source had listed its documents when the set was last compiled
        self._versions: tuple[Hashable, ...] | None = None
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Reload if a source changed; True when a new set came into force."""
        with self._lock:
            synced = all(getattr(s, "synced", True) for s in self.sources)  # read before the versions
            versions = tuple(s.version() for s in self.sources)
            if versions == self._versions:
                self.synced = synced
                return False
            self._versions = versions
            self.synced = synced
            policies: list[Document] = []
            errors: list[str] = []
            for source in self.sources:
                loaded, problems = source.load()
                policies.extend(loaded)
                errors.extend(problems)
            errors.extend(str(e) for e in duplicate_names(p for p in policies if isinstance(p, Policy)))
            if errors:
                self._reject(errors)
                return False
            self._accept(policies)
            return True

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
        policies = self.current.policies
        self.errors = []
        log.log(logging.INFO if policies else logging.WARNING,
                "policy set %d in force: %d policies%s", generation, len(policies),
                "" if policies else "; every admission request is allowed",
                extra={"fields": {"generation": generation, "policies": [p.key for p in policies]}})
        if self.metrics:
            self.metrics.policy_generation.set(generation)
            self.metrics.policy_count.set(len(policies))
            self.metrics.policy_last_reload_ok.set(1)

    def status(self) -> dict[str, Any]:
        current = self.current
        return {
            "loaded": current is not None,
            "generation": current.generation if current is not None else 0,
            "policies": [p.key for p in current.policies] if current is not None else [],
            "lastError": list(self.errors),
            "synced": self.synced,
        }


