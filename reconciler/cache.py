"""The informers' objects, so a pass reads its owner and children without a request (client-go's indexer).

- `Cache` keeps, per watched collection (apiVersion, kind, label selector key), the objects its Reflector listed
  and watched, shrunk by `shrink` (no managedFields; a pod keeps its metadata, `spec.nodeName` and status: all the
  passes read of it), so memory stays flat with thousands of pods.
- `get` and `list` answer from it once that collection has listed; a kind it does not watch (a Secret read by
  name, a namespace) or a collection not listed yet is read from the API, so a pass is never wrong, only slower.
- Write-through: the client hands every write's answer to `written` (and a DELETE to `deleted`), so the pass
  after a write sees it even before its watch event comes. An event older than what is held is ignored:
  resourceVersions are etcd revisions, compared as integers (a non-numeric one always counts as newer); a deleted
  object leaves a tombstone so a late event does not bring it back, until the next LIST.
- A DELETE marks the held object as being deleted (deletionTimestamp) rather than dropping it: the API may
  still hold it (graceful deletion), and a pass must not create a same-named child in the meantime.
A stale read costs at most a 409 (the write carried the old resourceVersion, or the child exists): the passes
treat those as "run again", as they do with direct reads.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .client import KubeClient
from .status import now_rfc3339

__all__ = ["Cache", "Collection", "Reader", "shrink"]

Collection = tuple[str, str, str]  # (apiVersion, kind, label key of the selector; "" for every object)
Key = tuple[str, str]  # (namespace, name)
POD_SPEC_READ = ("nodeName",)  # the only pod spec field a pass reads (status.py: is the pod placed)
INTERNED = 64  # strings up to this long are shared between cached objects (names, labels, phases, kinds)


class Reader(Protocol):
    """Where a pass reads: the API client itself, or the informers' cache."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]: ...


def shrink(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache keeps of an object: all but managedFields, and of a pod's spec only what a pass reads."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    out = {**obj, "metadata": meta}
    if obj.get("kind") == "Pod":
        spec = obj.get("spec") or {}
        out["spec"] = {k: spec[k] for k in POD_SPEC_READ if k in spec}
    compact: dict[str, Any] = _interned(out)
    return compact


def _interned(value: Any) -> Any:
    """The same data with its keys and short strings interned: every decoded object has its own copy of "metadata",
    "ownerReferences", label names and values, which thousands of cached pods would hold apart."""
    if isinstance(value, dict):
        return {sys.intern(str(k)): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return sys.intern(value) if isinstance(value, str) and len(value) <= INTERNED else value


def _version(obj: Mapping[str, Any]) -> int | None:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdecimal() else None


def _older(obj: Mapping[str, Any], held: int | None) -> bool:
    """`obj` is older than (or as old as) the version held; unknown versions never count as older."""
    version = _version(obj)
    return version is not None and held is not None and version < held


class Cache:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._objects: dict[Collection, dict[Key, dict[str, Any]]] = {}
        self._listed: set[Collection] = set()
        self._gone: dict[Collection, dict[Key, int | None]] = {}  # tombstones: the version deleted at

    # --- fed by the informers and the client ---------------------------------------------------------

    def replace(self, collection: Collection, items: Sequence[Mapping[str, Any]]) -> None:
        """A LIST: its items are the collection now."""
        objects = {_key(obj): shrink({"apiVersion": collection[0], "kind": collection[1], **obj}) for obj in items}
        with self._lock:
            self._objects[collection] = objects
            self._gone[collection] = {}
            self._listed.add(collection)

    def event(self, collection: Collection, event: str, obj: Mapping[str, Any]) -> None:
        """A watch event (ADDED, MODIFIED, DELETED); an older one than what is held changes nothing."""
        key = _key(obj)
        with self._lock:
            objects = self._objects.setdefault(collection, {})
            gone = self._gone.setdefault(collection, {})
            held = objects.get(key)
            if _older(obj, _version(held) if held is not None else gone.get(key)):
                return
            if event == "DELETED":
                objects.pop(key, None)
                gone[key] = _version(obj)
            else:
                objects[key] = shrink({"apiVersion": collection[0], "kind": collection[1], **obj})
                gone.pop(key, None)

    def written(self, obj: Mapping[str, Any]) -> None:
        """The API's answer to a create, patch or status update: held at once where it is watched."""
        for collection in self._collections(obj):
            self.event(collection, "MODIFIED", copy.deepcopy(obj))  # the pass goes on using its own copy

    def deleted(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """A DELETE went through: the held object is marked as being deleted until the watch says more."""
        with self._lock:
            for collection, objects in self._objects.items():
                held = objects.get((namespace, name))
                if collection[:2] == (api_version, kind) and held is not None:
                    meta = held["metadata"]
                    if not meta.get("deletionTimestamp"):
                        objects[(namespace, name)] = {**held, "metadata": {**meta, "deletionTimestamp": now_rfc3339()}}

    # --- read by the passes --------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        collection = (api_version, kind, "")
        with self._lock:
            if collection in self._listed:
                found = self._objects[collection].get((namespace, name))
                return copy.deepcopy(found) if found is not None else None
        return self.client.get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        """`selector`: "" or "key=value" (the passes' only forms); key alone names the watched collection."""
        label, _, value = selector.partition("=")
        collection = (api_version, kind, label)
        with self._lock:
            if collection in self._listed:
                return [copy.deepcopy(obj) for (ns, _), obj in sorted(self._objects[collection].items())
                        if (not namespace or ns == namespace) and (not label or _labels(obj).get(label) == value)]
        return self.client.list(api_version, kind, namespace, selector)

    def _collections(self, obj: Mapping[str, Any]) -> Sequence[Collection]:
        labels = _labels(obj)
        with self._lock:
            return [c for c in self._objects if c[:2] == (obj.get("apiVersion"), obj.get("kind"))
                    and (not c[2] or c[2] in labels)]


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels: Mapping[str, Any] = (obj.get("metadata") or {}).get("labels") or {}
    return labels
