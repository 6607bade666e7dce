"""The cluster's schedulable nodes, worked out once per node list rather than once per admission.

The facts hand out the same list object until a node changes (the webhook's cache replaces the list, never edits it),
so the index is kept by the list's identity: each node's labels and allocatable whole amounts parsed once, and per
resource the largest node and the sum over all, which is all a job that selects no nodes needs.

A node's DRA devices are not in its allocatable but in the ResourceSlices its drivers publish (resource.k8s.io/v1
`ResourceSliceSpec`: `driver`, `pool{name, generation}`, and one of `nodeName`, `allNodes`, `nodeSelector`,
`perDeviceNodeSelection`). They are counted per driver as `dra:<driver>`, from the newest generation of each pool:
every device of the driver on the node, an upper bound on what one DeviceClass of it may take, so a refusal is
never wrong. A driver with devices not bound to one node (network-attached pools) is in `dra_unbound`: its
devices are not compared.

A node's `NoSchedule` and `NoExecute` taints keep off every pod that does not tolerate them, as the scheduler's
TaintToleration filter does (k8s.io/kubernetes pkg/scheduler/framework/plugins/tainttoleration; `PreferNoSchedule`
only scores). A toleration matches as core/v1 `Toleration.ToleratesTaint` says (k8s.io/api core/v1
toleration.go): its effect, if set, equals the taint's; its key, if set, equals the taint's (an empty key with
`Exists` matches every taint); `Exists` matches any value, `Equal` (or no operator) the same value. An operator
this table does not know is taken as tolerating, so a refusal is never wrong. The taints the control plane puts on
for a node's passing condition are not counted: `node.kubernetes.io/*` (not-ready, which the TaintNodesByCondition
admission plugin adds to every new Node until its kubelet reports Ready, unreachable, memory-, disk- and
pid-pressure, network-unavailable; a cordon is `spec.unschedulable`, left out above) and the cloud provider's
`node.cloudprovider.kubernetes.io/uninitialized`: a pod waits them out, so they say nothing about whether it can
ever run.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from mlgate.model.workload import as_dict, as_list
from mlgate.rules.common import quantity

_KEPT = 4  # node lists: the current one, and a few a concurrent admission may still hold


class Taint(NamedTuple):
    key: str
    value: str
    effect: str


class Node(NamedTuple):
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # whole amounts above zero
    taints: tuple[Taint, ...] = ()  # the NoSchedule and NoExecute ones: what keeps a pod off


HARD_EFFECTS = ("NoSchedule", "NoExecute")
# condition taints (k8s.io/api core/v1 well_known_taints.go) and the cloud provider's start-up taint: passing states
_PASSING_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/uninitialized")


DRA_PREFIX = "dra:"


class NodeIndex(NamedTuple):
    nodes: tuple[Node, ...]  # schedulable ones (not cordoned)
    largest: Mapping[str, int]
    total: Mapping[str, int]
    dra_unbound: frozenset[str] = frozenset()  # drivers with devices not bound to one node
    tainted: bool = False  # some node has a NoSchedule or NoExecute taint


Listed = Sequence[Mapping[str, Any]]
_cache: OrderedDict[tuple[int, int], tuple[Listed, Listed, NodeIndex]] = OrderedDict()
_lock = threading.Lock()


def node_index(listed: Listed, slices: Listed = ()) -> NodeIndex:
    key = (id(listed), id(slices))
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is listed and hit[1] is slices:
            return hit[2]
    index = _build(listed, slices)
    with _lock:
        _cache[key] = (listed, slices, index)  # both are kept, so their ids are not reused while cached
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    return index


def _build(listed: Listed, slices: Listed) -> NodeIndex:
    devices, unbound = _dra_devices(slices)
    nodes = tuple(_with_devices(_node(n), devices) for n in listed if not as_dict(n.get("spec")).get("unschedulable"))
    largest: dict[str, int] = {}
    total: dict[str, int] = {}
    for node in nodes:
        for resource, amount in node.allocatable.items():
            largest[resource] = max(largest.get(resource, 0), amount)
            total[resource] = total.get(resource, 0) + amount
    return NodeIndex(nodes, largest, total, frozenset(unbound), any(node.taints for node in nodes))


def _dra_devices(slices: Listed) -> tuple[dict[str, dict[str, int]], set[str]]:
    """Per node, per `dra:<driver>`, the devices of the newest generation of each pool; and the drivers with
    devices not bound to one node."""
    specs = [as_dict(s.get("spec")) for s in slices]
    newest: dict[tuple[str, str], int] = {}
    for spec in specs:
        key, generation = _pool(spec)
        newest[key] = max(newest.get(key, generation), generation)
    per_node: dict[str, dict[str, int]] = {}
    unbound: set[str] = set()
    for spec in specs:
        key, generation = _pool(spec)
        if generation != newest[key]:
            continue  # an older generation the driver is replacing
        driver = key[0]
        devices = [as_dict(d) for d in spec.get("devices") or () if isinstance(d, Mapping)]
        for device in devices:
            node = spec.get("nodeName") if not spec.get("perDeviceNodeSelection") else device.get("nodeName")
            if isinstance(node, str) and node:
                counts = per_node.setdefault(node, {})
                counts[DRA_PREFIX + driver] = counts.get(DRA_PREFIX + driver, 0) + 1
            else:
                unbound.add(driver)
    return per_node, unbound


def _pool(spec: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
    pool = as_dict(spec.get("pool"))
    generation = pool.get("generation")
    return (str(spec.get("driver")), str(pool.get("name"))), generation if isinstance(generation, int) else 0


def _with_devices(node: Node, devices: dict[str, dict[str, int]]) -> Node:
    published = devices.get(node.name)
    return node._replace(allocatable={**node.allocatable, **published}) if published else node


def _node(node: Mapping[str, Any]) -> Node:
    meta = as_dict(node.get("metadata"))
    labels = {str(k): str(v) for k, v in as_dict(meta.get("labels")).items()}
    amounts = {}
    for resource, value in as_dict(as_dict(node.get("status")).get("allocatable")).items():
        number = quantity(value)
        if number is not None and number >= 1:
            amounts[str(resource)] = int(number)
    taints = tuple(Taint(str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect")))
                   for taint in as_list(as_dict(node.get("spec")).get("taints"))
                   if isinstance(taint, Mapping) and taint.get("effect") in HARD_EFFECTS
                   and not str(taint.get("key") or "").startswith(_PASSING_TAINTS))
    return Node(str(meta.get("name") or ""), labels, amounts, taints)


def tolerates_node(tolerations: Any, node: Node) -> bool:
    """Whether a pod with these tolerations may be placed on `node` as far as its taints go."""
    if not node.taints:
        return True
    given = [as_dict(t) for t in as_list(tolerations)]
    return all(any(_tolerates(toleration, taint) for toleration in given) for taint in node.taints)


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if (effect and effect != taint.effect) or (key and key != taint.key):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return str(toleration.get("value") or "") == taint.value
    return True  # an operator not known here: taken as tolerating, so no refusal rests on it
