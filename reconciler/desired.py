"""Desired children of a TrainingJob or InferenceService, as full Kubernetes objects (pure; no I/O).

The reconciler diffs these against what exists. Same input, same output: lists are in a fixed order,
maps are built in a fixed order, and nothing reads the clock or random numbers.

TrainingJob (`mlgate.dev/v1alpha1`) -> in this order:
1. a PodGroup `<job>` when `spec.scheduling.gang` is true: Volcano `scheduling.volcano.sh/v1beta1`
   (minMember, queue (default "default"), priorityClassName) or coscheduling `scheduling.x-k8s.io/v1alpha1`
   (minMember); minMember = `scheduling.minMember` (capped at the pod count) or every pod (ml-domain §2), an MPI
   launcher not counted (it is created once the workers run: launcher.py);
2. for MPI, a ConfigMap `<job>-config` with key `hostfile`, mounted read-only at /etc/mpi in the launcher, and
   the SSH Secret `<job>-ssh` mounted in every pod, workers running sshd (mpi.py);
3. one headless Service `<job>` (`clusterIP: None`, `publishNotReadyAddresses` so peers resolve while
   starting) selecting every pod of the job, with the framework port (see frameworks.py for DNS);
4. one Pod per replica `<job>-<role lower>-<index>`, in render.training_roles order; an MPI launcher is a batch
   Job of that name instead, which retries and is created once every worker is Ready (launcher.py).
Every child has an ownerReference to the job with `controller: true` and the label `mlgate.dev/job-name`.
Pods also carry `mlgate.dev/replica-type` (lowercase role) and `mlgate.dev/replica-index`, the template's
labels and annotations, `hostname`/`subdomain`, and `restartPolicy: Never` (the reconciler replaces failed
pods itself, counting against runPolicy.backoffLimit). XGBoost workers first wait for the master's name to
resolve (peer_wait.py, which also says why PyTorch workers need no such wait).

Main-container environment, in order: framework variables (frameworks.py), hyperparameters, model config,
checkpoint.
- Hyperparameters: `spec.hyperparameters` or `spec.modelConfig.hyperparameters` (the CRD refuses both at once;
  were both stored, modelConfig's value wins per key). The env var name IS the key, unchanged (the CRD's
  contract: "name = key, value = value"), sorted by key. A key that equals a framework, model-config or
  checkpoint variable is dropped, never allowed to override it; admission refuses such keys first
  (launch.reserved-env reads both fields from kinds.yaml).
- Model config: `modelConfig.dataPath` -> `DATA_PATH`, `modelConfig.outputPath` -> `OUTPUT_PATH`, values as
  written (a URI or an absolute path in the pod). Kubeflow v1 sets no such variables; Trainer v2's initializers
  download to fixed paths (kubeflow/trainer `pkg/constants/constants.go`: DatasetMountPath /workspace/dataset,
  ModelMountPath /workspace/model) and KubeDL sets `KUBEDL_MODEL_PATH=/kubedl-model` (KubeDL docs, "Model"),
  so the names follow the fields, as CHECKPOINT_DIR/CHECKPOINT_URI do.
- Checkpoint: claimName + mountPath -> volume `mlgate-checkpoint` (the claim) mounted at mountPath in the main
  container of every pod and `CHECKPOINT_DIR=<mountPath>`; uri -> `CHECKPOINT_URI=<uri>` only.
Variables the user wrote in the template under one of these names are replaced (the reconciler owns them).
"""

from __future__ import annotations

import copy
from typing import Any

from mlgate.rules.gang_markers import ANNOTATIONS, GROUP, LABELS, QUEUE, SCHEDULER_NAMES, label_value
from mlgate.workloads import render

from . import frameworks, mpi, peer_wait
from .frameworks import Env, Replica, Topology

__all__ = [
    "JOB_LABEL",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "child_object",
    "desired_children",
    "main_container",
    "name_of",
    "owner_reference",
    "set_env",
]

JOB_LABEL = "mlgate.dev/job-name"
REPLICA_TYPE_LABEL = "mlgate.dev/replica-type"
REPLICA_INDEX_LABEL = "mlgate.dev/replica-index"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"  # Kubeflow v1 with Volcano (ml-domain §2)
CHECKPOINT_VOLUME = "mlgate-checkpoint"
MPI_VOLUME = "mlgate-mpi"
CHECKPOINT_ENV = ("CHECKPOINT_DIR", "CHECKPOINT_URI")
MODEL_CONFIG_ENV = (("dataPath", "DATA_PATH"), ("outputPath", "OUTPUT_PATH"))  # modelConfig field -> env name
PODGROUP_API = {"volcano": "scheduling.volcano.sh/v1beta1", "coscheduling": "scheduling.x-k8s.io/v1alpha1"}
LAUNCHER_JOB_API, LAUNCHER_JOB_KIND = "batch/v1", "Job"
LAUNCHER_RESTART_POLICY = "OnFailure"  # mpi-operator's DefaultLauncherRestartPolicy


