"""Desired children of a TrainingJob or InferenceService, as full Kubernetes objects (pure; no I/O).

The reconciler diffs these against what exists. Same input, same output: lists are in a fixed order,
maps are built in a fixed order, and nothing reads the clock or random numbers.

TrainingJob (`mlgate.dev/v1alpha1`) -> in this order:
1. a PodGroup `<job>` when `spec.scheduling.gang` is true: Volcano `scheduling.volcano.sh/v1beta1`
   (minMember, queue (default "default"), priorityClassName) or coscheduling `scheduling.x-k8s.io/v1alpha1`
   (minMember); minMember = `scheduling.minMember` (capped at the pod count) or every pod (ml-domain §2);
2. for MPI, a ConfigMap `<job>-config` with key `hostfile`, mounted read-only at /etc/mpi in the launcher;
3. one headless Service `<job>` (`clusterIP: None`, `publishNotReadyAddresses` so peers resolve while
   starting) selecting every pod of the job, with the framework port (see frameworks.py for DNS);
4. one Pod per replica `<job>-<role lower>-<index>`, in render.training_roles order.
Every child has an ownerReference to the job with `controller: true` and the label `mlgate.dev/job-name`.
Pods also carry `mlgate.dev/replica-type` (lowercase role) and `mlgate.dev/replica-index`, the template's
labels and annotations, `hostname`/`subdomain`, and `restartPolicy: Never` (the reconciler replaces failed
pods itself, counting against runPolicy.backoffLimit).

Main-container environment, in order: framework variables (frameworks.py), hyperparameters, checkpoint.
- Hyperparameters: the env var name IS the key, unchanged (the CRD's documented contract: "name = key,
  value = value"), sorted by key. A key that equals a framework or checkpoint variable is dropped, never
  allowed to override it; `hyperparameter_conflicts()` lists those keys so the reconciler can report them.
- Checkpoint: claimName + mountPath -> volume `mlgate-checkpoint` (the claim) mounted at mountPath in the main
  container of every pod and `CHECKPOINT_DIR=<mountPath>`; uri -> `CHECKPOINT_URI=<uri>` only.
Variables the user wrote in the template under one of these names are replaced (the reconciler owns them).
"""

from __future__ import annotations

import copy
from typing import Any

from mlgate.rules.gang_markers import ANNOTATIONS, GROUP, LABELS, QUEUE, SCHEDULER_NAMES, label_value
from mlgate.workloads import render

from . import frameworks
from .frameworks import Env, Replica, Topology

__all__ = [
    "COMPONENT_LABEL",
    "ISVC_LABEL",
    "JOB_LABEL",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "desired_children",
    "desired_inference_children",
    "has_canary",
    "hyperparameter_conflicts",
    "owner_reference",
]

JOB_LABEL = "mlgate.dev/job-name"
REPLICA_TYPE_LABEL = "mlgate.dev/replica-type"
REPLICA_INDEX_LABEL = "mlgate.dev/replica-index"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"  # Kubeflow v1 with Volcano (ml-domain §2)
CHECKPOINT_VOLUME = "mlgate-checkpoint"
MPI_VOLUME = "mlgate-mpi"
CHECKPOINT_ENV = ("CHECKPOINT_DIR", "CHECKPOINT_URI")
PODGROUP_API = {"volcano": "scheduling.volcano.sh/v1beta1", "coscheduling": "scheduling.x-k8s.io/v1alpha1"}


def desired_children(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job.get("spec") or {}
    name, namespace = _name(job), _namespace(job)
    first_role = render.training_roles(spec)[0][0]
    rendered = render.render_pod_spec("TrainingJob", spec, first_role)
    main = _main(rendered, render.main_container_name("TrainingJob", spec))  # read only
    topo = frameworks.topology(name, namespace, spec, main)
    children: list[dict[str, Any]] = []
    podgroup = _podgroup(job, topo)
    if podgroup:
        children.append(podgroup)
    if topo.framework == "mpi":
        children.append(_object("v1", "ConfigMap", job, f"{name}-config",
                                data={frameworks.HOSTFILE_KEY: frameworks.hostfile(topo)}))
    children.append(_headless_service(job, topo))
    children.extend(_pod(job, topo, replica) for replica in topo.replicas)
    return children


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": str(owner.get("apiVersion") or "mlgate.dev/v1alpha1"),
        "kind": str(owner.get("kind") or "TrainingJob"),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def hyperparameter_conflicts(job: dict[str, Any]) -> list[str]:
    """Hyperparameter keys that are dropped because a framework or checkpoint variable owns the name."""
    reserved = frameworks.FRAMEWORK_ENV_NAMES | set(CHECKPOINT_ENV)
    return sorted(k for k in ((job.get("spec") or {}).get("hyperparameters") or {}) if k in reserved)


# --- objects -----------------------------------------------------------------------------------------


def _object(api_version: str, kind: str, owner: dict[str, Any], name: str, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": _namespace(owner),
            "labels": {JOB_LABEL: label_value(_name(owner))},
            "ownerReferences": [owner_reference(owner)],
        },
        **body,
    }


