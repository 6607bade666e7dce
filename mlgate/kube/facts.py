"""The cluster facts the engine reads, as the API server serves them and trimmed to what rules look at.

One table for every transport: the webhook's watches (webhook/kube.py, webhook/facts_cache.py), `mlgate validate
--cluster` and `mlgate facts dump` (mlgate/cli/cluster.py), and the audit. An object is trimmed to the fields rules
read (labels; the few annotations named in `ANNOTATIONS`; PVC, quota, limit range, runtime, Kueue queue and DRA
claim and class specs; a PV's driver and modes; node spec, capacity and allocatable), so nothing else is held in
memory or written to a dump: no
Secrets, no managedFields, no `kubectl.kubernetes.io/last-applied-configuration`, no node images or conditions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mlgate.kube.listing import list_items
from mlgate.kube.watch import ApiError, Get
from mlgate.model.facts import DEFAULT_CLASS_ANNOTATION, LOOKUP_KINDS, RUNTIME_KINDS
from mlgate.rules.storage_drivers import DRIVERS, PROVISIONER_ANNOTATIONS

__all__ = ["ANNOTATIONS", "FACT_PATHS", "KINDS", "read_facts", "trim"]

# kind -> the path that lists it in every namespace (core/v1, storage.k8s.io/v1, scheduling.k8s.io/v1,
# trainer.kubeflow.org/v1alpha1: not served without Kubeflow Trainer, then known to be empty)
FACT_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "PersistentVolumeClaim": "/api/v1/persistentvolumeclaims",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
    "Node": "/api/v1/nodes",
    "ResourceQuota": "/api/v1/resourcequotas",
    "LimitRange": "/api/v1/limitranges",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "TrainingRuntime": "/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes",
    "ClusterTrainingRuntime": "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
    # Kueue (v0.15 on serves v1beta2; v1beta1 is deprecated) and DRA (resource.k8s.io/v1, GA in Kubernetes 1.34):
    # not served without them, which the rules are told (`ClusterFacts.serves`)
    "LocalQueue": "/apis/kueue.x-k8s.io/v1beta2/localqueues",
    "ClusterQueue": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    "ResourceClaim": "/apis/resource.k8s.io/v1/resourceclaims",
    "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
    "ResourceSlice": "/apis/resource.k8s.io/v1/resourceslices",
}
KINDS = tuple(FACT_PATHS)
assert set(RUNTIME_KINDS) <= set(KINDS) and set(LOOKUP_KINDS) <= set(KINDS)
API_VERSIONS = {kind: path.removeprefix("/apis/").removeprefix("/api/").rsplit("/", 1)[0]
                for kind, path in FACT_PATHS.items()}
# The only annotations a rule reads from a fact: a claim's provisioner, the default StorageClass
ANNOTATIONS = frozenset((*PROVISIONER_ANNOTATIONS, DEFAULT_CLASS_ANNOTATION,
                         "storageclass.beta.kubernetes.io/is-default-class"))
_META_KEEP = ("name", "namespace", "labels")
_KEEP = {
    "Namespace": (),
    "PersistentVolumeClaim": ("spec", "status"),
    "PersistentVolume": (),  # its driver and modes only (`_pv_spec`): a cluster may hold many thousands
    "ResourceQuota": ("spec", "status"),
    "LimitRange": ("spec",),
    "PriorityClass": ("value", "globalDefault"),
    "StorageClass": ("provisioner", "parameters", "volumeBindingMode", "allowVolumeExpansion", "reclaimPolicy"),
    "Node": ("spec",),
    "TrainingRuntime": ("spec",),  # a TrainJob's pods are built from it
    "ClusterTrainingRuntime": ("spec",),
    "LocalQueue": ("spec",),
    "ClusterQueue": ("spec",),
    "ResourceClaimTemplate": ("spec",),
    "ResourceClaim": ("spec",),  # not its status: which devices it got is the scheduler's business
    "DeviceClass": ("spec",),
    "ResourceSlice": (),  # its driver, pool, node and device names only (`_slice_spec`): one or more per node
}
_NODE_STATUS_KEEP = ("capacity", "allocatable")


def trim(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` reduced to what rules read, with its kind."""
    meta = obj.get("metadata") or {}
    kept_meta = {k: meta[k] for k in _META_KEEP if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in ANNOTATIONS}
    if annotations:
        kept_meta["annotations"] = annotations
    out: dict[str, Any] = {"kind": kind, "metadata": kept_meta}
    out.update((k, obj[k]) for k in _KEEP.get(kind, ()) if k in obj)
    if kind == "Node":
        status = obj.get("status") or {}
        out["status"] = {k: status[k] for k in _NODE_STATUS_KEEP if k in status}
    elif kind == "PersistentVolume":
        out["spec"] = _pv_spec(obj.get("spec") or {})
    elif kind == "ResourceSlice":
        out["spec"] = _slice_spec(obj.get("spec") or {})
    return out


def _slice_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Where the slice's devices are (node, all nodes, a selector, or per device) and their names: not their
    attributes and capacities, which rules do not read."""
    kept: dict[str, Any] = {k: spec[k] for k in ("driver", "pool", "nodeName", "allNodes", "perDeviceNodeSelection")
                            if k in spec}
    if spec.get("nodeSelector") is not None:
        kept["nodeSelector"] = {}
    devices = spec.get("devices")
    if isinstance(devices, list):
        kept["devices"] = [{k: d[k] for k in ("name", "nodeName", "allNodes") if k in d} |
                           ({"nodeSelector": {}} if d.get("nodeSelector") is not None else {})
                           for d in devices if isinstance(d, Mapping)]
    return kept


def _pv_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Access modes, volume mode, the CSI driver's name, and which in-tree source it has (its fields dropped)."""
    kept: dict[str, Any] = {k: spec[k] for k in ("accessModes", "volumeMode") if k in spec}
    csi = spec.get("csi")
    if isinstance(csi, Mapping) and csi.get("driver"):
        kept["csi"] = {"driver": csi["driver"]}
    kept.update((source, {}) for source in DRIVERS.pv_sources if source in spec)
    return kept


def read_facts(get: Get, notes: list[str] | None = None, unserved: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every fact object of the cluster, trimmed, kind by kind, page by page. A kind the API server does not serve
    (Trainer runtimes without Kubeflow Trainer) has none, said in `notes` and added to `unserved`; any other
    refusal raises ApiError."""
    for kind, path in FACT_PATHS.items():
        try:
            for item in list_items(get, path):
                yield {"apiVersion": API_VERSIONS[kind], **trim(kind, item)}  # a document needs its apiVersion
        except ApiError as exc:
            if exc.status != 404:
                raise
            if notes is not None:
                notes.append(f"{kind} ({API_VERSIONS[kind]}) is not served: none in the facts")
            if unserved is not None:
                unserved.add(kind)
