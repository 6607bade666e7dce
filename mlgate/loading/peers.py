"""Objects of one input judged together: the Pods of a Kueue plain-pod group.

A Pod of such a group is one member of a group whose size it cannot see alone (the webhook judges it so). When
the CLI is given several members in one input, gang.size judges them together through the facts protocol
(`ClusterFacts.pod_group`): the members must agree on the total count and be no more than it says.
Only files that mention the group label are parsed twice; standard input is read once, so its Pods are judged
one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlgate.loading.documents import InputError, expand, read_documents
from mlgate.model.facts import POD_GROUP_LABEL, ClusterFacts, pod_group_of

_MARK = POD_GROUP_LABEL.encode()


@dataclass(frozen=True)
class WithPodGroups:
    """`facts`, with the Kueue pod groups found in the input beside them."""

    facts: ClusterFacts
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.facts.known

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.facts.namespace_labels(name)

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.facts.pvc(namespace, name)

    def storage_class(self, name: str | None) -> Mapping[str, Any] | None:
        return self.facts.storage_class(name)

    def persistent_volume(self, name: str) -> Mapping[str, Any] | None:
        return self.facts.persistent_volume(name)

    def nodes(self) -> Sequence[Mapping[str, Any]]:
        return self.facts.nodes()

    def training_runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.facts.training_runtime(kind, namespace, name)

    def resource_quotas(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.facts.resource_quotas(namespace)

    def priority_class(self, name: str) -> Mapping[str, Any] | None:
        return self.facts.priority_class(name)

    def limit_ranges(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.facts.limit_ranges(namespace)

    def pod_group(self, namespace: str, name: str) -> Sequence[Mapping[str, Any]] | None:
        return self.groups.get((namespace, name)) or self.facts.pod_group(namespace, name)

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.facts.lookup(kind, namespace, name)

    def serves(self, kind: str) -> bool:
        return self.facts.serves(kind)

    def objects(self, kind: str) -> Sequence[Mapping[str, Any]]:
        return self.facts.objects(kind)


def with_pod_groups(facts: ClusterFacts, paths: Iterable[str], namespace: str) -> ClusterFacts:
    """`facts` and the Kueue pod groups of the Pods in `paths` (a Pod without a namespace is in `namespace`)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    try:
        sources = [s for s in expand(paths) if s != "-" and _mentions_group(s)]
        for document in read_documents(sources):
            for obj in _objects(document.data):
                meta = obj.get("metadata")
                group = pod_group_of(meta, namespace) if obj.get("kind") == "Pod" and isinstance(meta, dict) else None
                if group is not None:
                    groups.setdefault(group, []).append(obj)
    except InputError:
        return facts  # reading the input proper reports it
    return WithPodGroups(facts, groups) if groups else facts


def _mentions_group(source: str) -> bool:
    try:
        with open(source, "rb") as handle:
            return _MARK in handle.read()
    except OSError:
        return False


def _objects(data: Any) -> Iterable[dict[str, Any]]:
    if not isinstance(data, dict):
        return ()
    if data.get("kind") == "List" and isinstance(data.get("items"), list):
        return [item for item in data["items"] if isinstance(item, dict)]
    return (data,)
