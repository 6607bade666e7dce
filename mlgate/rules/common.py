"""Small helpers shared by rule families: resource quantities, what a pod holds at once, and container naming.

What a pod holds at once follows the Kubernetes rule for init containers and native sidecars (KEP-753
"Exposing Pod Resource Requirements"; `resourcehelper.PodRequests` in k8s.io/component-helpers): regular
containers and restartable init containers (`restartPolicy: Always`) run together and add up; every other init
container runs alone, next to the sidecars started before it; the pod needs the larger of the two. Ephemeral
containers count for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar

from mlgate.model.workload import PodTemplate
from mlgate.rules import claims
from mlgate.rules.devices import BUILT_IN, GpuResources, is_mig

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|[kMGTPE]i?|)$")
# A non-empty label value, or the name part of a qualified name (resource names, label keys); apimachinery
# `validation.IsValidLabelValue` / `IsQualifiedName`: at most 63 alphanumerics, '-', '_' and '.', alphanumeric
# at both ends
NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SIDECAR_RESTART_POLICY = "Always"  # an init container with it is a native sidecar
_GPUS = "gpus"
Amount = TypeVar("Amount", int, Decimal)


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity as a number (`500m` = 0.5, `1Gi` = 2**30), or None if malformed."""
    if isinstance(value, str | int | float):
        return _scalar_quantity(value)
    return _parse_quantity(value)


@lru_cache(maxsize=1024, typed=True)
def _scalar_quantity(value: str | int | float) -> Decimal | None:
    # every rule reads the same few GPU counts on every object; True and 1 are kept apart
    return _parse_quantity(value)


def _parse_quantity(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = Decimal(str(value))
        # inf and nan are no quantity (YAML's .inf, or 1e400 read as a float); the rules compare and int() counts
        return number if number.is_finite() else None
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        return None
    unit = match.group(2)
    return number / 1000 if unit == "m" else number * _SUFFIX[unit]


def is_qualified_name(name: str) -> bool:
    """`[prefix/]name` as Kubernetes requires of resource names: a DNS subdomain prefix and a 63-character name part."""
    prefix, _, part = name.rpartition("/")
    return bool(NAME_PART.match(part)) and (not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))))


def gpu_resources(container: dict[str, Any], section: str, gpus: GpuResources = BUILT_IN) -> dict[str, Any]:
    """The GPU entries of resources.<section> (limits or requests): names in `gpus` (rules/devices.py)."""
    resources = container.get("resources")
    entries = resources.get(section) if isinstance(resources, dict) else None
    if not isinstance(entries, dict) or not entries:
        return {}
    return {k: v for k, v in entries.items() if k in gpus}


def _whole_gpus(entries: Mapping[str, Any]) -> int:
    """Whole GPUs; MIG devices count one each only where no whole GPU is asked for. A MIG device is a slice of one
    GPU, so a container that asks for both (gpu.no-mixed-mig refuses it) is not counted 12 + 1 = 13 GPUs."""
    whole = slices = 0
    for resource, value in entries.items():
        number = quantity(value)
        if number is not None and number == number.to_integral_value():
            if is_mig(resource):
                slices += int(number)
            else:
                whole += int(number)
    return whole or slices


class ContainerGpus(NamedTuple):
    """One container's GPU resources (`gpu_resources` of limits and of requests) and the GPUs it counts
    (`_whole_gpus`, plus those its DRA claims reach: rules/claims.py)."""

    key: str  # initContainers, containers or ephemeralContainers
    position: int  # index in that list (`index` and `count` are tuple methods)
    container: dict[str, Any]
    limits: Mapping[str, Any]  # shared by every rule that reads the template: never edit
    requests: Mapping[str, Any]
    total: int


def template_gpus(template: PodTemplate, gpus: GpuResources = BUILT_IN) -> tuple[ContainerGpus, ...]:
    """The GPUs of every container that asks for any, in `containers()` order; worked out once per template
    (until its next write) for the many GPU, MIG and defaults rules that read them."""
    return template.derived(_views(gpus).every)


def regular_gpus(template: PodTemplate, gpus: GpuResources = BUILT_IN) -> tuple[ContainerGpus, ...]:
    """`template_gpus` of init and regular containers only, as `regular_containers()`."""
    return template.derived(_views(gpus).regular)


