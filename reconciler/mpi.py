"""What an MPI TrainingJob's pods need to reach each other over SSH (pure; no I/O, no random numbers).

As mpi-operator v2beta1 does it (kubeflow/mpi-operator v0.6.0 `pkg/controller/mpi_job_controller.go`:
newSSHAuthSecret, setupSSHOnPod, newWorker; `pkg/apis/kubeflow/v2beta1/default.go`):
- a Secret `<job>-ssh` of type `kubernetes.io/ssh-auth` with `ssh-privatekey` and `ssh-publickey`; its keys are
  made once, when the reconciler creates it (sshkeys.py), and never rewritten, so a restarted launcher still
  reaches workers that started earlier; the private key lives only in that Secret;
- in every pod, the Secret mounted at `spec.mpi.sshAuthMountPath` (default `/root/.ssh`, mpi-operator's
  default): `id_rsa`, `id_rsa.pub`, `authorized_keys`; mode 0600 only at `/root/.ssh`, as upstream: elsewhere the
  files keep the volume's default 0644, so a non-root user can read keys owned by root;
- workers run sshd. A TrainingJob has one command for all replicas: for MPI it is the launcher's (`mpirun ...`),
  and workers always run sshd, as mpi-operator's workers do when their template sets none.

Two ways sshd runs, chosen by the mount path as upstream:
- root (`/root/.ssh`): `/usr/sbin/sshd -De` with the image's `/etc/ssh/sshd_config`. Its privilege separation
  chroots to /run/sshd and changes uid, so it needs SYS_CHROOT, SETUID and SETGID (ROOT_SSHD_CAPABILITIES; all in
  the container runtime's default set); admission's defaults keep the capabilities of a container that may run
  as root (mlgate/rules/defaults.py). The image's sshd_config must say `StrictModes no`: a Secret volume's files
  and directories are not what StrictModes accepts, whatever the mode (kubeflow/mpi-operator#424), and
  mpi-operator's base image sets it (build/base/Dockerfile).
- non-root (any other path, a user's `~/.ssh`): `/usr/sbin/sshd -De -f <home>/.sshd_config`, the file
  mpi-operator's base image writes for mpiuser (build/base/sshd_config: PidFile and HostKey in the home,
  StrictModes no; build/base/Dockerfile appends `Port 2222`, and sets `Port 2222` in /etc/ssh/ssh_config for the
  launcher's ssh). The template sets the user's runAsUser, as the upstream pi example does (runAsUser: 1000).
  Without privilege separation it needs no capability, but the base image gives sshd the file capability
  NET_BIND_SERVICE with the effective bit (`setcap CAP_NET_BIND_SERVICE=+eip`), and the kernel refuses to exec
  such a binary when the bounding set lacks it (capabilities(7), "Safety checking for capability-dumb
  binaries"): `drop: [ALL]` must add NET_BIND_SERVICE back (admission's defaults do).
`sshd_blockers` states both as data, for tests and for anyone reading a worker's securityContext.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from mlgate.rules.defaults import runs_as_non_root

SSH_SECRET_SUFFIX = "-ssh"
SSH_SECRET_TYPE = "kubernetes.io/ssh-auth"
PRIVATE_KEY, PUBLIC_KEY = "ssh-privatekey", "ssh-publickey"  # corev1.SSHAuthPrivateKey, mpi-operator's sshPublicKey
SSH_VOLUME = "ssh-auth"
ROOT_SSH_DIR = "/root/.ssh"  # mpi-operator's default sshAuthMountPath
ROOT_SSH_MODE = 0o600  # only at /root/.ssh, as upstream; sshd still needs StrictModes no (mpi-operator#424)
SSH_ITEMS = (
    {"key": PRIVATE_KEY, "path": "id_rsa"},
    {"key": PUBLIC_KEY, "path": "id_rsa.pub"},
    {"key": PUBLIC_KEY, "path": "authorized_keys"},
)
SSHD = "/usr/sbin/sshd"
NON_ROOT_SSHD_CONFIG = ".sshd_config"  # in the user's home, as mpi-operator's base image writes it
ROOT_SSHD_CAPABILITIES = ("SYS_CHROOT", "SETUID", "SETGID")  # privilege separation: chroot, then another uid
NON_ROOT_SSHD_CAPABILITIES = ("NET_BIND_SERVICE",)  # in the bounding set: the base image's sshd carries it (+eip)


@dataclass(frozen=True)
class SshLayout:
    """Where the keys go and how sshd starts (see the module docstring)."""

    mount_path: str = ROOT_SSH_DIR

    @property
    def as_root(self) -> bool:
        return self.mount_path == ROOT_SSH_DIR

    @property
    def worker_command(self) -> list[str]:
        if self.as_root:
            return [SSHD, "-De"]
        return [SSHD, "-De", "-f", posixpath.join(posixpath.dirname(self.mount_path), NON_ROOT_SSHD_CONFIG)]


def ssh_layout(spec: dict[str, Any]) -> SshLayout:
    path = (spec.get("mpi") or {}).get("sshAuthMountPath") if isinstance(spec.get("mpi"), dict) else None
    return SshLayout(str(path)) if isinstance(path, str) and path else SshLayout()


def ssh_secret_name(job: str) -> str:
    return f"{job}{SSH_SECRET_SUFFIX}"


def ssh_secret_body() -> dict[str, Any]:
    """The Secret's type; its data is filled in once, at creation (sshkeys.with_ssh_keys)."""
    return {"type": SSH_SECRET_TYPE}


def ssh_volume(job: str, layout: SshLayout) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the SSH Secret, for every pod of the job."""
    secret: dict[str, Any] = {"secretName": ssh_secret_name(job), "items": [dict(item) for item in SSH_ITEMS]}
    if layout.as_root:
        secret["defaultMode"] = ROOT_SSH_MODE
    return {"name": SSH_VOLUME, "secret": secret}, {"name": SSH_VOLUME, "mountPath": layout.mount_path}


def run_sshd(main: dict[str, Any], layout: SshLayout) -> None:
    """A worker's main container runs sshd, whatever command the job gave its launcher."""
    main["command"] = layout.worker_command
    main.pop("args", None)


def sshd_blockers(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """Why the sshd `container` runs could not start under its securityContext (empty: nothing stops it)."""
    pod_sc = pod_spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return []
    command = [str(part) for part in [*(container.get("command") or []), *(container.get("args") or [])]]
    non_root = runs_as_non_root(pod_sc, sc)
    needed = NON_ROOT_SSHD_CAPABILITIES if non_root else ROOT_SSHD_CAPABILITIES
    capabilities = sc.get("capabilities") or {}
    dropped = {str(c) for c in capabilities.get("drop") or []}
    added = {str(c) for c in capabilities.get("add") or []}
    missing = [c for c in needed if (c in dropped or "ALL" in dropped) and c not in added]
    why = []
    if missing:
        user = "a non-root sshd with the file capability" if non_root else "root sshd's privilege separation"
        why.append(f"{user} needs {', '.join(missing)}, which capabilities.drop removes")
    if non_root and "-f" not in command:
        why.append("a non-root sshd cannot read /etc/ssh's host keys: it needs -f <home>/.sshd_config")
    return why
