"""What an MPI TrainingJob's pods need to reach each other over SSH (pure; no I/O, no random numbers).

As mpi-operator v2beta1 does it (`pkg/controller/mpi_job_controller.go`: newSSHAuthSecret, setupSSHOnPod,
newWorker):
- a Secret `<job>-ssh` of type `kubernetes.io/ssh-auth` with `ssh-privatekey` and `ssh-publickey`; its keys are
  made once, when the reconciler creates it (sshkeys.py), and never rewritten, so a restarted launcher still
  reaches workers that started earlier; the private key lives only in that Secret;
- in every pod, the Secret mounted at `/root/.ssh` with mode 0600: `id_rsa`, `id_rsa.pub`, `authorized_keys`;
- workers run `/usr/sbin/sshd -De`. A TrainingJob has one command for all replicas: for MPI it is the launcher's
  (`mpirun ...`), and workers always run sshd, as mpi-operator's workers do when their template sets none.
"""

from __future__ import annotations

from typing import Any

SSH_SECRET_SUFFIX = "-ssh"
SSH_SECRET_TYPE = "kubernetes.io/ssh-auth"
PRIVATE_KEY, PUBLIC_KEY = "ssh-privatekey", "ssh-publickey"  # corev1.SSHAuthPrivateKey, mpi-operator's sshPublicKey
SSH_VOLUME = "ssh-auth"
SSH_DIR = "/root/.ssh"
SSH_MODE = 0o600  # sshd refuses keys others can read (StrictModes)
SSH_ITEMS = (
    {"key": PRIVATE_KEY, "path": "id_rsa"},
    {"key": PUBLIC_KEY, "path": "id_rsa.pub"},
    {"key": PUBLIC_KEY, "path": "authorized_keys"},
)
WORKER_COMMAND = ["/usr/sbin/sshd", "-De"]


def ssh_secret_name(job: str) -> str:
    return f"{job}{SSH_SECRET_SUFFIX}"


def ssh_secret_body() -> dict[str, Any]:
    """The Secret's type; its data is filled in once, at creation (sshkeys.with_ssh_keys)."""
    return {"type": SSH_SECRET_TYPE}


def ssh_volume(job: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the SSH Secret, for every pod of the job."""
    volume = {"name": SSH_VOLUME, "secret": {"secretName": ssh_secret_name(job), "defaultMode": SSH_MODE,
                                             "items": [dict(item) for item in SSH_ITEMS]}}
    return volume, {"name": SSH_VOLUME, "mountPath": SSH_DIR}


def run_sshd(main: dict[str, Any]) -> None:
    """A worker's main container runs sshd, whatever command the job gave its launcher."""
    main["command"] = list(WORKER_COMMAND)
    main.pop("args", None)
