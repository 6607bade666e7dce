"""The safety net for kinds no description knows: every pod spec in the object is found and judged.

A pod spec is any mapping with a `containers` list whose mappings carry an `image`. One under a `spec` key
whose parent also holds `metadata` (or is a `template`) is read as a PodTemplateSpec, so its labels count.
Each is judged as one pod: the kind's replica counts are unknown, and rules that need them skip.
The walk is iterative (no depth limit to hit); in a pod spec it found, only fields that are not the pod's own
containers or volumes are searched further. An object with no `containers` key anywhere is not walked at all.
"""

from __future__ import annotations

from typing import Any

import orjson

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate
from mlgate.workloads.templates import raw_template

_SKIP = frozenset(("status", "managedFields"))  # what the server writes back, never a template to admit
_POD_SKIP = _SKIP | {"containers", "initContainers", "ephemeralContainers", "volumes"}


def pod_spec_pointers(obj: dict[str, Any]) -> list[tuple[str, bool]]:
    """(pointer, is a PodTemplateSpec) of each pod spec in `obj`, in document order."""
    if not _may_hold_pod_spec(obj):
        return []
    found: list[str] = []
    # Each container visited keeps a link to its parent's step, so a pointer is spelled out only for a pod
    # spec found, not copied at every level (which would cost the square of the depth).
    steps: list[tuple[int, str]] = [(-1, "")]
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        node, step = stack.pop()
        if type(node) is dict:
            skip = _SKIP
            if _is_pod_spec(node):
                found.append(_spelled(steps, step))
                skip = _POD_SKIP  # an unknown kind may keep more templates beside its containers
            children = ((key, node[key]) for key in reversed(node) if key not in skip)
        else:
            children = ((str(index), node[index]) for index in range(len(node) - 1, -1, -1))
        for key, value in children:
            if type(value) is dict or type(value) is list:
                steps.append((step, key))
                stack.append((value, len(steps) - 1))
    return [_as_template(obj, at) for at in found]


def _spelled(steps: list[tuple[int, str]], step: int) -> str:
    keys: list[str] = []
    while step > 0:
        step, key = steps[step]
        keys.append(key)
    return pointer.join("", *reversed(keys))


def _may_hold_pod_spec(obj: dict[str, Any]) -> bool:
    """Whether a `containers` key may be anywhere in `obj`. Most objects of unknown kinds hold no pod spec,
    and one C-speed serialisation and substring search settles that in a few microseconds, where walking
    every node in Python takes several times longer."""
    try:
        return b'"containers"' in orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # nested past orjson's limit, or a value JSON cannot hold: walk it
        return True


def _is_pod_spec(node: dict[str, Any]) -> bool:
    containers = node.get("containers")
    return type(containers) is list and any(type(c) is dict and "image" in c for c in containers)


def _as_template(obj: dict[str, Any], at: str) -> tuple[str, bool]:
    if not at.endswith("/spec"):
        return at, False
    parent_at = at[: -len("/spec")]
    parent = pointer.resolve(obj, parent_at)
    is_template = parent_at == "" or parent_at.endswith("/template") or "metadata" in parent
    return (parent_at, True) if is_template else (at, False)


def unknown_kind_templates(obj: dict[str, Any], base: str = "") -> list[PodTemplate]:
    return [raw_template(obj, base, at, role=base + at or "/", replicas=1, bare=not is_template)
            for at, is_template in pod_spec_pointers(obj)]
