"""A real control plane on loopback: etcd and kube-apiserver as child processes, the real kubectl.

No kubelet, scheduler or controller-manager: objects are stored and admitted, nothing runs. The
binaries come from `make control-plane` (etcd from Debian's etcd-server package, kube-apiserver
built from k8s.io/kubernetes at the version in tools/control-plane/VERSION, cached under
~/.cache/mlgate/k8s/v<version>/). Certificates come from the project's own `mlgate_certs`.

Every process is started here with its own log file in the run's temp dir and stopped by its own
PID; on Linux each child also gets SIGTERM if the test process dies without cleaning up.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from mlgate_certs.bundle import write_atomic
from mlgate_certs.pki import new_key
from mlgate_certs.throwaway import ThrowawayPKI, throwaway_pki

REPO = Path(__file__).resolve().parents[2]
VERSION_FILE = REPO / "tools" / "control-plane" / "VERSION"
BUILD_COMMAND = "make control-plane"
START_TIMEOUT = 60.0
KUBECTL_TIMEOUT = 30.0
CRD_DIRS = (REPO / "manifests" / "crds", REPO / "tests" / "e2e_crds")
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")  # then a missing control plane fails


class HarnessError(RuntimeError):
    """The control plane could not be found or started; the message says what to do."""


# --- binaries ---------------------------------------------------------------------------------

def pinned_version() -> str:
    return VERSION_FILE.read_text(encoding="utf-8").strip()


def cache_dir(version: str | None = None) -> Path:
    root = os.environ.get("MLGATE_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlgate" / "k8s")
    return Path(root) / f"v{version or pinned_version()}"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kubectl: Path


def find_binaries() -> Binaries:
    """The three binaries, or a HarnessError naming each missing one and the command that installs it."""
    missing: list[str] = []
    etcd = os.environ.get("MLGATE_ETCD") or shutil.which("etcd")
    if not etcd:
        missing.append("etcd (Debian package etcd-server)")
    apiserver = Path(os.environ.get("MLGATE_KUBE_APISERVER") or cache_dir() / "kube-apiserver")
    if not os.access(apiserver, os.X_OK):
        missing.append(f"kube-apiserver v{pinned_version()} ({apiserver})")
    kubectl = shutil.which("kubectl")
    if not kubectl:
        missing.append("kubectl (on PATH)")
    if missing:
        raise HarnessError(f"control plane binaries missing: {'; '.join(missing)}. Build/install them with "
                           f"`{BUILD_COMMAND}` (kubectl is not installed by it)")
    return Binaries(Path(etcd or ""), apiserver, Path(kubectl or ""))


# --- processes --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when the test process goes away (Linux prctl)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Process:
    """One child process with its log file; stopped by its own PID only."""

    name: str
    args: Sequence[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(self.args)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(list(self.args), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=self.env,
                                          preexec_fn=_die_with_parent)  # noqa: PLW1509 - no threads fork here
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        self.popen = None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return f"(no log at {self.log})"
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise HarnessError(f"{self.name} exited with code {self.popen.returncode}; log {self.log}:\n"
                               f"{self.tail()}")


def wait_for(what: str, probe: Callable[[], bool], timeout: float, *, interval: float = 0.2,
             alive: Callable[[], None] | None = None) -> None:
    """Call `probe` until it returns True; HarnessError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        if probe():
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# --- the control plane ------------------------------------------------------------------------

