"""The cluster's schedulable nodes, worked out once per node list rather than once per admission.

The facts hand out the same list object until a node changes (the webhook's cache replaces the list, never edits it),
so the index is kept by the list's identity: each node's labels and allocatable whole amounts parsed once, and per
resource the largest node and the sum over all, which is all a job that selects no nodes needs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from mlgate.model.workload import as_dict
from mlgate.rules.common import quantity

_KEPT = 4  # node lists: the current one, and a few a concurrent admission may still hold


class Node(NamedTuple):
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # whole amounts above zero


class NodeIndex(NamedTuple):
    nodes: tuple[Node, ...]  # schedulable ones (not cordoned)
    largest: Mapping[str, int]
    total: Mapping[str, int]


_cache: OrderedDict[int, tuple[Sequence[Mapping[str, Any]], NodeIndex]] = OrderedDict()
_lock = threading.Lock()


def node_index(listed: Sequence[Mapping[str, Any]]) -> NodeIndex:
    with _lock:
        hit = _cache.get(id(listed))
        if hit is not None and hit[0] is listed:
            return hit[1]
    index = _build(listed)
    with _lock:
        _cache[id(listed)] = (listed, index)  # the list is kept, so its id is not reused while cached
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    return index


def _build(listed: Sequence[Mapping[str, Any]]) -> NodeIndex:
    nodes = tuple(_node(n) for n in listed if not as_dict(n.get("spec")).get("unschedulable"))
    largest: dict[str, int] = {}
    total: dict[str, int] = {}
    for node in nodes:
        for resource, amount in node.allocatable.items():
            largest[resource] = max(largest.get(resource, 0), amount)
            total[resource] = total.get(resource, 0) + amount
    return NodeIndex(nodes, largest, total)


def _node(node: Mapping[str, Any]) -> Node:
    meta = as_dict(node.get("metadata"))
    labels = {str(k): str(v) for k, v in as_dict(meta.get("labels")).items()}
    amounts = {}
    for resource, value in as_dict(as_dict(node.get("status")).get("allocatable")).items():
        number = quantity(value)
        if number is not None and number >= 1:
            amounts[str(resource)] = int(number)
    return Node(str(meta.get("name") or ""), labels, amounts)
