"""An MPI job's launcher: a batch Job that retries, created once every worker is Ready (pure; no I/O).

As mpi-operator v2beta1 does it (kubeflow/mpi-operator v0.6.0 `pkg/controller/mpi_job_controller.go`:
newLauncherJob, countReadyWorkerPods; `pkg/apis/kubeflow/v2beta1/default.go`):
- The launcher is a `batch/v1` Job `<job>-launcher-0` (desired.py's `_launcher_job`; the name the launcher pod
  had, so its hostname and the name limits stay), whose pod template is the launcher pod the job renders, with
  `restartPolicy: OnFailure` (mpi-operator's DefaultLauncherRestartPolicy) and `backoffLimit` =
  `runPolicy.backoffLimit` (unset: the Job API's default, 6). `mpirun` fails at once when a worker has no DNS
  record yet or sshd is not up, and the Job retries it with the kubelet's back-off instead of failing the job.
- It is created only when every worker pod is Ready (mpi-operator's `launcherCreationPolicy:
  WaitForWorkersReady`; its default, AtStartup, is what made the first `mpirun` race the workers). A worker
  that becomes not Ready later does not take the launcher away.
- Its outcome is the Job's: the Complete or Failed condition (set once the Job's pods are done), else running
  while it has active pods. `launcher_as_pod` shows it to status.py as the pod it replaces, so the success rule
  (LauncherSucceeded) and the replica counts read it as before. The Job's pods are the Job's, not the
  TrainingJob's (their ownerReference is the Job), so the reconciler never restarts or counts them itself.
"""

from __future__ import annotations

from typing import Any

from .desired import LAUNCHER_JOB_KIND, REPLICA_TYPE_LABEL

LAUNCHER_ROLE = "launcher"  # REPLICA_TYPE_LABEL's value


def is_launcher_job(child: dict[str, Any]) -> bool:
    return child.get("kind") == LAUNCHER_JOB_KIND and \
        (child.get("metadata") or {}).get("labels", {}).get(REPLICA_TYPE_LABEL) == LAUNCHER_ROLE


def workers_ready(pods: list[dict[str, Any]]) -> bool:
    """Every worker pod the job wants exists and is Ready (countReadyWorkerPods == len(workers))."""
    workers = [p for p in pods if (p["metadata"].get("labels") or {}).get(REPLICA_TYPE_LABEL) == "worker"]
    return bool(workers) and all(_ready(p) for p in workers)


def waiting_for_workers(desired: list[dict[str, Any]], existing: set[tuple[str, str, str]],
                        pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`desired` without a launcher Job that does not exist yet while a worker is not Ready."""
    wanted = sum(1 for c in desired if c["kind"] == "Pod"
                 and c["metadata"]["labels"].get(REPLICA_TYPE_LABEL) == "worker")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ready = workers_ready(live) and sum(
        1 for p in live if (p["metadata"].get("labels") or {}).get(REPLICA_TYPE_LABEL) == "worker") >= wanted
    return [c for c in desired if ready or not is_launcher_job(c)
            or (c["apiVersion"], c["kind"], c["metadata"]["name"]) in existing]


def launcher_as_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The launcher Job as status.py reads a pod: its labels, and a phase from the Job's status."""
    status = job.get("status") or {}
    done = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in done:
        phase = "Succeeded"
    elif "Failed" in done:
        phase = "Failed"
    else:
        phase = "Running" if status.get("active") or status.get("ready") else "Pending"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": job["metadata"], "status": {"phase": phase}}


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