def desired_children(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job.get("spec") or {}
    name, namespace = name_of(job), namespace_of(job)
    first_role = render.training_roles(spec)[0][0]
    rendered = render.render_pod_spec("TrainingJob", spec, first_role)
    main = main_container(rendered, render.main_container_name("TrainingJob", spec))  # read only
    topo = frameworks.topology(name, namespace, spec, main)
    children: list[dict[str, Any]] = []
    podgroup = _podgroup(job, topo)
    if podgroup:
        children.append(podgroup)
    if topo.framework == "mpi":
        children.append(child_object("v1", "ConfigMap", job, f"{name}-config",
                                data={frameworks.HOSTFILE_KEY: frameworks.hostfile(topo)}))
        children.append(child_object("v1", "Secret", job, mpi.ssh_secret_name(name), **mpi.ssh_secret_body()))
    children.append(_headless_service(job, topo))
    backoff_limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    for replica in topo.replicas:
        pod = _pod(job, topo, replica)
        mpi_launcher = topo.framework == "mpi" and replica.role == "Launcher"
        children.append(_launcher_job(pod, backoff_limit) if mpi_launcher else pod)
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


# --- objects -----------------------------------------------------------------------------------------


def child_object(api_version: str, kind: str, owner: dict[str, Any], name: str, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace_of(owner),
            "labels": {JOB_LABEL: label_value(name_of(owner))},
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
    return child_object("v1", "Service", job, topo.job, spec=spec)


def _podgroup(job: dict[str, Any], topo: Topology) -> dict[str, Any] | None:
    scheduling = (job.get("spec") or {}).get("scheduling") or {}
    scheduler = scheduling.get("scheduler")
    if scheduling.get("gang") is not True or scheduler not in PODGROUP_API:
        return None
    # an MPI launcher waits for every worker to be Ready (launcher.py): a group that counted it would never
    # let the workers be placed, so it counts the workers and the launcher joins the running group later
    total = len(topo.replicas) - (1 if topo.framework == "mpi" else 0)
    wanted = scheduling.get("minMember")
    spec: dict[str, Any] = {"minMember": min(wanted, total) if isinstance(wanted, int) and wanted > 0 else total}
    if scheduler == "volcano":
        spec["queue"] = str(scheduling.get("queue") or "default")
        if scheduling.get("priorityClassName"):
            spec["priorityClassName"] = str(scheduling["priorityClassName"])
    return child_object(PODGROUP_API[scheduler], "PodGroup", job, _podgroup_name(scheduler, topo.job), spec=spec)


def _podgroup_name(scheduler: str, job: str) -> str:
    # coscheduling matches pods by a LABEL, so the group name must be a valid label value
    return label_value(job) if scheduler == "coscheduling" else job


def _pod(job: dict[str, Any], topo: Topology, replica: Replica) -> dict[str, Any]:
    spec = job.get("spec") or {}
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    pod_spec = copy.deepcopy(render.render_pod_spec("TrainingJob", spec, replica.role))
    main = main_container(pod_spec, render.main_container_name("TrainingJob", spec))
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
    env = (frameworks.framework_env(topo, replica) + _hyperparameters(spec) + _model_config(spec)
           + _checkpoint(spec, pod_spec, main))
    if topo.framework == "mpi":
        layout = mpi.ssh_layout(spec)
        _mount(pod_spec, main, *mpi.ssh_volume(topo.job, layout))
        if replica.role == "Launcher":
            _mount(pod_spec, main, {"name": MPI_VOLUME, "configMap": {"name": f"{topo.job}-config"}},
                   {"name": MPI_VOLUME, "mountPath": frameworks.MPI_DIR, "readOnly": True})
        else:
            mpi.run_sshd(main, layout)
    set_env(main, env)
    wait = peer_wait.wait_for_peer(topo, replica, main)
    if wait is not None:  # first: the job's own init containers may need the peer too
        others = [c for c in pod_spec.get("initContainers") or [] if c.get("name") != wait["name"]]
        pod_spec["initContainers"] = [wait, *others]
    pod = child_object("v1", "Pod", job, replica.name, spec=pod_spec)
    pod["metadata"]["labels"] = labels
    if annotations:
        pod["metadata"]["annotations"] = annotations
    return pod


def _launcher_job(pod: dict[str, Any], backoff_limit: Any) -> dict[str, Any]:
    """The launcher pod, as the batch Job that runs it and retries it (launcher.py says why)."""
    meta = pod["metadata"]
    template_meta: dict[str, Any] = {"labels": dict(meta.get("labels") or {})}
    if meta.get("annotations"):
        template_meta["annotations"] = dict(meta["annotations"])
    spec: dict[str, Any] = {"template": {"metadata": template_meta,
                                         "spec": {**pod["spec"], "restartPolicy": LAUNCHER_RESTART_POLICY}}}
    if isinstance(backoff_limit, int) and not isinstance(backoff_limit, bool) and backoff_limit >= 0:
        spec["backoffLimit"] = backoff_limit
    job_meta = {k: v for k, v in meta.items() if k != "annotations"}
    return {"apiVersion": LAUNCHER_JOB_API, "kind": LAUNCHER_JOB_KIND, "metadata": job_meta, "spec": spec}


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


def main_container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
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
    reserved = frameworks.FRAMEWORK_ENV_NAMES | set(CHECKPOINT_ENV) | {name for _, name in MODEL_CONFIG_ENV}
    values = {**_mapping(spec.get("hyperparameters")), **_mapping(_mapping(spec.get("modelConfig")).get(
        "hyperparameters"))}
    return [(str(k), str(values[k])) for k in sorted(values) if k not in reserved]


def _model_config(spec: dict[str, Any]) -> Env:
    config = _mapping(spec.get("modelConfig"))
    return [(name, str(config[field])) for field, name in MODEL_CONFIG_ENV if config.get(field)]


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


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


def set_env(main: dict[str, Any], env: Env) -> None:
    owned = {name for name, _ in env}
    kept = [e for e in main.get("env") or [] if not (isinstance(e, dict) and e.get("name") in owned)]
    main["env"] = kept + [{"name": name, "value": value} for name, value in env]


def name_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")