def pod_gpu_count(template: PodTemplate, gpus: GpuResources = BUILT_IN) -> int:
    """GPUs a pod holds at once (`pod_effective`): sidecars beside the regular containers, init containers apart;
    and the GPUs of its DRA claims, each claim once, since a claim is the pod's however many containers use it."""
    return template.derived(_views(gpus).held)


def job_gpu_count(templates: Iterable[PodTemplate], gpus: GpuResources = BUILT_IN) -> int:
    """GPUs all of a job's pods hold at once: each pod's, times its replicas, but a ResourceClaim named by several
    pods only once, since they share its devices."""
    total, shared = 0, {}
    for template in templates:
        held = pod_gpu_count(template, gpus)
        if template.spec.get("resourceClaims"):
            named = dict(claims.pod_gpus(template, gpus).shared)
            held -= sum(named.values())
            shared.update(named)
        total += held * template.replicas
    return total + sum(shared.values())


class _Views(NamedTuple):
    """The `PodTemplate.derived` functions for one set of GPU names: each set gets its own functions, which are
    the cache keys, so two policies that count different names never share a cached answer."""

    every: Callable[[PodTemplate], tuple[ContainerGpus, ...]]
    regular: Callable[[PodTemplate], tuple[ContainerGpus, ...]]
    held: Callable[[PodTemplate], int]


@lru_cache(maxsize=256)
def _views(gpus: GpuResources) -> _Views:
    def every(template: PodTemplate) -> tuple[ContainerGpus, ...]:
        found = []
        for key, index, container in template.containers():
            limits, requests = gpu_resources(container, "limits", gpus), gpu_resources(container, "requests", gpus)
            claimed = claims.container_gpus(template, container, gpus).gpus if template.spec.get("resourceClaims") \
                else 0
            if limits or requests or claimed:  # a container that asks for no GPU adds nothing any GPU rule reads
                found.append(ContainerGpus(key, index, container, limits, requests,
                                           _whole_gpus(limits or requests) + claimed))
        return tuple(found)

    def regular(template: PodTemplate) -> tuple[ContainerGpus, ...]:
        return tuple(g for g in template.derived(every) if g.key != "ephemeralContainers")

    def held(template: PodTemplate) -> int:
        counted = pod_effective((g.key, g.container, {_GPUS: _whole_gpus(g.limits or g.requests)})
                                for g in template.derived(every))
        claimed = claims.pod_gpus(template, gpus).gpus if template.spec.get("resourceClaims") else 0
        return counted.get(_GPUS, 0) + claimed

    return _Views(every, regular, held)


def is_sidecar(key: str, container: Mapping[str, Any]) -> bool:
    """A restartable init container (native sidecar): it keeps running beside the regular containers."""
    return key == "initContainers" and container.get("restartPolicy") == SIDECAR_RESTART_POLICY


def pod_effective(
    parts: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Amount]]],
) -> dict[str, Amount]:
    """Per resource, what a pod holds at once, from (container list key, container, its amounts) in spec order;
    the rule is in the module docstring."""
    together: dict[str, Amount] = {}  # regular containers and every sidecar
    sidecars: dict[str, Amount] = {}  # sidecars started so far
    init_peak: dict[str, Amount] = {}
    for key, container, amounts in parts:
        if key == "containers":
            _add(together, amounts)
        elif is_sidecar(key, container):
            _add(together, amounts)
            _add(sidecars, amounts)
            _keep_max(init_peak, sidecars)
        elif key == "initContainers":
            alone = dict(sidecars)
            _add(alone, amounts)
            _keep_max(init_peak, alone)
    _keep_max(together, init_peak)
    return together


def _add(into: dict[str, Amount], amounts: Mapping[str, Amount]) -> None:
    for resource, amount in amounts.items():
        into[resource] = into[resource] + amount if resource in into else amount


def _keep_max(into: dict[str, Amount], amounts: Mapping[str, Amount]) -> None:
    for resource, amount in amounts.items():
        if resource not in into or amount > into[resource]:
            into[resource] = amount


_CONTAINER_KINDS = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}


def container_label(key: str, container: dict[str, Any]) -> str:
    return f'{_CONTAINER_KINDS.get(key, "container")} "{container.get("name", "?")}"'
