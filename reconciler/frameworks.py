"""Per-framework replica topology and environment of a TrainingJob (pure; no I/O).

Conventions (ml-domain reference §3, Kubeflow training-operator v1.9.0 and mpi-operator v2beta1):
- PyTorch (`pkg/controller.v1/pytorch/envvar.go`): `MASTER_ADDR`, `PET_MASTER_ADDR`, `MASTER_PORT`,
  `PET_MASTER_PORT` (default 23456, port name `pytorchjob-port`), `WORLD_SIZE` = `PET_NNODES` = pods, `RANK` =
  `PET_NODE_RANK` (master 0, worker i -> i+1), `PET_NPROC_PER_NODE`, `PYTHONUNBUFFERED=1`.
  Kubeflow always sets `PET_NPROC_PER_NODE` (nprocPerNode defaults to "auto"), and torchrun's own default is 1, so
  a pod with 4 GPUs launched by torchrun without it uses one. mlgate writes the number "auto" would find on a GPU
  pod: the whole GPUs per replica, 1 for a MIG device or no GPU ("auto" on a CPU pod means os.cpu_count(), the
  node's cores, not the container's). WORLD_SIZE stays the pod count, as upstream with "auto" (torchrun sets the
  per-process WORLD_SIZE itself).
- TensorFlow (`pkg/controller.v1/tensorflow/tensorflow.go` genTFConfigJSONStr): `TF_CONFIG` =
  {"cluster": {"chief"|"worker"|"ps": ["<pod>.<job>.<ns>.svc:<port>", ...]}, "task": {"type", "index"},
  "environment": "cloud"}; port 2222 (`tfjob-port`). `spec.distributedStrategy` picks the roles
  (render.TF_STRATEGY_ROLES): `parameter_server` Chief (the coordinator) + Workers + PS, `multi_worker_mirrored`
  Workers only (worker 0 acts as chief), `mirrored` one Worker and no TF_CONFIG (MirroredStrategy uses the
  pod's own GPUs; training-operator's isDistributed also sets none for a one-pod job). Unset: Chief + Workers
  + PS, each with a TF_CONFIG, as before.
- XGBoost (`pkg/controller.v1/xgboost/envvar.go`): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` (pods), `RANK`
  (worker i -> i+1), `PYTHONUNBUFFERED=1`, and only with more than one replica `WORKER_PORT` and `WORKER_ADDRS`
  (comma list of worker hosts); port 9999 (`xgboostjob-port`).
- MPI (mpi-operator v2beta1 `pkg/controller/mpi_job_controller.go`, OpenMPI): hostfile lines
  `<job>-worker-<i>.<job>.<ns>.svc slots=<gpus per worker, else 1>`; the launcher gets
  `OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile`, `OMPI_MCA_orte_keep_fqdn_hostnames=true`,
  `OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10`, `OMPI_MCA_orte_set_default_slots=<slots>` and blank
  `NVIDIA_VISIBLE_DEVICES`/`NVIDIA_DRIVER_CAPABILITIES` (it never runs as a worker here, so it must not take a
  GPU a runtime would otherwise expose); every pod gets `K_MPI_JOB_ROLE` (launcher | worker). SSH is in mpi.py.
- JAX (`pkg/controller.v1/jax/envvar.go`): `COORDINATOR_ADDRESS` (worker 0's host), `COORDINATOR_PORT` (default
  6666, port name `jaxjob-port`), `NUM_PROCESSES`, `PROCESS_ID`, `PYTHONUNBUFFERED=1`; plus mlgate's own
  `JAX_COORDINATOR_ADDRESS` (host:port, ready for `jax.distributed.initialize(coordinator_address=...)`),
  `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`.

DNS: the reconciler creates ONE headless Service per job, named `<job>`, and every pod sets `hostname=<pod>` and
`subdomain=<job>`, so each pod resolves as `<pod>.<job>.<ns>.svc.<cluster domain>` (mpi-operator and Kubeflow
Trainer v2/JobSet do the same). Kubeflow v1 instead creates a headless Service per replica, which is why its
MASTER_ADDR is the bare `<job>-master-0`; without those Services the bare name does NOT resolve. So addresses
here are `<pod>.<job>` (resolved through the pod's `<ns>.svc.cluster.local` search domain, as Trainer v2's
`<job>-node-0-0.<job>`), and TF_CONFIG / the hostfile use `<pod>.<job>.<ns>.svc` (no cluster domain assumed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mlgate.workloads import render

# framework -> (container port name, default port); MPI has none.
PORTS: dict[str, tuple[str, int]] = {
    "pytorch": ("pytorchjob-port", 23456),
    "tensorflow": ("tfjob-port", 2222),
    "xgboost": ("xgboostjob-port", 9999),
    "jax": ("jaxjob-port", 6666),
}
MPI_DIR = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
MPI_LAUNCHER_ENV = (
    ("OMPI_MCA_orte_default_hostfile", f"{MPI_DIR}/{HOSTFILE_KEY}"),
    ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
    ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
)
MPI_SLOTS_ENV = "OMPI_MCA_orte_set_default_slots"
MPI_ROLE_ENV = "K_MPI_JOB_ROLE"
# blanked on the launcher, as mpi-operator does (nvidiaDisableEnvVars)
NVIDIA_BLANKED = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
# Every name any framework may set: hyperparameters never take these.
FRAMEWORK_ENV_NAMES = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED",
    "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
    "TF_CONFIG", "WORKER_PORT", "WORKER_ADDRS",
    "COORDINATOR_ADDRESS", "COORDINATOR_PORT", "NUM_PROCESSES", "PROCESS_ID",
    "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
    *(name for name, _ in MPI_LAUNCHER_ENV), MPI_SLOTS_ENV, MPI_ROLE_ENV, *NVIDIA_BLANKED,
})

Env = list[tuple[str, str]]


@dataclass(frozen=True)
class Replica:
    role: str  # as render.training_roles spells it: Master, Worker, Chief, PS, Launcher
    index: int  # within the role
    rank: int  # position among all pods of the job, in role order
    name: str  # pod name, also its hostname


@dataclass(frozen=True)
class Topology:
    job: str
    namespace: str
    framework: str
    port: int | None
    slots: int  # MPI slots per worker
    procs_per_pod: int  # torchrun processes per pod: whole GPUs per replica, else 1
    replicas: tuple[Replica, ...]
    strategy: str | None = None  # TensorFlow's spec.distributedStrategy

    def of(self, role: str) -> list[Replica]:
        return [r for r in self.replicas if r.role == role]

    def host(self, replica: Replica) -> str:
        """Short name that resolves from any pod of the job (see the module docstring)."""
        return f"{replica.name}.{self.job}"

    def fqdn(self, replica: Replica) -> str:
        return f"{replica.name}.{self.job}.{self.namespace}.svc"


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role.lower()}-{index}"


def topology(job: str, namespace: str, spec: dict[str, Any], main_container: dict[str, Any]) -> Topology:
    framework = str(spec.get("framework") or "pytorch")
    replicas: list[Replica] = []
    for role, count in render.training_roles(spec):
        for index in range(count):
            replicas.append(Replica(role, index, len(replicas), pod_name(job, role, index)))
    gpu = (spec.get("resources") or {}).get("gpu")
    per_pod = gpu if isinstance(gpu, int) and not isinstance(gpu, bool) and gpu > 0 else 1
    strategy = spec.get("distributedStrategy")
    return Topology(job, namespace, framework, framework_port(framework, main_container), per_pod, per_pod,
                    tuple(replicas), str(strategy) if isinstance(strategy, str) else None)


def framework_port(framework: str, main_container: dict[str, Any]) -> int | None:
    """The port the user declared under the framework's port name, else the framework default."""
    if framework not in PORTS:
        return None
    port_name, default = PORTS[framework]
    for port in main_container.get("ports") or []:
        if isinstance(port, dict) and port.get("name") == port_name and isinstance(port.get("containerPort"), int):
            return int(port["containerPort"])
    return default