def _headless_service(job: dict[str, Any], topo: Topology) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {JOB_LABEL: label_value(topo.job)},
    }
    if topo.port is not None:
        port_name = frameworks.PORTS[topo.framework][0]
        spec["ports"] = [{"name": port_name, "port": topo.port, "targetPort": topo.port, "protocol": "TCP"}]
    return _object("v1", "Service", job, topo.job, spec=spec)


def _podgroup(job: dict[str, Any], topo: Topology) -> dict[str, Any] | None:
    scheduling = (job.get("spec") or {}).get("scheduling") or {}
    scheduler = scheduling.get("scheduler")
    if scheduling.get("gang") is not True or scheduler not in PODGROUP_API:
        return None
    total = len(topo.replicas)
    wanted = scheduling.get("minMember")
    spec: dict[str, Any] = {"minMember": min(wanted, total) if isinstance(wanted, int) and wanted > 0 else total}
    if scheduler == "volcano":
        spec["queue"] = str(scheduling.get("queue") or "default")
        if scheduling.get("priorityClassName"):
            spec["priorityClassName"] = str(scheduling["priorityClassName"])
    return _object(PODGROUP_API[scheduler], "PodGroup", job, _podgroup_name(scheduler, topo.job), spec=spec)


def _podgroup_name(scheduler: str, job: str) -> str:
    # coscheduling matches pods by a LABEL, so the group name must be a valid label value
    return label_value(job) if scheduler == "coscheduling" else job


def _pod(job: dict[str, Any], topo: Topology, replica: Replica) -> dict[str, Any]:
    spec = job.get("spec") or {}
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    pod_spec = copy.deepcopy(render.render_pod_spec("TrainingJob", spec, replica.role))
    main = _main(pod_spec, render.main_container_name("TrainingJob", spec))
    labels: dict[str, str] = {**(template_meta.get("labels") or {})}
    annotations: dict[str, str] = {**(template_meta.get("annotations") or {})}
    labels.update({
        JOB_LABEL: label_value(topo.job),
        REPLICA_TYPE_LABEL: replica.role.lower(),
        REPLICA_INDEX_LABEL: str(replica.index),
    })
    _scheduling(spec.get("scheduling") or {}, topo, replica, pod_spec, {LABELS: labels, ANNOTATIONS: annotations})
    pod_spec.update({"hostname": replica.name, "subdomain": topo.job, "restartPolicy": "Never"})
    _port(topo, main)
    env = frameworks.framework_env(topo, replica) + _hyperparameters(spec) + _checkpoint(spec, pod_spec, main)
    if topo.framework == "mpi" and replica.role == "Launcher":
        _mount(pod_spec, main, {"name": MPI_VOLUME, "configMap": {"name": f"{topo.job}-config"}},
               {"name": MPI_VOLUME, "mountPath": frameworks.MPI_DIR, "readOnly": True})
    _set_env(main, env)
    pod = _object("v1", "Pod", job, replica.name, spec=pod_spec)
    pod["metadata"]["labels"] = labels
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return pod


def _scheduling(scheduling: dict[str, Any], topo: Topology, replica: Replica, pod_spec: dict[str, Any],
                meta: dict[str, dict[str, str]]) -> None:
    """Scheduler name, priority and gang markers, written where the template left them unset."""
    scheduler = scheduling.get("scheduler")
    scheduler_name = SCHEDULER_NAMES.get(str(scheduler)) if scheduler else None
    if scheduler_name and not pod_spec.get("schedulerName"):
        pod_spec["schedulerName"] = scheduler_name
    if scheduling.get("priorityClassName") and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = str(scheduling["priorityClassName"])
    if scheduling.get("gang") is not True or scheduler not in PODGROUP_API:
        return
    (section, key), *_ = GROUP[scheduler]
    meta[section][key] = _podgroup_name(scheduler, topo.job)
    if scheduler == "volcano":
        meta[ANNOTATIONS][VOLCANO_TASK_SPEC] = replica.role.lower()
        if scheduling.get("queue"):
            (q_section, q_key), *_ = QUEUE["volcano"]
            meta[q_section][q_key] = str(scheduling["queue"])


