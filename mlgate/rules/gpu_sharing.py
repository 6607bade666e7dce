"""GPU sharing resources: a memory amount, a share of cores, a time-slice replica, judged only where a policy
asks.

Fields: `resources.limits` and `resources.requests` of every init and regular container, for the resource
names the rule's `max` lists (HAMi's `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage`, `nvidia.com/gpucores`
from charts/hami/values.yaml; Intel GPU Aware Scheduling's `gpu.intel.com/millicores`, `memory.max`, `tiles`;
the k8s-device-plugin's `nvidia.com/gpu.shared` replicas).
Allowed values: whole numbers, in limits (requests, when set, equal limits: extended resources cannot be
overcommitted, https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#extended-resources),
at most `max[name]` per container. With `requireGpu`, a container that asks for a share also asks for a GPU
(`spec.gpuResources` and rules/devices.py say which names are GPUs), as HAMi's `gpumem` and `gpucores` divide
the GPUs the container is given.
These names are never counted as GPUs (rules/devices.py); this rule is their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import Field

from mlgate.model.results import Finding, Skipped
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.common import container_label, gpu_resources, quantity
from mlgate.rules.registry import Context, Params, check


class SharingParams(Params):
    max: dict[str, int] = Field(min_length=1, description="sharing resource name -> most one container may ask for")
    require_gpu: bool = Field(default=False, description="a container asking for a share also asks for a GPU")


@check("gpu.sharing", "GPU sharing resources are whole, in limits, within a maximum", SharingParams)
def sharing(workload: Workload, params: SharingParams, context: Context) -> Iterator[Finding] | Skipped:
    asked = [(t, (key, index, c)) for t in workload.templates for key, index, c in t.regular_containers()
             if _shares(c, params)]
    if not asked:
        return Skipped(f"no container asks for {', '.join(sorted(params.max))}")
    return (f for t, entry in asked for f in _container_findings(t, entry, params, context))


def _shares(container: dict[str, Any], params: SharingParams) -> dict[str, tuple[str, Any]]:
    """Each listed sharing resource the container asks for: (the section it is read from, its value)."""
    resources = container.get("resources")
    found: dict[str, tuple[str, Any]] = {}
    for section in ("requests", "limits"):  # limits win, as for GPUs
        entries = resources.get(section) if isinstance(resources, dict) else None
        if isinstance(entries, dict):
            found.update((name, (section, entries[name])) for name in params.max if name in entries)
    return found


def _container_findings(template: PodTemplate, entry: tuple[str, int, dict[str, Any]], params: SharingParams,
                        context: Context) -> Iterator[Finding]:
    key, index, container = entry
    path = template.path
    name = container_label(key, container)
    limits = gpu_resources(container, "limits", context.gpus) or gpu_resources(container, "requests", context.gpus)
    requests = (container.get("resources") or {}).get("requests") or {}
    for resource, (section, value) in sorted(_shares(container, params).items()):
        at = path(key, index, "resources", section, resource)
        number = quantity(value)
        if number is None or number != number.to_integral_value() or number < 0:
            yield Finding(at, "gpu share not whole", f"{name} asks for {resource}={value}",
                          "use a whole number, in the unit the device plugin documents")
        elif section == "requests":
            yield Finding(at, "gpu share limit missing", f"{name} sets {resource} only in requests",
                          f"set resources.limits.{resource}: {value}")
        elif resource in requests and quantity(requests[resource]) != number:
            yield Finding(path(key, index, "resources", "requests", resource), "gpu share request differs from limit",
                          f"{name} requests {requests[resource]} but limits {value} {resource}",
                          f"set requests equal to limits ({value}) or leave requests unset")
        elif number > params.max[resource]:
            yield Finding(at, "gpu share too large", f"{name} asks for {resource}={value}, the limit is "
                          f"{params.max[resource]}", f"ask for at most {params.max[resource]}")
        if params.require_gpu and not limits:
            yield Finding(at, "gpu share without a gpu", f"{name} asks for {resource} but for no GPU",
                          "ask for a GPU too (e.g. nvidia.com/gpu: 1); the share divides the GPUs given")
