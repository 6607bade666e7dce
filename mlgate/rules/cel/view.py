"""What CEL validations see besides the object: mlgate's workload view, each pod template and each container.

The workload view is counted by the rules' own code, so an expression and a built-in rule never disagree:
`workload.pods` is the job's pods as gang.size counts them (the replicas of every template; null where the kind's
pods are not counted, as for unknown kinds), and `workload.gpus` is what gpu.max counts (`rules/common.py`:
limits, else requests, of init and regular containers, sidecars held beside the rest, DRA claims included).
"""

from __future__ import annotations

from typing import Any

from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.cel.served import guess_resource
from mlgate.rules.common import job_gpu_count, pod_gpu_count, regular_gpus
from mlgate.rules.devices import GpuResources

__all__ = ["container_views", "namespace_object", "request_view", "template_view", "workload_view"]


def workload_view(workload: Workload, gpus: GpuResources) -> dict[str, Any]:
    templates = workload.templates
    per_pod = [pod_gpu_count(t, gpus) for t in templates]
    per_container = [count for t in templates for *_, count in regular_gpus(t, gpus)]
    return {
        "kind": workload.kind,
        "apiVersion": workload.api_version,
        "name": workload.name,
        "namespace": workload.namespace,
        "pods": workload.total_replicas if workload.pods_counted else None,
        "roles": [{"name": t.role, "replicas": t.replicas, "gpusPerPod": n} for t, n in zip(templates, per_pod,
                                                                                                strict=True)],
        "gpus": {"perJob": job_gpu_count(templates, gpus) if workload.pods_counted else None,
                 "maxPerPod": max(per_pod, default=0), "maxPerContainer": max(per_container, default=0)},
    }


def template_view(template: PodTemplate) -> dict[str, Any]:
    """The pod as it will run: `{role, replicas, metadata, spec}`."""
    return {"role": template.role, "replicas": template.replicas, "metadata": template.metadata,
            "spec": template.spec}


def container_views(template: PodTemplate) -> list[tuple[str, int, dict[str, Any]]]:
    """Every container of the pod (init, regular and ephemeral, as pod security visits them), with its list and
    index for the finding's path."""
    return list(template.containers())


def request_view(workload: Workload, operation: str) -> dict[str, Any]:
    """VAP's `request`, as far as an offline judgement knows it: no user, never a dry run."""
    group, _, version = workload.api_version.rpartition("/")
    return {"operation": operation, "name": workload.name, "namespace": workload.namespace,
            "kind": {"group": group, "version": version, "kind": workload.kind},
            "resource": {"group": group, "version": version, "resource": guess_resource(workload.kind)},
            "userInfo": {}, "dryRun": False}


def namespace_object(namespace: str, facts: ClusterFacts) -> dict[str, Any] | None:
    """VAP's `namespaceObject` from the cluster facts: its name and labels; null where the facts do not know it
    (then an expression that reads it errs, and failurePolicy decides, as with no facts at all)."""
    labels = facts.namespace_labels(namespace) if facts.known else None
    if labels is None:
        return None
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": dict(labels)}}
