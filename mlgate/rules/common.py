"""Small helpers shared by rule families: resource quantities and container naming."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

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
    entries = gpu_resources(container, "limits") or gpu_resources(container, "requests")
    total = 0
    for value in entries.values():
        number = quantity(value)
        if number is not None and number == number.to_integral_value():
            total += int(number)
    return total


def pod_gpu_count(template: PodTemplate) -> int:
    """GPUs a pod holds: regular containers run together; init containers one at a time."""
    regular = init = 0
    for key, _, container in template.containers():
        if key == "containers":
            regular += gpu_count(container)
        elif key == "initContainers":
            init = max(init, gpu_count(container))
    return max(regular, init)


_CONTAINER_KINDS = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}


def container_label(key: str, container: dict[str, Any]) -> str:
    return f'{_CONTAINER_KINDS.get(key, "container")} "{container.get("name", "?")}"'
