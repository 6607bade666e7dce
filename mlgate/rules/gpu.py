"""GPU requests and limits.

Fields: `resources.limits` and `resources.requests` of every init and regular container,
for resource names that are GPUs: `nvidia.com/gpu`, `nvidia.com/mig-<profile>`, `amd.com/gpu` and its
partitions, `gpu.intel.com/i915`, `gpu.intel.com/xe`, and what the policy lists in `spec.gpuResources`
(`rules/devices.py` has each name's source). Sharing resources (memory, cores, time-slice replicas) are not GPUs.
Allowed values: whole numbers; GPUs must be in limits, and requests, when set, equal limits,
because extended resources cannot be overcommitted ("Schedule GPUs",
https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/, and the extended-resource
rules in https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/).
One container never mixes full GPUs and MIG devices (NVIDIA k8s-device-plugin, MIG strategy
"mixed": https://github.com/NVIDIA/k8s-device-plugin#configuration-option-details).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import Field

from mlgate.model.results import Finding, Skipped, Unchecked
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.claims import uncounted_claims
from mlgate.rules.common import (
    container_label,
    job_gpu_count,
    pod_gpu_count,
    quantity,
    regular_gpus,
    template_gpus,
)
from mlgate.rules.devices import FULL_GPU, GpuResources, is_mig
from mlgate.rules.registry import Context, Params, check


@check("gpu.limits", "GPUs are whole numbers in limits; requests, if set, equal limits")
def limits(workload: Workload, params: Params, context: Context) -> Iterator[Finding]:
    for template in workload.templates:
        for key, index, container, limited, requested, _ in regular_gpus(template, context.gpus):
            if not (requested or limited):
                continue
            name = container_label(key, container)
            for resource in sorted(set(requested) | set(limited)):
                section = "limits" if resource in limited else "requests"
                value = limited.get(resource, requested.get(resource))
                number = quantity(value)
                if number is None or number != number.to_integral_value() or number < 0:
                    yield Finding(template.path(key, index, "resources", section, resource), "gpu count not whole",
                                  f"{name} asks for {resource}={value}",
                                  "use a whole number such as 1; for a fraction of a GPU use a MIG profile")
                elif resource not in limited:
                    yield Finding(template.path(key, index, "resources", section, resource), "gpu limit missing",
                                  f"{name} sets {resource} only in requests",
                                  f"set resources.limits.{resource}: {value}")
                elif resource in requested and quantity(requested[resource]) != number:
                    yield Finding(
                        template.path(key, index, "resources", "requests", resource),
                        "gpu request differs from limit",
                        f"{name} requests {requested[resource]} but limits {value} {resource}",
                        f"set requests equal to limits ({value}) or leave requests unset",
                    )


class MaxParams(Params):
    per_container: int | None = Field(default=None, ge=0, description="GPUs one container may ask for")
    per_pod: int | None = Field(default=None, ge=0, description="GPUs one pod may hold at once")
    per_job: int | None = Field(default=None, ge=0, description="GPUs all of a job's pods may hold at once")


@check("gpu.max", "at most N GPUs per container, per pod and per job", MaxParams)
def maximum(workload: Workload, params: MaxParams, context: Context) -> Iterator[Finding | Unchecked]:
    for template in workload.templates:
        if params.per_container is not None:
            for key, index, container, limited, requested, count in regular_gpus(template, context.gpus):
                if count > params.per_container:
                    where: tuple[str, ...] = ("limits", _counted(limited)) if limited else \
                        ("requests", _counted(requested)) if requested else ("claims",)  # only DRA claims
                    yield Finding(template.path(key, index, "resources", *where),
                                  "too many gpus per container",
                                  f"{container_label(key, container)} asks for {count} GPUs, the limit is "
                                  f"{params.per_container}", "split the work across more replicas")
        pod_total = pod_gpu_count(template, context.gpus)
        if params.per_pod is not None and pod_total > params.per_pod:
            yield Finding(template.path("containers"), "too many gpus per pod",
                          f"{'the pod asks' if template.role == 'pod' else f'{template.role} pods ask'} for "
                          f"{pod_total} GPUs, the limit is {params.per_pod}",
                          "use fewer GPUs per pod and more replicas")
    job_total = job_gpu_count(workload.templates, context.gpus) if params.per_job is not None else 0
    if params.per_job is not None and workload.pods_counted and job_total > params.per_job:
        yield Finding("/spec", "too many gpus per job",
                      f"{workload.kind} {workload.name!r} asks for {job_total} GPUs in all, "
                      f"the limit is {params.per_job}", "lower replicas or GPUs per replica")
    yield from uncounted_claims(workload, context.gpus)


class AllowedParams(Params):
    allowed: list[str] = Field(min_length=1, description="resource names or shell patterns")


@check("gpu.allowed-resources", "only the listed GPU resource names", AllowedParams)
def allowed(workload: Workload, params: AllowedParams, context: Context) -> Iterator[Finding]:
    for template, key, index, container, resource, section in _gpu_entries(workload, context.gpus):
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in params.allowed):
            yield Finding(template.path(key, index, "resources", section, resource),
                          "gpu resource not allowed", f"{container_label(key, container)} asks for {resource}",
                          f"use one of: {', '.join(params.allowed)}")


@check("gpu.no-mixed-mig", "one container never mixes full GPUs and MIG devices")
def no_mixed(workload: Workload, params: Params, context: Context) -> Iterator[Finding] | Skipped:
    if not any(gpus.total for t in workload.templates for gpus in template_gpus(t, context.gpus)):
        return Skipped("no container asks for GPUs")
    return _mixed(workload, context.gpus)


def _mixed(workload: Workload, gpus: GpuResources) -> Iterator[Finding]:
    for template in workload.templates:
        for key, index, container, limited, requested, _ in regular_gpus(template, gpus):
            names = set(limited) | set(requested)
            migs = sorted(n for n in names if is_mig(n))
            if FULL_GPU in names and migs:
                yield Finding(template.path(key, index, "resources"), "gpu and mig mixed",
                              f"{container_label(key, container)} asks for {FULL_GPU} and {', '.join(migs)}",
                              "ask for either whole GPUs or MIG devices, in separate containers or pods")


def _counted(entries: Mapping[str, Any]) -> str:
    """The resource a container's GPU count comes from: a whole-GPU one if any (see `common._whole_gpus`)."""
    return next((r for r in entries if not is_mig(r)), next(iter(entries)))


def _gpu_entries(
    workload: Workload, gpus: GpuResources,
) -> Iterator[tuple[PodTemplate, str, int, dict[str, Any], str, str]]:
    for template in workload.templates:
        for key, index, container, limited, requested, _ in regular_gpus(template, gpus):
            for section, entries in (("limits", limited), ("requests", requested)):
                for resource in entries:
                    yield template, key, index, container, resource, section
