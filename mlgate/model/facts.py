"""Cluster facts: what the engine may know about the cluster, behind one small protocol.

The engine never talks to an API server. The CLI feeds facts from a file of Kubernetes
objects; the webhook feeds them from a watch-backed cache. `NO_FACTS` stands for "nothing
known", and rules that need facts then skip rather than guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"  # Kueue plain-pod groups (site/.../plain_pods.md)


class ClusterFacts(Protocol):
    @property
    def known(self) -> bool: ...

    def namespace_labels(self, name: str) -> Mapping[str, str] | None: ...

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def storage_class(self, name: str | None) -> Mapping[str, Any] | None: ...

    def persistent_volume(self, name: str) -> Mapping[str, Any] | None:
        """A PersistentVolume (cluster-scoped): a static volume's driver is in its `spec.csi.driver`."""
        ...

    def nodes(self) -> Sequence[Mapping[str, Any]]: ...

    def training_runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A Trainer v2 TrainingRuntime (namespaced) or ClusterTrainingRuntime (namespace "")."""
        ...

    def resource_quotas(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        """The namespace's ResourceQuotas (spec.hard, spec.scopes, spec.scopeSelector, status.used)."""
        ...

    def priority_class(self, name: str) -> Mapping[str, Any] | None:
        """A PriorityClass by name."""
        ...

    def limit_ranges(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        """The namespace's LimitRanges (spec.limits)."""
        ...

    def pod_group(self, namespace: str, name: str) -> Sequence[Mapping[str, Any]] | None:
        """The Pods of a Kueue plain-pod group (label `kueue.x-k8s.io/pod-group-name`), or None when the group's
        members are not known (a webhook judges one Pod as it comes)."""
        ...

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One object of a `LOOKUP_KINDS` kind by name (namespace "" for a cluster-scoped kind)."""
        ...

    def serves(self, kind: str) -> bool:
        """Whether the facts can say an object of this `LOOKUP_KINDS` kind does not exist: the API server
        serves the kind (Kueue or DRA installed), or a facts file lists objects of its group."""
        ...

    def objects(self, kind: str) -> Sequence[Mapping[str, Any]]:
        """Every object of a `LOOKUP_KINDS` kind; the same sequence until one of them changes."""
        ...


RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
# The kinds StaticFacts.from_objects keeps by name (beside LOOKUP_KINDS, pod-group Pods and Lists of them)
FACT_KINDS = frozenset({"Namespace", "PersistentVolumeClaim", "StorageClass", "PersistentVolume", "ResourceQuota",
                        "PriorityClass", "LimitRange", "Node", *RUNTIME_KINDS})
# Kinds looked up by name, each with whether it is namespaced and the kinds a facts file shows together (a
# file with a ClusterQueue but no LocalQueue of a namespace says that namespace has none)
LOOKUP_KINDS: dict[str, tuple[bool, str]] = {
    "LocalQueue": (True, "kueue"),  # kueue.x-k8s.io/v1beta2
    "ClusterQueue": (False, "kueue"),
    "ResourceClaimTemplate": (True, "dra"),  # resource.k8s.io/v1
    "ResourceClaim": (True, "dra"),
    "DeviceClass": (False, "dra"),
    # what a node's DRA drivers publish: its own group, so that a facts file with claims but no slices is not
    # read as a cluster whose nodes have no devices
    "ResourceSlice": (False, "dra-slices"),
}


def lookup_key(kind: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a `LOOKUP_KINDS` object; a cluster-scoped one has namespace ""."""
    namespaced = LOOKUP_KINDS[kind][0]
    return (str(meta.get("namespace") or "default") if namespaced else "", str(meta.get("name") or ""))


def runtime_key(kind: str, meta: Mapping[str, Any]) -> tuple[str, str, str]:
    """How a training runtime is looked up: a ClusterTrainingRuntime has no namespace."""
    namespace = str(meta.get("namespace") or "default") if kind == "TrainingRuntime" else ""
    return kind, namespace, str(meta.get("name") or "")


@dataclass
class StaticFacts:
    """Facts from a fixed list of objects (Namespace, PersistentVolumeClaim, PersistentVolume, StorageClass, Node,
    ResourceQuota, LimitRange, PriorityClass, Trainer v2 TrainingRuntime and ClusterTrainingRuntime, Pods of Kueue
    plain-pod groups, and the `LOOKUP_KINDS`: Kueue queues, DRA claims, claim templates and device classes)."""

    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    pvcs: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    storage_classes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    pvs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    node_list: list[Mapping[str, Any]] = field(default_factory=list)
    runtimes: dict[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    pod_groups: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=dict)
    quotas: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # namespace -> ResourceQuotas
    priority_classes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    limits: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # namespace -> LimitRanges
    by_kind: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = field(default_factory=dict)  # LOOKUP_KINDS
    served_groups: set[str] = field(default_factory=set)  # LOOKUP_KINDS groups the facts cover
    # every other object, by (apiVersion, kind): a ValidatingAdmissionPolicy's params (rules/cel/params.py)
    others: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=dict)
    # `objects` answers: kind -> (the by_kind dict it was made from, its values)
    _listed: dict[str, tuple[dict[tuple[str, str], Mapping[str, Any]], tuple[Mapping[str, Any], ...]]] = field(
        default_factory=dict, compare=False, repr=False)
    known: bool = True

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> StaticFacts:
        facts = cls()
        for obj in objects:
            if not isinstance(obj, Mapping):
                continue  # a facts file is hand-written: an odd entry is not a fact
            kind = obj.get("kind")
            meta = obj.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            name = str(meta.get("name") or "")
            if kind == "Namespace":
                labels = meta.get("labels")
                labels = labels if isinstance(labels, Mapping) else {}
                facts.namespaces[name] = {str(k): str(v) for k, v in labels.items()}
            elif kind == "PersistentVolumeClaim":
                facts.pvcs[(meta.get("namespace") or "default", name)] = obj
            elif kind == "StorageClass":
                facts.storage_classes[name] = obj
            elif kind == "PersistentVolume":
                facts.pvs[name] = obj
            elif kind == "ResourceQuota":
                facts.quotas.setdefault(str(meta.get("namespace") or "default"), []).append(obj)
            elif kind == "PriorityClass":
                facts.priority_classes[name] = obj
            elif kind == "LimitRange":
                facts.limits.setdefault(str(meta.get("namespace") or "default"), []).append(obj)
            elif kind == "Node":
                facts.node_list.append(obj)
            elif kind in RUNTIME_KINDS:
                facts.runtimes[runtime_key(str(kind), meta)] = obj
            elif kind == "Pod" and (group := pod_group_of(meta)) is not None:
                facts.pod_groups.setdefault(group, []).append(obj)
            elif isinstance(kind, str) and kind in LOOKUP_KINDS:
                facts.by_kind.setdefault(kind, {})[lookup_key(kind, meta)] = obj
                facts.served_groups.add(LOOKUP_KINDS[kind][1])
            elif kind != "List":
                facts.others.setdefault((str(obj.get("apiVersion") or ""), str(kind)), []).append(obj)
            else:
                items = obj.get("items")
                nested = cls.from_objects(items if isinstance(items, list) else [])
                facts.namespaces.update(nested.namespaces)
                facts.pvcs.update(nested.pvcs)
                facts.storage_classes.update(nested.storage_classes)
                facts.pvs.update(nested.pvs)
                facts.priority_classes.update(nested.priority_classes)
                for namespace, quotas in nested.quotas.items():
                    facts.quotas.setdefault(namespace, []).extend(quotas)
                for namespace, ranges in nested.limits.items():
                    facts.limits.setdefault(namespace, []).extend(ranges)
                facts.node_list.extend(nested.node_list)
                facts.runtimes.update(nested.runtimes)
                for group, members in nested.pod_groups.items():
                    facts.pod_groups.setdefault(group, []).extend(members)
                for looked_up, keyed in nested.by_kind.items():
                    facts.by_kind.setdefault(looked_up, {}).update(keyed)
                facts.served_groups |= nested.served_groups
                for key, listed in nested.others.items():
                    facts.others.setdefault(key, []).extend(listed)
        return facts

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pvcs.get((namespace, name))

    def storage_class(self, name: str | None) -> Mapping[str, Any] | None:
        if name:
            return self.storage_classes.get(name)
        for sc in self.storage_classes.values():  # unset class: the cluster default
            annotations = (sc.get("metadata") or {}).get("annotations") or {}
            if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
                return sc
        return None

    def persistent_volume(self, name: str) -> Mapping[str, Any] | None:
        return self.pvs.get(name)

    def nodes(self) -> Sequence[Mapping[str, Any]]:
        return self.node_list

    def training_runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.runtimes.get((kind, namespace, name))

    def pod_group(self, namespace: str, name: str) -> Sequence[Mapping[str, Any]] | None:
        return self.pod_groups.get((namespace, name))

    def resource_quotas(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.quotas.get(namespace, [])

    def priority_class(self, name: str) -> Mapping[str, Any] | None:
        return self.priority_classes.get(name)

    def limit_ranges(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.limits.get(namespace, [])

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.by_kind.get(kind, {}).get((namespace if LOOKUP_KINDS[kind][0] else "", name))

    def serves(self, kind: str) -> bool:
        return LOOKUP_KINDS[kind][1] in self.served_groups

    def param_objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]:
        """The objects of a kind the facts keep for nothing else (a ValidatingAdmissionPolicy's params)."""
        return self.others.get((api_version, kind), [])

    def objects(self, kind: str) -> Sequence[Mapping[str, Any]]:
        current = self.by_kind.get(kind, {})
        listed = self._listed.get(kind)
        if listed is None or listed[0] is not current:  # the webhook's cache replaces the dict on each change
            listed = self._listed[kind] = (current, tuple(current.values()))
        return listed[1]


def pod_group_of(meta: Mapping[str, Any], namespace: str = "default") -> tuple[str, str] | None:
    """(namespace, group) of a Pod in a Kueue plain-pod group, from its metadata."""
    labels = meta.get("labels")
    group = labels.get(POD_GROUP_LABEL) if isinstance(labels, Mapping) else None
    return (str(meta.get("namespace") or namespace), str(group)) if group is not None else None


NO_FACTS = StaticFacts(known=False)


def is_fact(obj: Mapping[str, Any]) -> bool:
    """Whether StaticFacts.from_objects takes anything from this object: a kind of the facts, a Pod of a pod group,
    or a List that is empty or holds one of them."""
    kind = obj.get("kind")
    if kind == "List":
        items = obj.get("items")
        items = items if isinstance(items, list) else []
        return not items or any(is_fact(i) for i in items if isinstance(i, Mapping))
    if kind == "Pod":
        meta = obj.get("metadata")
        return pod_group_of(meta if isinstance(meta, Mapping) else {}) is not None
    return kind in FACT_KINDS or (isinstance(kind, str) and kind in LOOKUP_KINDS)