@dataclass
class ControlPlane:
    binaries: Binaries
    directory: Path
    processes: list[Process] = field(default_factory=list)
    pki: ThrowawayPKI | None = None
    etcd_port: int = 0
    api_port: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    def prepare(self) -> None:
        """The PKI, the API server's port and the kubeconfig, before anything runs: a client can be given the
        kubeconfig of a control plane that does not exist yet, and the plane started later answers it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.pki is None:
            self.pki = throwaway_pki(self.directory / "pki")
        self.api_port = self.api_port or free_port()
        self._write_kubeconfig()

    def start(self) -> None:
        self.prepare()
        self._service_account_keys()
        self._start_etcd()
        self._start_apiserver()
        self.install_crds()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def tails(self, lines: int = 40) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid}, log {p.log}), last {lines} lines:\n{p.tail(lines)}"
                         for p in self.processes)

    def _service_account_keys(self) -> None:
        key = new_key("rsa")
        pki = self.directory / "pki"
        write_atomic(pki / "sa.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()), private=True)
        write_atomic(pki / "sa.pub", key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def _start_etcd(self) -> None:
        self.etcd_port, peer = free_port(), free_port()
        client, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        etcd = Process("etcd", [
            str(self.binaries.etcd), "--name", "mlgate-e2e", "--data-dir", str(self.directory / "etcd-data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"mlgate-e2e={peer_url}", "--log-level", "warn",
        ], self.directory / "etcd.log").start()
        self.processes.append(etcd)
        wait_for(f"etcd on {client}/health", lambda: _etcd_healthy(client), START_TIMEOUT, alive=etcd.check_alive)

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        pki = self.directory / "pki"
        apiserver = Process("kube-apiserver", [
            str(self.binaries.kube_apiserver), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--cert-dir={pki}", f"--tls-cert-file={self.pki.server_cert}",
            f"--tls-private-key-file={self.pki.server_key}",
            f"--secure-port={self.api_port}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--client-ca-file={self.pki.ca_cert}", "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            # on in OpenShift: setting blockOwnerDeletion needs update on the owner's finalizers
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            f"--service-account-issuer=https://127.0.0.1:{self.api_port}",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--v=1",
        ], self.directory / "kube-apiserver.log").start()
        self.processes.append(apiserver)
        wait_for(f"kube-apiserver {self.server}/readyz", lambda: self.get("/readyz")[0] == 200, START_TIMEOUT,
                 interval=0.25, alive=apiserver.check_alive)
        wait_for("the default namespace", lambda: self.get("/api/v1/namespaces/default")[0] == 200, START_TIMEOUT,
                 alive=apiserver.check_alive)

    def _write_kubeconfig(self) -> None:
        assert self.pki is not None
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "mlgate-e2e", "preferences": {},
            "clusters": [{"name": "mlgate-e2e", "cluster": {"server": self.server,
                                                            "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "admin", "user": {"client-certificate": str(self.pki.admin_cert),
                                                 "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": "mlgate-e2e", "context": {"cluster": "mlgate-e2e", "user": "admin"}}],
        }
        write_atomic(self.kubeconfig, yaml.safe_dump(config).encode(), private=True)

    def install_crds(self) -> None:
        for directory in CRD_DIRS:
            self.kubectl("apply", "--server-side", "-k", str(directory)).check()
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all", timeout=70).check()

    # --- clients ----------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def get(self, path: str) -> tuple[int, bytes]:
        """GET from the API server as the admin; (0, reason) when it does not answer."""
        try:
            with urllib.request.urlopen(self.server + path, context=self.ssl_context(), timeout=5) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())
        except (OSError, ssl.SSLError) as exc:
            return 0, str(exc).encode()

    def kubectl(self, *args: str, stdin: str | dict[str, Any] | list[dict[str, Any]] | None = None,
                timeout: float = KUBECTL_TIMEOUT) -> Result:
        """Run the real kubectl against this control plane."""
        if isinstance(stdin, dict | list):
            stdin = to_json(stdin)
        command = [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}",
                   f"--cache-dir={self.directory / 'kubectl-cache'}", *args]
        try:
            done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout,
                                  check=False, env={**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        except subprocess.TimeoutExpired as exc:
            return Result(command[3:], 124, _text(exc.stdout), f"kubectl timed out after {timeout:g}s")
        return Result(command[3:], done.returncode, done.stdout, done.stderr)

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        return json.loads(self.kubectl(*args).check().stdout)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Result:
    """What one kubectl call printed and returned."""

    args: Sequence[str]
    code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> Result:
        if self.code != 0:
            raise AssertionError(f"kubectl {' '.join(self.args)} exited {self.code}:\n{self.output}")
        return self

    def __str__(self) -> str:
        return f"kubectl {' '.join(self.args)} -> {self.code}\n{self.output}"


def _etcd_healthy(client: str) -> bool:
    try:
        with urllib.request.urlopen(client + "/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def to_json(objects: dict[str, Any] | list[dict[str, Any]]) -> str:
    """JSON for kubectl: PyYAML writes the string "3e-5" unquoted, and kubectl's YAML reads that as a number."""
    if isinstance(objects, list):
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    return json.dumps(objects)


def to_yaml(objects: dict[str, Any] | list[dict[str, Any]]) -> str:
    documents = objects if isinstance(objects, list) else [objects]
    return yaml.safe_dump_all(documents, sort_keys=False)


def ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()


def started_plane(directory: Path, plane_type: type[ControlPlane] = ControlPlane) -> ControlPlane:
    """A started control plane for a test fixture, which stops it. Missing binaries skip the test, or fail it with
    CI=true; a plane that does not start fails it with the tails of its logs."""
    return start_or_fail(plane_type(binaries_or_skip(), directory))


def binaries_or_skip() -> Binaries:
    """The control plane's binaries; missing, they skip the test, or fail it with CI=true."""
    import pytest  # only fixtures call this: the demo script imports the harness without pytest

    try:
        return find_binaries()
    except HarnessError as exc:
        if CI:
            pytest.fail(f"CI=true and the control plane is mandatory: {exc}", pytrace=False)
        pytest.skip(str(exc))


def start_or_fail(plane: ControlPlane) -> ControlPlane:
    """`plane` started; one that does not start fails the test with the tails of its logs."""
    import pytest

    try:
        plane.start()
    except (HarnessError, AssertionError, OSError) as exc:
        plane.stop()
        pytest.fail(f"the control plane did not start: {exc}\n{plane.tails()}", pytrace=False)
    return plane