# --- containers ----------------------------------------------------------------------------------------


def _main(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    for container in pod_spec.get("containers") or []:
        if isinstance(container, dict) and container.get("name") == name:
            found: dict[str, Any] = container
            return found  # edited in place: only on a deep copy of render's output
    raise ValueError(f"rendered pod spec has no container {name!r}")


def _port(topo: Topology, main: dict[str, Any]) -> None:
    """Declare the framework port on the main container unless the user already named it (Kubeflow defaulting)."""
    if topo.port is None:
        return
    port_name = frameworks.PORTS[topo.framework][0]
    ports = list(main.get("ports") or [])
    if not any(isinstance(p, dict) and p.get("name") == port_name for p in ports):
        ports.append({"name": port_name, "containerPort": topo.port, "protocol": "TCP"})
    main["ports"] = ports


def _hyperparameters(spec: dict[str, Any]) -> Env:
    reserved = frameworks.FRAMEWORK_ENV_NAMES | set(CHECKPOINT_ENV)
    values = spec.get("hyperparameters") or {}
    return [(str(k), str(values[k])) for k in sorted(values) if k not in reserved]


def _checkpoint(spec: dict[str, Any], pod_spec: dict[str, Any], main: dict[str, Any]) -> Env:
    checkpoint = spec.get("checkpoint") or {}
    if checkpoint.get("claimName") and checkpoint.get("mountPath"):
        mount_path = str(checkpoint["mountPath"])
        claim = {"claimName": str(checkpoint["claimName"])}
        _mount(pod_spec, main, {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": claim},
               {"name": CHECKPOINT_VOLUME, "mountPath": mount_path})
        return [("CHECKPOINT_DIR", mount_path)]
    if checkpoint.get("uri"):
        return [("CHECKPOINT_URI", str(checkpoint["uri"]))]
    return []


def _mount(pod_spec: dict[str, Any], main: dict[str, Any], volume: dict[str, Any], mount: dict[str, Any]) -> None:
    """Add (or replace, by name) one volume and its mount in the main container."""
    pod_spec["volumes"] = [v for v in pod_spec.get("volumes") or [] if v.get("name") != volume["name"]] + [volume]
    main["volumeMounts"] = [m for m in main.get("volumeMounts") or [] if m.get("name") != mount["name"]] + [mount]


def _set_env(main: dict[str, Any], env: Env) -> None:
    owned = {name for name, _ in env}
    kept = [e for e in main.get("env") or [] if not (isinstance(e, dict) and e.get("name") in owned)]
    main["env"] = kept + [{"name": name, "value": value} for name, value in env]


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


# --- InferenceService ----------------------------------------------------------------------------------
#
# InferenceService -> in this order: Deployment `<name>-predictor`, Deployment `<name>-canary` (only with
# canaryTrafficPercent > 0 and spec.canary), Service `<name>` (ClusterIP, port 80 -> container port 8080, named
# "http"), and an `autoscaling/v2` HorizontalPodAutoscaler `<name>` on the predictor when `scaling` is set.
#
# Traffic split: both Deployments' pods carry the Service's selector label `mlgate.dev/inference-service`, so
# kube-proxy spreads connections evenly over all ready pods of both; the split is the pod ratio. With
# total = scaling.minReplicas (default 1) and pct = canaryTrafficPercent:
#   canary  = max(1, round_half_up(total * pct / 100))     (integer math: (total * pct + 50) // 100)
#   primary = total - canary, but at least 1 while pct < 100 (never send 100% to a canary asked for less)
# so the realized share is canary / (primary + canary): total 10 at 10% -> 9 + 1; total 1 at 10% -> 1 + 1 (50%).
# The split is per connection, not per request (keep-alive clients stick to one pod), and the HPA scales only
# the predictor, so the canary's share falls as the predictor scales out.
# Each Deployment selects its own pods with `mlgate.dev/component` (predictor | canary), so the two selectors
# never overlap. When an HPA exists the reconciler must leave the predictor's spec.replicas to it.

ISVC_LABEL = "mlgate.dev/inference-service"
COMPONENT_LABEL = "mlgate.dev/component"
SERVING_PORT, SERVICE_PORT = 8080, 80
DEFAULT_TARGET_UTILIZATION = 80  # autoscaling/v2's own default when no metric is given
# Used when spec.image is unset: the images KServe's ClusterServingRuntimes use
# (kserve/kserve config/runtimes/kustomization.yaml @031922cb).
DEFAULT_IMAGES = {
    "triton": "nvcr.io/nvidia/tritonserver:21.09-py3",
    "torchserve": "pytorch/torchserve-kfs:0.7.0",
    "tensorflow-serving": "tensorflow/serving:2.6.2",
}


def desired_inference_children(isvc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = isvc.get("spec") or {}
    name = _name(isvc)
    primary, canary = canary_split(spec)
    children = [_deployment(isvc, "predictor", primary, spec.get("image"), spec.get("modelUri"))]
    if has_canary(spec):
        overrides = spec.get("canary") or {}
        children.append(_deployment(isvc, "canary", canary, overrides.get("image") or spec.get("image"),
                                    overrides.get("modelUri") or spec.get("modelUri")))
    children.append(_isvc_object("v1", "Service", isvc, name, spec={
        "type": "ClusterIP",
        "selector": {ISVC_LABEL: label_value(name)},
        "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": SERVING_PORT, "protocol": "TCP"}],
    }))
    if spec.get("scaling"):
        children.append(_hpa(isvc, spec["scaling"]))
    return children


def canary_split(spec: dict[str, Any]) -> tuple[int, int]:
    """(predictor replicas, canary replicas); see the traffic-split comment above."""
    total = render.serving_replicas(spec)
    if not has_canary(spec) or total == 0:
        return total, 0
    pct = int(spec["canaryTrafficPercent"])
    canary = max(1, (total * pct + 50) // 100)
    primary = total - canary
    if pct < 100:
        primary = max(1, primary)
    return primary, canary


def has_canary(spec: dict[str, Any]) -> bool:
    pct = spec.get("canaryTrafficPercent")
    return isinstance(pct, int) and pct > 0 and bool(spec.get("canary"))


def _isvc_object(api_version: str, kind: str, isvc: dict[str, Any], name: str, **body: Any) -> dict[str, Any]:
    obj = _object(api_version, kind, isvc, name, **body)
    obj["metadata"]["labels"] = {ISVC_LABEL: label_value(_name(isvc))}
    return obj


def _deployment(isvc: dict[str, Any], component: str, replicas: int, image: Any, model_uri: Any) -> dict[str, Any]:
    spec = isvc.get("spec") or {}
    name = _name(isvc)
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    pod_spec = copy.deepcopy(render.render_pod_spec("InferenceService", spec))
    main = _main(pod_spec, render.SERVING_CONTAINER)
    main["image"] = str(image or DEFAULT_IMAGES.get(str(spec.get("runtime")), ""))
    ports = [p for p in main.get("ports") or [] if not (isinstance(p, dict) and p.get("name") == "http")]
    main["ports"] = [*ports, {"name": "http", "containerPort": SERVING_PORT, "protocol": "TCP"}]
    _set_env(main, [("MODEL_URI", str(model_uri or ""))])
    selector = {ISVC_LABEL: label_value(name), COMPONENT_LABEL: component}
    pod_meta: dict[str, Any] = {"labels": {**(template_meta.get("labels") or {}), **selector}}
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    deployment = _isvc_object("apps/v1", "Deployment", isvc, f"{name}-{component}", spec={
        "replicas": replicas,
        "selector": {"matchLabels": selector},
        "template": {"metadata": pod_meta, "spec": pod_spec},
    })
    deployment["metadata"]["labels"][COMPONENT_LABEL] = component
    return deployment


def _hpa(isvc: dict[str, Any], scaling: dict[str, Any]) -> dict[str, Any]:
    name = _name(isvc)
    low = max(1, render.serving_replicas(isvc.get("spec") or {}))  # minReplicas 0 needs the HPAScaleToZero gate
    high = scaling.get("maxReplicas")
    target = scaling.get("targetUtilization") or DEFAULT_TARGET_UTILIZATION
    return _isvc_object("autoscaling/v2", "HorizontalPodAutoscaler", isvc, name, spec={
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-predictor"},
        "minReplicas": low,
        "maxReplicas": max(low, high) if isinstance(high, int) else low,
        "metrics": [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": int(target)}}}],
    })
