"""How a TrainingJob or InferenceService becomes pod specs.

The engine validates exactly what the reconciler will create, so both call this module.
A TrainingJob's `spec.template` is an overlay: its containers are merged by name into the
main container that `image`, `command`, `args` and `resources` describe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlgate.model.workload import as_dict, as_list

MAIN_CONTAINER = {
    "pytorch": "pytorch",
    "tensorflow": "tensorflow",
    "xgboost": "xgboost",
    "mpi": "mpi",
    "jax": "jax",
}
SERVING_CONTAINER = "predictor"
SUGAR_FIELDS = ("image", "command", "args")
RESOURCE_NAMES = {"cpu": "cpu", "memory": "memory"}


def main_container_name(kind: str, spec: dict[str, Any]) -> str:
    if kind == "InferenceService":
        return SERVING_CONTAINER
    return MAIN_CONTAINER.get(str(spec.get("framework") or "pytorch"), "trainer")


def training_roles(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """(role, replicas) per framework, in the order pods are numbered."""
    framework = spec.get("framework") or "pytorch"
    replicas = _int(spec.get("replicas"), 1)
    if framework in ("pytorch", "xgboost"):
        roles = [("Master", 1), ("Worker", replicas - 1)]
    elif framework == "tensorflow":
        ps = _int(as_dict(spec.get("tensorflow")).get("parameterServers"), 0)
        roles = TF_STRATEGY_ROLES.get(str(spec.get("distributedStrategy")), _tf_chief_roles)(replicas, ps)
    elif framework == "mpi":
        roles = [("Launcher", 1), ("Worker", replicas)]
    else:
        roles = [("Worker", replicas)]
    return [(role, count) for role, count in roles if count > 0]


def _tf_chief_roles(replicas: int, ps: int) -> list[tuple[str, int]]:
    return [("Chief", 1), ("Worker", replicas - 1), ("PS", ps)]


# spec.distributedStrategy -> TensorFlow roles (tf.distribute guide; Kubeflow TFJob examples). Unset: Chief +
# Workers + PS as parameter_server. MirroredStrategy is one machine; MultiWorkerMirroredStrategy has only
# workers (worker 0 acts as chief); ParameterServerStrategy's coordinator runs as the chief.
TF_STRATEGY_ROLES: dict[str, Callable[[int, int], list[tuple[str, int]]]] = {
    "mirrored": lambda replicas, ps: [("Worker", 1)],
    "multi_worker_mirrored": lambda replicas, ps: [("Worker", replicas)],
    "parameter_server": _tf_chief_roles,
}


def serving_replicas(spec: dict[str, Any]) -> int:
    """Predictor pods of an InferenceService: scaling.minReplicas, at least 1. A Deployment at 0 never serves (an
    HPA does not scale a target at zero replicas), so 0 is served as 1, as KServe's raw deployments clamp it
    (kserve/kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/hpa/hpa_reconciler.go createHPA:
    constants.DefaultMinReplicas)."""
    return max(1, _int(as_dict(spec.get("scaling")).get("minReplicas"), 1))


def resource_limits(resources: Any, with_gpu: bool = True) -> dict[str, Any]:
    resources = as_dict(resources)  # the API server refuses anything else; the engine judges what it can
    limits: dict[str, Any] = {}
    for field, name in RESOURCE_NAMES.items():
        if resources.get(field) is not None:
            limits[name] = resources[field]
    if with_gpu and resources.get("gpu") is not None:
        limits["nvidia.com/gpu"] = resources["gpu"]
    if with_gpu and resources.get("mig"):
        limits[mig_resource(str(resources["mig"]))] = 1
    return limits


def mig_resource(profile: str) -> str:
    """Mixed-strategy resource name: `+` is written as `.` (k8s-device-plugin)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def render_pod_spec(kind: str, spec: dict[str, Any], role: str = "") -> dict[str, Any]:
    """The pod spec of one replica, before any per-replica environment is added.

    Copies are shallow: the result shares nested values with `spec`, so callers that
    edit it must copy it first.
    """
    overlay = dict(as_dict(as_dict(spec.get("template")).get("spec")))
    name = main_container_name(kind, spec)
    main: dict[str, Any] = {"name": name}
    for field in SUGAR_FIELDS:
        if spec.get(field) is not None:
            main[field] = spec[field]
    # The MPI launcher only starts mpirun; GPUs go to the workers.
    limits = resource_limits(spec.get("resources"), with_gpu=role != "Launcher")
    if limits:
        main["resources"] = {"limits": limits, "requests": dict(limits)}
    containers = [c for c in as_list(overlay.get("containers")) if isinstance(c, dict)]
    for extra in containers:
        if extra.get("name") == name:
            main = {**extra, **main, "resources": _merge_resources(extra.get("resources"), main.get("resources"))}
            if not main["resources"]:
                del main["resources"]
    overlay["containers"] = [main] + [c for c in containers if c.get("name") != name]
    return overlay


def _merge_resources(overlay: Any, sugar: Any) -> dict[str, Any]:
    """Overlay entries (e.g. rdma/hca) stay; the TrainingJob's own fields win."""
    overlay, sugar = as_dict(overlay), as_dict(sugar)
    merged = {**overlay}
    for section in ("limits", "requests"):
        entries = {**as_dict(overlay.get(section)), **as_dict(sugar.get(section))}
        if entries:
            merged[section] = entries
    return merged


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
