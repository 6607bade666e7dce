"""Every supported kind, mapped to its pod templates and job context.

Kinds and where their pod templates live:
- kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob, MPIJob; kubeflow.org/v2beta1 MPIJob:
  `spec.<x>ReplicaSpecs.<Role>.template` (replicas default 1), run policy at `spec.runPolicy`
  (Kubeflow training-operator v1.9 `pkg/apis/kubeflow.org/v1`, mpi-operator v2beta1).
- batch/v1 Job: `spec.template`; pods at once = `spec.parallelism` (default 1), at most `spec.completions`
  (the Job controller never runs more pods than completions remain; Kueue's job integration counts a Job's pods
  the same way).
- v1 Pod: `spec` itself.
- mlgate.dev/v1alpha1 TrainingJob and InferenceService: rendered by `render.py`.
Anything else is not an ML workload and `extract` returns None.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.workload import Checkpoint, PodTemplate, Workload, as_dict, ensure
from mlgate.workloads import render

MLGATE_GROUP = "mlgate.dev"
KUBEFLOW_GROUP = "kubeflow.org"
REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
KUBEFLOW_VERSIONS = {"v1", "v2beta1"}
SUPPORTED_KINDS = (*REPLICA_SPECS, "Job", "Pod", "TrainingJob", "InferenceService")


def extract(obj: dict[str, Any], old_obj: dict[str, Any] | None = None) -> Workload | None:
    api_version = str(obj.get("apiVersion") or "")
    kind = str(obj.get("kind") or "")
    group, _, version = api_version.rpartition("/")
    meta = as_dict(obj.get("metadata"))
    workload = Workload(
        obj=obj,
        api_version=api_version,
        kind=kind,
        name=str(meta.get("name") or meta.get("generateName") or ""),
        namespace=str(meta.get("namespace") or ""),
        old_obj=old_obj,
    )
    if group == KUBEFLOW_GROUP and kind in REPLICA_SPECS and version in KUBEFLOW_VERSIONS:
        _kubeflow(workload, REPLICA_SPECS[kind])
    elif api_version == "batch/v1" and kind == "Job":
        _raw(workload, "/spec/template", "job", job_pods(as_dict(obj.get("spec"))))
        workload.run_policy_pointer = "/spec"
    elif api_version == "v1" and kind == "Pod":
        workload.templates.append(_raw_template(obj, "", "pod", 1))
    elif group == MLGATE_GROUP and kind in ("TrainingJob", "InferenceService"):
        _mlgate(workload)
    else:
        return None
    return workload


def job_pods(spec: dict[str, Any]) -> int:
    """How many of a Job's pods run at once: min(parallelism, completions), parallelism defaulting to 1."""
    parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
    pods = parallelism if isinstance(parallelism, int) and not isinstance(parallelism, bool) else 1
    if isinstance(completions, int) and not isinstance(completions, bool):
        pods = min(pods, completions)
    return pods


def _kubeflow(workload: Workload, specs_field: str) -> None:
    spec = as_dict(workload.obj.get("spec"))
    replica_specs = as_dict(spec.get(specs_field))
    for role, replica_spec in replica_specs.items():
        if not isinstance(replica_spec, dict):
            continue
        base = pointer.join("/spec", specs_field, role)
        replicas = replica_spec.get("replicas", 1)
        template = _raw_template(workload.obj, base + "/template", role, replicas if isinstance(replicas, int) else 1)
        template.restart_policy_pointer = base + "/restartPolicy"
        workload.templates.append(template)
    workload.run_policy_pointer = "/spec/runPolicy"
    workload.gang_pointer = "/spec/runPolicy/schedulingPolicy"


def _raw(workload: Workload, template_pointer: str, role: str, replicas: int) -> None:
    workload.templates.append(_raw_template(workload.obj, template_pointer, role, replicas))


