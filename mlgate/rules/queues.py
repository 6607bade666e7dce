"""Kueue queues: a job sent to a queue that cannot admit it stays suspended for ever.

Fields: the object's label `kueue.x-k8s.io/queue-name`, on kinds whose description lists kueue in
`gang.queueLabelFor` (Kueue reads it off the job itself) and on a bare Pod; each template's GPU requests
(requests default to limits) and replicas. Cluster facts: LocalQueues (`spec.clusterQueue`), ClusterQueues
(`spec.namespaceSelector`, `spec.resourceGroups[].coveredResources` and `flavors[].resources[].{name,nominalQuota}`,
`spec.cohortName` in v1beta2 or `spec.cohort` in v1beta1, `spec.stopPolicy`) and the namespace's labels.
Allowed values (kueue v0.19 `apis/kueue/v1beta2`, `pkg/scheduler/flavorassigner`, site docs "Cluster Queue"):
- capacity.queue: the LocalQueue exists in the job's namespace, and its ClusterQueue exists, is not stopped, and
  selects the namespace (a null `namespaceSelector` selects none). Otherwise Kueue keeps the job suspended.
- capacity.queue-gpus: every GPU resource the pods ask for is covered by a resource group of the ClusterQueue;
  and, with no cohort to borrow from, each pod set's GPUs fit one flavor's `nominalQuota` (Kueue gives a pod
  set one flavor per resource group) and the whole job fits the flavors together.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from mlgate.model.policy import LabelSelector
from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import PodTemplate, Workload, as_dict, as_list
from mlgate.rules.capacity import pod_amounts, show
from mlgate.rules.common import quantity
from mlgate.rules.registry import Context, NoParams, check

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_STOPPED = ("Hold", "HoldAndDrain")


def _queues(workload: Workload, context: Context) -> tuple[str, Mapping[str, Any] | None,
                                                             Mapping[str, Any] | None] | Skipped:
    """The queue name, its LocalQueue and its ClusterQueue (None where missing), or why the rule cannot look."""
    name = workload.labels.get(QUEUE_LABEL)
    if not name:
        return Skipped(f"no {QUEUE_LABEL} label")
    # Kueue reads the label off the job (kinds list it in queueLabelFor), or off a bare Pod, which is its template
    bare_pod = any(t.meta_pointer == "/metadata" for t in workload.templates)
    if "kueue" not in workload.gang.queueLabelFor and not bare_pod:
        return Skipped(f"Kueue does not read the queue label of a {workload.kind}")
    if not context.facts.known:
        return Skipped("no cluster facts to find Kueue's queues in", looked=False)
    if not context.facts.serves("LocalQueue"):
        return Skipped("the cluster facts hold no Kueue queues (Kueue is not installed, or a facts file lists "
                       "no LocalQueue or ClusterQueue)", looked=False)
    local = context.facts.lookup("LocalQueue", workload.namespace or "default", name)
    cluster_name = str(as_dict(as_dict(local).get("spec")).get("clusterQueue") or "") if local else ""
    cluster = context.facts.lookup("ClusterQueue", "", cluster_name) if cluster_name else None
    return name, local, cluster


@check("capacity.queue", "a Kueue queue-name names a LocalQueue whose ClusterQueue admits the namespace", NoParams)
def queue(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    found = _queues(workload, context)
    if isinstance(found, Skipped):
        return found
    name, local, cluster = found
    namespace = workload.namespace or "default"
    path = "/metadata/labels/" + QUEUE_LABEL.replace("/", "~1")
    if local is None:
        return [Finding(path, "local queue not found", f'LocalQueue "{name}" does not exist in namespace '
                        f"{namespace}, so Kueue keeps {workload.kind} {workload.name!r} suspended",
                        "use a LocalQueue of the namespace (kubectl get localqueues -n "
                        f"{namespace}), or have one created")]
    cluster_name = str(as_dict(local.get("spec")).get("clusterQueue") or "")
    if cluster is None:
        return [Finding(path, "cluster queue not found", f'LocalQueue "{name}" points to ClusterQueue '
                        f'"{cluster_name}", which does not exist, so the job stays suspended',
                        "have the LocalQueue point to a ClusterQueue that exists")]
    spec = as_dict(cluster.get("spec"))
    if spec.get("stopPolicy") in _STOPPED:
        return [Finding(path, "cluster queue stopped", f'ClusterQueue "{cluster_name}" has stopPolicy '
                        f"{spec['stopPolicy']}, so it admits no new job", "wait until it is resumed, or use "
                        "another queue")]
    selector = spec.get("namespaceSelector")
    labels = dict(context.facts.namespace_labels(namespace) or {})
    if selector is None or not _selects(as_dict(selector), labels):
        return [Finding(path, "namespace not admitted", f'ClusterQueue "{cluster_name}" (of LocalQueue "{name}") '
                        f"does not select namespace {namespace} with its namespaceSelector, so Kueue never admits "
                        "the job", "use a queue whose ClusterQueue admits this namespace")]
    return []


def _selects(selector: Mapping[str, Any], labels: dict[str, str]) -> bool:
    try:
        return LabelSelector.model_validate(selector).matches(labels)
    except ValueError:
        return False  # the API server would not have stored it; Kueue treats it as selecting nothing


@check("capacity.queue-gpus", "the job's ClusterQueue has flavors for its GPUs, large enough for it", NoParams)
def queue_gpus(workload: Workload, params: NoParams, context: Context) -> list[Finding] | Skipped:
    found = _queues(workload, context)
    if isinstance(found, Skipped):
        return found
    name, _, cluster = found
    if cluster is None:
        return Skipped("the queue has no ClusterQueue (capacity.queue says so)")
    asked = [(t, gpus) for t in workload.templates
             if (gpus := {r: a for r, a in pod_amounts(t, "requests").items() if r in context.gpus and a > 0})]
    if not asked:
        return Skipped("no pod asks for GPUs")
    spec = as_dict(cluster.get("spec"))
    cluster_name = str(as_dict(cluster.get("metadata")).get("name") or "?")
    covered = {str(r) for g in as_list(spec.get("resourceGroups")) for r in as_list(as_dict(g).get("coveredResources"))}
    quotas = _flavor_quotas(spec)
    findings: list[Finding] = []
    for resource in sorted({r for _, gpus in asked for r in gpus}):
        if resource not in covered:
            findings.append(Finding("/metadata/labels/" + QUEUE_LABEL.replace("/", "~1"), "no gpu flavor",
                                    f'ClusterQueue "{cluster_name}" (of LocalQueue "{name}") covers no {resource}, '
                                    "so Kueue never admits the job", f"use a queue with a flavor for {resource}"))
    if findings or spec.get("cohortName") or spec.get("cohort"):
        return findings  # in a cohort it may borrow: how much is the cohort's business
    for template, gpus in asked:
        for resource, per_pod in sorted(gpus.items()):
            flavors = quotas.get(resource)
            if not flavors:
                continue  # covered, but no flavor gives a quota mlgate can read: not judged by size
            largest = max(flavors.values())
            if per_pod * template.replicas > largest:
                findings.append(Finding(template.path("containers"), "queue flavor too small",
                                        f"{_who(template)} for {show(per_pod * template.replicas)} {resource}, but "
                                        "the largest flavor of "
                                        f'ClusterQueue "{cluster_name}" has a nominal quota of {show(largest)} '
                                        f"({_listed(flavors)})", "ask for fewer GPUs, or use a larger queue"))
    if not findings:
        findings += _whole_job(workload, asked, quotas, cluster_name)
    return findings


def _flavor_quotas(spec: Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """Per resource, each flavor's nominal quota of it."""
    quotas: dict[str, dict[str, Decimal]] = {}
    for group in as_list(spec.get("resourceGroups")):
        for flavor in as_list(as_dict(group).get("flavors")):
            for resource in map(as_dict, as_list(as_dict(flavor).get("resources"))):
                amount = quantity(resource.get("nominalQuota"))
                if amount is not None:  # the API server stores only quantities; a facts file may hold anything
                    quotas.setdefault(str(resource.get("name")), {})[str(as_dict(flavor).get("name"))] = amount
    return quotas


def _whole_job(workload: Workload, asked: list[tuple[PodTemplate, dict[str, Decimal]]],
               quotas: dict[str, dict[str, Decimal]], cluster_name: str) -> Iterator[Finding]:
    totals: dict[str, Decimal] = {}
    for template, gpus in asked:
        for resource, per_pod in gpus.items():
            totals[resource] = totals.get(resource, Decimal(0)) + per_pod * template.replicas
    for resource, total in sorted(totals.items()):
        have = sum(quotas.get(resource, {}).values(), Decimal(0))
        if workload.pods_counted and resource in quotas and total > have:
            yield Finding("/spec", "queue too small", f"{workload.kind} {workload.name!r} asks for {show(total)} "
                          f'{resource} in all, but ClusterQueue "{cluster_name}" has {show(have)} in all of its '
                          f"flavors ({_listed(quotas.get(resource, {}))})", "lower the replicas or GPUs per pod")


def _who(template: PodTemplate) -> str:
    return "the pod asks" if template.role == "pod" else f"the {template.replicas} {template.role} pods ask"


def _listed(flavors: Mapping[str, Decimal]) -> str:
    return ", ".join(f"{name}: {show(amount)}" for name, amount in sorted(flavors.items()))
