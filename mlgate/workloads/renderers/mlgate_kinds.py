"""mlgate's own TrainingJob and InferenceService: pods rendered from the shorthand spec plus the overlay.

A TrainingJob's `spec.template` is an overlay merged by container name into the main container that `image`,
`command`, `args` and `resources` describe (`render.py`, which the reconciler uses too). Findings point at the
shorthand field where it set the value, else at the overlay's container; mutations write into the overlay.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.workload import CONTAINER_LISTS, Checkpoint, PodTemplate, Workload, as_dict, as_list, ensure
from mlgate.workloads import render
from mlgate.workloads.templates import ensure_at


def training_job(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    spec = as_dict(root.get("spec"))
    checkpoint = as_dict(spec.get("checkpoint"))
    if checkpoint:
        workload.checkpoint = Checkpoint(claim_name=checkpoint.get("claimName"), mount_path=checkpoint.get("mountPath"),
                                         uri=checkpoint.get("uri"), pointer=base + "/spec/checkpoint")
    _templates(workload, root, base, render.training_roles(spec))


def inference_service(workload: Workload, root: dict[str, Any], base: str, at: str, facts: ClusterFacts) -> None:
    spec = as_dict(root.get("spec"))
    if spec.get("modelUri"):
        workload.model_uri = (base + "/spec/modelUri", str(spec["modelUri"]))
    _templates(workload, root, base, [("Predictor", render.serving_replicas(spec))])


def _templates(workload: Workload, obj: dict[str, Any], base: str, roles: list[tuple[str, int]]) -> None:
    """The roles' templates; `base` is where `obj` sits in the workload's object (an Experiment's trial, say)."""
    kind = workload.kind
    main = render.main_container_name(kind, as_dict(obj.get("spec")))
    writes = [0]  # every target handed out counts as a write to the shared overlay

    def target(ptr: str) -> dict[str, Any]:
        writes[0] += 1
        return ensure_at(obj, ptr)

    by_name = _ByName()

    def container_target(name: str) -> dict[str, Any]:
        writes[0] += 1
        return _overlay_container(obj, name, by_name)

    layouts: list[tuple[tuple[tuple[int, int], ...], _Layout]] = []

    def path(tokens: tuple[str | int, ...]) -> str:
        # The layout changes only when a container list is replaced or grows (mutations never rename one),
        # so a write into a container's fields keeps it: paths between writes cost no new layout.
        spec = as_dict(obj.get("spec"))
        overlay = as_dict(as_dict(spec.get("template")).get("spec"))
        shape = tuple((id(items), len(items)) if isinstance(items := overlay.get(key), list) else (0, 0)
                      for key in CONTAINER_LISTS)
        if not layouts or layouts[0][0] != shape:
            layouts[:] = [(shape, _Layout(kind, spec))]
        return base + _overlay_path(layouts[0][1], spec, main, tokens)

    for role, replicas in roles:
        def rerender(role: str = role) -> tuple[dict[str, Any], dict[str, Any]]:
            current = as_dict(obj.get("spec"))
            metadata = as_dict(as_dict(current.get("template")).get("metadata"))
            return render.render_pod_spec(kind, current, role), metadata

        spec_view, meta_view = rerender()
        workload.templates.append(PodTemplate(
            role=role,
            replicas=replicas,
            rendered_spec=spec_view,
            rendered_metadata=meta_view,
            path_fn=path,
            pod_target=lambda: target("/spec/template/spec"),
            container_target=container_target,
            meta_target=lambda: target("/spec/template/metadata"),
            meta_pointer=base + "/spec/template/metadata",
            restart_policy_pointer=None,
            main_container=main,
            rerender=rerender,
            writes=writes,
        ))
class _Layout:
    """Where each rendered container came from: the rendered containers' names, and each overlay container's
    position by name (the first of a name). Worked out once per state of the spec, so mapping every finding's
    path back is linear in the containers, not quadratic."""

    def __init__(self, kind: str, spec: dict[str, Any]):
        self.names = [c.get("name") for c in render.render_pod_spec(kind, spec).get("containers", [])]
        overlay_spec = as_dict(as_dict(spec.get("template")).get("spec"))
        self.overlay: dict[str, list[Any]] = {}
        self.position: dict[str, dict[Any, int]] = {}
        for key in CONTAINER_LISTS:
            self.overlay[key] = items = list(as_list(overlay_spec.get(key)))
            positions: dict[Any, int] = {}
            for i, container in enumerate(items):
                if isinstance(container, dict) and isinstance(container.get("name"), str):
                    positions.setdefault(container["name"], i)
            self.position[key] = positions


def _overlay_path(layout: _Layout, spec: dict[str, Any], main: str, tokens: tuple[str | int, ...]) -> str:
    """Map a path in the rendered pod spec back to the TrainingJob field the user wrote: the shorthand field
    (`spec.image`, `spec.resources.gpu`, ...) when it set the value, else the overlay's container of that name."""
    base = "/spec/template/spec"
    if len(tokens) < 2 or tokens[0] not in CONTAINER_LISTS:
        return pointer.join(base, *tokens)
    key, index, rest = str(tokens[0]), tokens[1], tokens[2:]
    names = layout.names
    name = names[index] if key == "containers" and isinstance(index, int) and index < len(names) else None
    overlay = layout.overlay[key]
    position = layout.position[key].get(name) if isinstance(name, str) else None
    if name == main and rest:
        shorthand = _shorthand(spec, rest)
        if shorthand is not None:
            short_ptr, is_set = shorthand
            # a value set nowhere (a finding about something missing) is best added to the shorthand
            if is_set or position is None or pointer.resolve(overlay[position], pointer.join("", *rest)) is None:
                return short_ptr
    if position is not None:
        return pointer.join(base, key, position, *rest)
    if key != "containers" or name is None:
        return pointer.join(base, *tokens)
    return pointer.join(base, key, len(overlay), *rest)


def _shorthand(spec: dict[str, Any], rest: tuple[str | int, ...]) -> tuple[str, bool] | None:
    """(pointer of the shorthand field for `rest` of the main container, whether the shorthand sets it)."""
    field = str(rest[0])
    if field in render.SUGAR_FIELDS:
        return pointer.join("/spec", *rest), spec.get(field) is not None
    if field != "resources":
        return None
    resources = as_dict(spec.get("resources"))
    if len(rest) < 3:  # the whole section: the overlay's, if it has one
        return "/spec/resources", False
    resource = str(rest[2])
    short = _sugar_resource(resource)
    if short is None:
        return None
    return pointer.join("/spec/resources", short), resource in render.resource_limits(resources)


def _sugar_resource(resource: str) -> str | None:
    if resource == "nvidia.com/gpu":
        return "gpu"
    if resource.startswith("nvidia.com/mig-"):
        return "mig"
    return resource if resource in render.RESOURCE_NAMES else None


class _ByName:
    """The overlay's containers by name (the first of a name wins), kept while the overlay's list is the same
    list, so writing into every container is linear."""

    def __init__(self) -> None:
        self.of: list[Any] | None = None
        self.containers: dict[Any, dict[str, Any]] = {}

    def get(self, containers: list[Any], name: str) -> dict[str, Any] | None:
        if self.of is not containers:
            self.of = containers
            self.containers = {}
            for container in containers:
                if isinstance(container, dict) and isinstance(container.get("name"), str):
                    self.containers.setdefault(container["name"], container)
        return self.containers.get(name)


def _overlay_container(obj: dict[str, Any], name: str, by_name: _ByName) -> dict[str, Any]:
    """The overlay's container of that name, created when it has none."""
    containers = ensure(ensure_at(obj, "/spec/template/spec"), "containers", list)
    container = by_name.get(containers, name)
    if container is None:
        container = {"name": name}
        containers.append(container)
        by_name.containers[name] = container
    return container
