"""The stored objects mlgate judges: every kind the engine knows that the API server serves, listed page by page.

Shared by `mlgate validate --cluster` and the audit, so both judge the same objects:
- the kinds are the policy set's catalog (the shipped table, the policies' own WorkloadKinds) plus the cluster's
  ClusterWorkloadKind objects, narrowed by `--kinds` (`Job` is every kind called Job; `Job.batch` only batch's);
- an object controlled by another judged object (a Job's Pods, a CronJob's Jobs, a JobSet's Jobs) is not judged
  on its own: its owner's templates are, as admission judged them;
- an object in a namespace labelled `mlgate.dev/ignore=true` is not judged: the shipped webhook configurations
  (manifests/webhooks.yaml, namespaceSelector) never send its writes to mlgate, so no verdict of mlgate applies;
- `metadata.managedFields` is dropped as each object arrives: no rule reads it, and it is often half the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from mlgate.kube.listing import Served, Wanted, list_items
from mlgate.kube.objects import OPT_OUT, controlled_by_judged, opted_out, slim
from mlgate.kube.watch import ApiError, Get
from mlgate.loading.policies import cluster_source, compile_kind
from mlgate.model.kinds import KindSpec
from mlgate.workloads.catalog import KindCatalog

__all__ = ["OPT_OUT", "WORKLOAD_KINDS_PATH", "KindFilterError", "cluster_workload_kinds", "controlled_by_judged",
           "opted_out", "slim", "stored_objects", "wanted_kinds"]

WORKLOAD_KINDS_PATH = "/apis/mlgate.dev/v1alpha1/clusterworkloadkinds"


class KindFilterError(ValueError):
    """A `--kinds` entry no kind of the catalog answers to."""


def cluster_workload_kinds(get: Get, warnings: list[str]) -> list[KindSpec]:
    """The cluster's ClusterWorkloadKind descriptions; one the loader refuses is a warning, and left out."""
    kinds: list[KindSpec] = []
    try:
        items = list(list_items(get, WORKLOAD_KINDS_PATH))
    except ApiError as exc:
        if exc.status == 404:  # mlgate's CRDs not installed: no descriptions
            return []
        raise
    for item in items:
        meta = item.get("metadata") or {}
        source = cluster_source("ClusterWorkloadKind", "", str(meta.get("name") or ""))
        spec, errors = compile_kind(item, source)
        warnings.extend(str(e) for e in errors)
        if spec is not None:
            kinds.append(spec)
    return kinds


def with_cluster_kinds(catalog: KindCatalog, cluster: Iterable[KindSpec], local: Iterable[KindSpec]) -> KindCatalog:
    """The catalog with the cluster's descriptions added, except where a local file describes the same kind."""
    described = {(k.group, k.kind) for k in local}
    return catalog.with_kinds(k for k in cluster if (k.group, k.kind) not in described)


def wanted_kinds(catalog: KindCatalog, names: Sequence[str] = ()) -> list[Wanted]:
    """One entry per group and kind of the catalog (versions merged), narrowed to `names` when given."""
    merged: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
    for spec in catalog.kinds:
        resource, versions = merged.get((spec.group, spec.kind), (spec.resource, ()))
        merged[(spec.group, spec.kind)] = resource, (*versions, *(v for v in spec.versions if v not in versions))
    wanted = [Wanted(group, kind, resource, versions) for (group, kind), (resource, versions) in merged.items()]
    if not names:
        return wanted
    chosen: list[Wanted] = []
    for name in names:
        kind, _, group = name.partition(".")
        hits = [w for w in wanted if w.kind.lower() == kind.lower() and (not group or w.group == group)]
        if not hits:
            known = sorted({w.kind for w in wanted})
            raise KindFilterError(f"--kinds: no kind {name!r} is known; one of: {', '.join(known)}")
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def stored_objects(get: Get, kinds: Iterable[Served], namespace: str | None, catalog: KindCatalog,
                   owned: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """Every stored object of `kinds` in `namespace` (None: all namespaces and the cluster-scoped kinds), each with
    its apiVersion and kind (a LIST leaves them out of items). Objects controlled by a judged object are counted
    in `owned[0]` instead."""
    for served in kinds:
        if namespace is not None and not served.namespaced:
            continue  # as `kubectl get -n`: one namespace holds no cluster-scoped objects
        for item in list_items(get, served.path(namespace)):
            item.setdefault("apiVersion", served.api_version)
            item.setdefault("kind", served.kind)
            if controlled_by_judged(item, catalog):
                if owned is not None:
                    owned[0] += 1
                continue
            yield slim(item)
