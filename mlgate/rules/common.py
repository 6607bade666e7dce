"""Small helpers shared by rule families: resource quantities and container naming."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, NamedTuple

from mlgate.model.workload import PodTemplate

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")
MIG_PREFIX = "nvidia.com/mig-"
_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|[kMGTPE]i?|)$")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


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
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        return None
    unit = match.group(2)
    return number / 1000 if unit == "m" else number * _SUFFIX[unit]


def gpu_resources(container: dict[str, Any], section: str) -> dict[str, Any]:
    """GPU-like entries of resources.<section> (limits or requests)."""
    resources = container.get("resources")
    entries = resources.get(section) if isinstance(resources, dict) else None
    if not isinstance(entries, dict) or not entries:
        return {}
    return {k: v for k, v in entries.items() if str(k).startswith(GPU_RESOURCE_PREFIXES)}


def gpu_count(container: dict[str, Any]) -> int:
    """Whole GPUs (or MIG slices) a container asks for: its limits, else its requests."""
    return _whole_gpus(gpu_resources(container, "limits") or gpu_resources(container, "requests"))


def _whole_gpus(entries: Mapping[str, Any]) -> int:
    total = 0
    for value in entries.values():
        number = quantity(value)
        if number is not None and number == number.to_integral_value():
            total += int(number)
    return total


class ContainerGpus(NamedTuple):
    """One container's GPU-like resources (`gpu_resources` of limits and of requests) and its `gpu_count`."""

    key: str  # initContainers, containers or ephemeralContainers
    position: int  # index in that list (`index` and `count` are tuple methods)
    container: dict[str, Any]
    limits: Mapping[str, Any]  # shared by every rule that reads the template: never edit
    requests: Mapping[str, Any]
    total: int


def template_gpus(template: PodTemplate) -> tuple[ContainerGpus, ...]:
    """Every container's GPUs, in `containers()` order; worked out once per template (until its next write)
    for the many GPU, MIG and defaults rules that read them."""
    return template.derived(_template_gpus)


def regular_gpus(template: PodTemplate) -> tuple[ContainerGpus, ...]:
    """`template_gpus` of init and regular containers only, as `regular_containers()`."""
    return template.derived(_regular_gpus)


def _template_gpus(template: PodTemplate) -> tuple[ContainerGpus, ...]:
    found = []
    for key, index, container in template.containers():
        limits, requests = gpu_resources(container, "limits"), gpu_resources(container, "requests")
        found.append(ContainerGpus(key, index, container, limits, requests, _whole_gpus(limits or requests)))
    return tuple(found)


def _regular_gpus(template: PodTemplate) -> tuple[ContainerGpus, ...]:
    return tuple(g for g in template_gpus(template) if g.key != "ephemeralContainers")


def pod_gpu_count(template: PodTemplate) -> int:
    """GPUs a pod holds: regular containers run together; init containers one at a time."""
    return template.derived(_pod_gpu_count)


def _pod_gpu_count(template: PodTemplate) -> int:
    regular = init = 0
    for gpus in template_gpus(template):
        if gpus.key == "containers":
            regular += gpus.total
        elif gpus.key == "initContainers":
            init = max(init, gpus.total)
    return max(regular, init)


_CONTAINER_KINDS = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}


def container_label(key: str, container: dict[str, Any]) -> str:
    return f'{_CONTAINER_KINDS.get(key, "container")} "{container.get("name", "?")}"'