def _raw_template(obj: dict[str, Any], template_pointer: str, role: str, replicas: int) -> PodTemplate:
    """The pod template at `template_pointer` (`spec` and `metadata` under it; "" for a Pod)."""
    spec_pointer, meta_pointer = template_pointer + "/spec", template_pointer + "/metadata"
    holder = as_dict(pointer.resolve(obj, template_pointer))  # one walk for both
    found_spec, found_meta = holder.get("spec"), holder.get("metadata")
    spec, metadata = as_dict(found_spec), as_dict(found_meta)
    writes = [0]  # a target handed out may create the spec or metadata the view lacks

    def target(ptr: str) -> dict[str, Any]:
        writes[0] += 1
        return _ensure_at(obj, ptr)

    def rerender() -> tuple[dict[str, Any], dict[str, Any]]:
        # targets only ever create what is missing (a dict, once there, stays): look up only that
        return (spec if isinstance(found_spec, dict) else as_dict(pointer.resolve(obj, spec_pointer)),
                metadata if isinstance(found_meta, dict) else as_dict(pointer.resolve(obj, meta_pointer)))

    def container_target(name: str) -> dict[str, Any]:
        writes[0] += 1
        for key in ("containers", "initContainers"):
            for container in _ensure_at(obj, spec_pointer).get(key) or []:
                if isinstance(container, dict) and container.get("name") == name:
                    return container
        raise KeyError(f"no container named {name!r} at {spec_pointer}")

    return PodTemplate(
        role=role,
        replicas=max(replicas, 0),
        rendered_spec=spec,
        rendered_metadata=metadata,
        path_fn=lambda tokens: pointer.join(spec_pointer, *tokens),
        pod_target=lambda: target(spec_pointer),
        container_target=container_target,
        meta_target=lambda: target(meta_pointer),
        meta_pointer=meta_pointer,
        restart_policy_pointer=spec_pointer + "/restartPolicy",
        # the user's own dicts need no refresh; a missing one is created by the first write
        rerender=None if isinstance(found_spec, dict) and isinstance(found_meta, dict) else rerender,
        writes=lambda: writes[0],
    )


def _mlgate(workload: Workload) -> None:
    obj = workload.obj
    spec = as_dict(obj.get("spec"))
    kind = workload.kind
    main = render.main_container_name(kind, spec)
    if kind == "TrainingJob":
        roles = render.training_roles(spec)
        workload.run_policy_pointer = "/spec/runPolicy"
        workload.gang_pointer = "/spec/scheduling"
        checkpoint = as_dict(spec.get("checkpoint"))
        if checkpoint:
            workload.checkpoint = Checkpoint(
                claim_name=checkpoint.get("claimName"),
                mount_path=checkpoint.get("mountPath"),
                uri=checkpoint.get("uri"),
                pointer="/spec/checkpoint",
            )
    else:
        roles = [("Predictor", render.serving_replicas(spec))]
        if spec.get("modelUri"):
            workload.model_uri = ("/spec/modelUri", str(spec["modelUri"]))
    writes = [0]  # every target handed out counts as a write to the shared overlay

    def target(ptr: str) -> dict[str, Any]:
        writes[0] += 1
        return _ensure_at(obj, ptr)

    def container_target(name: str) -> dict[str, Any]:
        writes[0] += 1
        return _overlay_container(obj, name)

    for role, replicas in roles:
        def rerender(role: str = role) -> tuple[dict[str, Any], dict[str, Any]]:
            current = as_dict(obj.get("spec"))
            metadata = as_dict(as_dict(current.get("template")).get("metadata"))
            return render.render_pod_spec(kind, current, role), metadata

        spec_view, meta_view = rerender()
        template = PodTemplate(
            role=role,
            replicas=replicas,
            rendered_spec=spec_view,
            rendered_metadata=meta_view,
            path_fn=lambda tokens: _overlay_path(kind, as_dict(obj.get("spec")), main, tokens),
            pod_target=lambda: target("/spec/template/spec"),
            container_target=container_target,
            meta_target=lambda: target("/spec/template/metadata"),
            meta_pointer="/spec/template/metadata",
            restart_policy_pointer=None,
            main_container=main,
            rerender=rerender,
            writes=lambda: writes[0],
        )
        workload.templates.append(template)


def _overlay_path(kind: str, spec: dict[str, Any], main: str, tokens: tuple[str | int, ...]) -> str:
    """Map a path in the rendered pod spec back to the TrainingJob field the user wrote: the shorthand field
    (`spec.image`, `spec.resources.gpu`, ...) when it set the value, else the overlay's container of that name."""
    base = "/spec/template/spec"
    if len(tokens) < 2 or tokens[0] not in ("containers", "initContainers", "ephemeralContainers"):
        return pointer.join(base, *tokens)
    key, index, rest = str(tokens[0]), tokens[1], tokens[2:]
    rendered = render.render_pod_spec(kind, spec) if key == "containers" else {}
    names = [c.get("name") for c in rendered.get("containers", [])]
    name = names[index] if key == "containers" and isinstance(index, int) and index < len(names) else None
    overlay = [c for c in as_dict(as_dict(spec.get("template")).get("spec")).get(key) or []]
    position = next((i for i, c in enumerate(overlay) if isinstance(c, dict) and name is not None
                     and c.get("name") == name), None)
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


def _overlay_container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    containers = ensure(_ensure_at(obj, "/spec/template/spec"), "containers", list)
    for container in containers:
        if isinstance(container, dict) and container.get("name") == name:
            return container
    container = {"name": name}
    containers.append(container)
    return container


def _ensure_at(obj: dict[str, Any], ptr: str) -> dict[str, Any]:
    node = obj
    for token in pointer.split(ptr):
        node = ensure(node, token)
    return node


