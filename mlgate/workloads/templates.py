"""A pod template written in the user's object: its view, its field paths, and where mutations write.

`base` is where `root` sits in the workload's object ("" for the object itself, a pointer for an embedded
one such as an Experiment's trial), so every path a rule reports is a path in what the user applied.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.workload import PodTemplate, Unwritable, as_dict, ensure


def raw_template(
    root: dict[str, Any], base: str, at: str, role: str, replicas: int, *, bare: bool = False, found: Any = None,
) -> PodTemplate:
    """The PodTemplateSpec at `at` (`spec` and `metadata` under it; "" for a Pod), or with `bare` the PodSpec
    at `at` itself, which has no metadata of its own. `found` is the value at `at`, where the caller has it."""
    spec_at, meta_at = (at, "") if bare else (at + "/spec", at + "/metadata")
    holder = as_dict(found if found is not None else pointer.resolve(root, at))  # one walk for both
    found_spec, found_meta = (holder, {}) if bare else (holder.get("spec"), holder.get("metadata"))
    spec, metadata = as_dict(found_spec), as_dict(found_meta)
    writes = [0]  # a target handed out may create the spec or metadata the view lacks

    def target(ptr: str) -> dict[str, Any]:
        writes[0] += 1
        return ensure_at(root, ptr)

    def meta_target() -> dict[str, Any]:
        if bare:
            raise Unwritable(f"the pod spec at {base + at or '/'} has no metadata of its own to write")
        return target(meta_at)

    def rerender() -> tuple[dict[str, Any], dict[str, Any]]:
        # targets only ever create what is missing (a dict, once there, stays): look up only that
        return (spec if isinstance(found_spec, dict) else as_dict(pointer.resolve(root, spec_at)),
                metadata if bare or isinstance(found_meta, dict) else as_dict(pointer.resolve(root, meta_at)))

    index: dict[str, dict[str, Any]] = {}  # container name -> container: built once, not once per call

    def container_target(name: str) -> dict[str, Any]:
        writes[0] += 1
        if name not in index:  # first call, or a container added since
            index.clear()
            pod = ensure_at(root, spec_at)
            for key in ("initContainers", "containers"):  # a regular container wins over an init one of its name
                for container in reversed(as_list_of_dicts(pod.get(key))):
                    index[str(container.get("name"))] = container
        if name not in index:
            raise Unwritable(f"no container named {name!r} at {base + spec_at}")
        return index[name]

    full_spec = base + spec_at
    return PodTemplate(
        role=role,
        replicas=max(replicas, 0),
        rendered_spec=spec,
        rendered_metadata=metadata,
        path_fn=lambda tokens: pointer.join(full_spec, *tokens),
        pod_target=lambda: target(spec_at),
        container_target=container_target,
        meta_target=meta_target,
        meta_pointer=base + (meta_at or spec_at),
        restart_policy_pointer=full_spec + "/restartPolicy",
        # the user's own dicts need no refresh; a missing one is created by the first write
        rerender=None if isinstance(found_spec, dict) and (bare or isinstance(found_meta, dict)) else rerender,
        writes=writes,
    )


def as_list_of_dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def ensure_at(obj: dict[str, Any], ptr: str) -> dict[str, Any]:
    """The mapping at `ptr`, with missing mappings on the way created; list items are walked, never replaced
    (a template pointer only reaches items that exist)."""
    node: Any = obj
    for token in pointer.split(ptr):
        if isinstance(node, list):
            if not token.isdigit() or int(token) >= len(node):
                raise Unwritable(f"{ptr} runs through a list where a mapping belongs")
            node = node[int(token)]
        elif isinstance(node.get(token), list):
            node = node[token]
        else:
            node = ensure(node, token)
    if not isinstance(node, dict):
        raise Unwritable(f"{ptr} is not a mapping")
    return node


def whole(value: Any, default: int) -> int:
    """`value` if it is a whole number of pods (not a bool, not negative), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
