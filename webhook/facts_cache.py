"""Cluster facts for the engine, kept current by watches and never fetched per request.

`WatchedFacts` is a `ClusterFacts` fed with plain dicts: `replace(kind, items)` after a LIST,
`apply(kind, event_type, obj)` for each watch event. The lookups are the engine's own
`StaticFacts`; this class only keeps it current under a lock. Objects are trimmed to the
fields rules read (mlgate/kube/facts.py: labels, two annotations, PVC and StorageClass specs, a PV's
driver and modes, node taints, capacity and allocatable), so a large cluster's node status (images,
conditions) is not held in memory.

Facts are `known` only once every kind has been listed: until then rules that need facts skip.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mlgate.kube.facts import KINDS, trim  # one trimming for the webhook, `mlgate facts dump` and the audit
from mlgate.model.facts import LOOKUP_KINDS, RUNTIME_KINDS, StaticFacts, lookup_key, runtime_key

NAMESPACED_LISTS = {"ResourceQuota": "quotas", "LimitRange": "limits"}  # kind -> StaticFacts field, by namespace


class WatchedFacts:
    def __init__(self) -> None:
        self._facts = StaticFacts()
        self._nodes: dict[str, Mapping[str, Any]] = {}
        self._synced: set[str] = set()
        self._unserved: set[str] = set()  # kinds whose LIST the API server answered 404 (no Kueue, no DRA)
        self._lock = threading.Lock()

    @property
    def known(self) -> bool:
        return self._synced.issuperset(KINDS)

    def synced(self) -> list[str]:
        return sorted(self._synced)

    def replace(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        """The full list of one kind, as a LIST returned it."""
        with self._lock:
            if kind == "Namespace":
                self._facts.namespaces = {}
            elif kind == "PersistentVolumeClaim":
                self._facts.pvcs = {}
            elif kind == "StorageClass":
                self._facts.storage_classes = {}
            elif kind == "PersistentVolume":
                self._facts.pvs = {}
            elif kind in NAMESPACED_LISTS:
                setattr(self._facts, NAMESPACED_LISTS[kind], {})
            elif kind == "PriorityClass":
                self._facts.priority_classes = {}
            elif kind == "Node":
                self._nodes = {}
            elif kind in RUNTIME_KINDS:
                self._facts.runtimes = {k: v for k, v in self._facts.runtimes.items() if k[0] != kind}
            elif kind in LOOKUP_KINDS:
                self._facts.by_kind[kind] = {}
            else:
                return
            for item in items:
                self._put(kind, trim(kind, item))
            self._publish_nodes(kind)
            self._synced.add(kind)
            self._unserved.discard(kind)

    def unserved(self, kind: str) -> None:
        """The API server does not serve `kind` (its LIST was a 404): rules are told so, not that none exist."""
        with self._lock:
            self._unserved.add(kind)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED or DELETED (BOOKMARK and ERROR carry no object change)."""
        if kind not in KINDS or event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        item = trim(kind, obj)
        with self._lock:
            if event_type == "DELETED":
                self._drop(kind, item)
            else:
                self._put(kind, item)
            self._publish_nodes(kind)

    def _put(self, kind: str, item: dict[str, Any]) -> None:
        meta = item["metadata"]
        name = str(meta.get("name") or "")
        if kind == "Namespace":
            self._facts.namespaces[name] = dict(meta.get("labels") or {})
        elif kind == "PersistentVolumeClaim":
            self._facts.pvcs[(str(meta.get("namespace") or "default"), name)] = item
        elif kind == "StorageClass":
            self._facts.storage_classes[name] = item
        elif kind == "PersistentVolume":
            self._facts.pvs[name] = item
        elif kind in NAMESPACED_LISTS:  # the list is replaced, never changed in place: readers may hold it
            by_namespace = getattr(self._facts, NAMESPACED_LISTS[kind])
            namespace = str(meta.get("namespace") or "default")
            kept = [q for q in by_namespace.get(namespace, []) if q["metadata"].get("name") != name]
            by_namespace[namespace] = [*kept, item]
        elif kind == "PriorityClass":
            self._facts.priority_classes[name] = item
        elif kind in RUNTIME_KINDS:
            self._facts.runtimes[runtime_key(kind, meta)] = item
        elif kind in LOOKUP_KINDS:  # the dict is replaced, never changed in place: readers may hold it
            self._facts.by_kind[kind] = {**self._facts.by_kind.get(kind, {}), lookup_key(kind, meta): item}
        else:
            self._nodes[name] = item

    def _drop(self, kind: str, item: dict[str, Any]) -> None:
        meta = item["metadata"]
        name = str(meta.get("name") or "")
        if kind == "Namespace":
            self._facts.namespaces.pop(name, None)
        elif kind == "PersistentVolumeClaim":
            self._facts.pvcs.pop((str(meta.get("namespace") or "default"), name), None)
        elif kind == "StorageClass":
            self._facts.storage_classes.pop(name, None)
        elif kind == "PersistentVolume":
            self._facts.pvs.pop(name, None)
        elif kind in NAMESPACED_LISTS:
            by_namespace = getattr(self._facts, NAMESPACED_LISTS[kind])
            namespace = str(meta.get("namespace") or "default")
            by_namespace[namespace] = [q for q in by_namespace.get(namespace, []) if q["metadata"].get("name") != name]
        elif kind == "PriorityClass":
            self._facts.priority_classes.pop(name, None)
        elif kind in RUNTIME_KINDS:
            self._facts.runtimes.pop(runtime_key(kind, meta), None)
        elif kind in LOOKUP_KINDS:
            key = lookup_key(kind, meta)
            self._facts.by_kind[kind] = {k: v for k, v in self._facts.by_kind.get(kind, {}).items() if k != key}
        else:
            self._nodes.pop(name, None)

    def _publish_nodes(self, kind: str) -> None:
        if kind == "Node":  # readers get a list that is replaced, never changed in place
            self._facts.node_list = list(self._nodes.values())

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        with self._lock:
            return self._facts.namespace_labels(name)

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.pvc(namespace, name)

    def storage_class(self, name: str | None) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.storage_class(name)

    def persistent_volume(self, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.persistent_volume(name)

    def resource_quotas(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        with self._lock:
            return self._facts.resource_quotas(namespace)

    def priority_class(self, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.priority_class(name)

    def limit_ranges(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        with self._lock:
            return self._facts.limit_ranges(namespace)

    def nodes(self) -> Sequence[Mapping[str, Any]]:
        return self._facts.node_list

    def training_runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.training_runtime(kind, namespace, name)

    def pod_group(self, namespace: str, name: str) -> Sequence[Mapping[str, Any]] | None:
        return None  # Pods are not watched: each one is judged as it comes, as one member of its group

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._facts.lookup(kind, namespace, name)

    def serves(self, kind: str) -> bool:
        with self._lock:
            return kind in self._synced and kind not in self._unserved

    def objects(self, kind: str) -> Sequence[Mapping[str, Any]]:
        with self._lock:
            return self._facts.objects(kind)

    def status(self) -> dict[str, Any]:
        return {"known": self.known, "synced": self.synced(), "nodes": len(self._facts.node_list),
                "namespaces": len(self._facts.namespaces)}