def framework_env(topo: Topology, replica: Replica) -> Env:
    if topo.framework == "pytorch":
        return _pytorch(topo, replica)
    if topo.framework == "tensorflow":
        return [] if topo.strategy == "mirrored" else [("TF_CONFIG", tf_config(topo, replica))]
    if topo.framework == "xgboost":
        return _xgboost(topo, replica)
    if topo.framework == "mpi":
        return _mpi(topo, replica)
    if topo.framework == "jax":
        return _jax(topo, replica)
    return []


def _pytorch(topo: Topology, replica: Replica) -> Env:
    master = topo.host(topo.of("Master")[0])
    port, size, rank = str(topo.port), str(len(topo.replicas)), str(replica.rank)
    return [
        ("MASTER_ADDR", master), ("PET_MASTER_ADDR", master),
        ("MASTER_PORT", port), ("PET_MASTER_PORT", port),
        ("WORLD_SIZE", size), ("PET_NNODES", size),
        ("RANK", rank), ("PET_NODE_RANK", rank),
        ("PET_NPROC_PER_NODE", str(topo.procs_per_pod)),
        ("PYTHONUNBUFFERED", "1"),
    ]


def tf_config(topo: Topology, replica: Replica) -> str:
    cluster: dict[str, list[str]] = {}
    for other in topo.replicas:
        cluster.setdefault(other.role.lower(), []).append(f"{topo.fqdn(other)}:{topo.port}")
    config = {"cluster": cluster, "task": {"type": replica.role.lower(), "index": replica.index},
              "environment": "cloud"}
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _xgboost(topo: Topology, replica: Replica) -> Env:
    port = str(topo.port)
    env = [
        ("MASTER_ADDR", topo.host(topo.of("Master")[0])), ("MASTER_PORT", port),
        ("WORLD_SIZE", str(len(topo.replicas))), ("RANK", str(replica.rank)),
        ("PYTHONUNBUFFERED", "1"),
    ]
    if len(topo.replicas) > 1:  # one replica: upstream sets neither
        env.append(("WORKER_PORT", port))
        env.append(("WORKER_ADDRS", ",".join(topo.host(w) for w in topo.of("Worker"))))
    return env


def _mpi(topo: Topology, replica: Replica) -> Env:
    if replica.role != "Launcher":
        return [(MPI_ROLE_ENV, "worker")]
    return [(MPI_ROLE_ENV, "launcher"), *MPI_LAUNCHER_ENV, (MPI_SLOTS_ENV, str(topo.slots)),
            *((name, "") for name in NVIDIA_BLANKED)]


def _jax(topo: Topology, replica: Replica) -> Env:
    coordinator, port = topo.host(topo.of("Worker")[0]), str(topo.port)
    count, rank = str(len(topo.replicas)), str(replica.rank)
    return [
        ("COORDINATOR_ADDRESS", coordinator), ("COORDINATOR_PORT", port),
        ("NUM_PROCESSES", count), ("PROCESS_ID", rank),
        ("JAX_COORDINATOR_ADDRESS", f"{coordinator}:{port}"),
        ("JAX_NUM_PROCESSES", count), ("JAX_PROCESS_ID", rank),
        ("PYTHONUNBUFFERED", "1"),
    ]


def hostfile(topo: Topology) -> str:
    """OpenMPI hostfile: one line per worker, `slots` = GPUs per worker (1 without GPUs)."""
    return "".join(f"{topo.fqdn(w)} slots={topo.slots}\n" for w in topo.of("Worker"))
