"""The webhook under test: `python -m mlgate_webhook serve` as a real process on 127.0.0.1:<free port>.

It has its own throw-away CA (not the API server's), so a wrong caBundle fails the call. It is
registered with the configurations shipped in manifests/webhooks.yaml, with `clientConfig.service`
replaced by `url` and the CA as `caBundle`: the rules, selectors and failure policies under test
are the shipped ones.
"""

from __future__ import annotations

import copy
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from control_plane import REPO, ControlPlane, HarnessError, Process, Result, ca_bundle, free_port, wait_for

from mlgate_certs.throwaway import ThrowawayPKI, throwaway_pki

WEBHOOKS_YAML = REPO / "manifests" / "webhooks.yaml"
SHIPPED_POLICIES = REPO / "policies"
REGISTER_TIMEOUT = 60.0
T = TypeVar("T")


def webhook_configurations(url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """manifests/webhooks.yaml with every `clientConfig.service` turned into `url` + `caBundle`."""
    documents = [d for d in yaml.safe_load_all(WEBHOOKS_YAML.read_text(encoding="utf-8")) if d]
    out = []
    for original in documents:
        document = copy.deepcopy(original)
        for hook in document["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": f"{url}{service.get('path') or '/'}", "caBundle": ca_bundle(ca_pem)}
        out.append(document)
    return out


@dataclass
class WebhookProcess:
    cluster: ControlPlane
    directory: Path
    policy_paths: tuple[Path, ...] = (SHIPPED_POLICIES,)
    port: int = 0
    pki: ThrowawayPKI | None = None
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart, on the same port) and wait for /readyz: policies, TLS and cluster facts."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.pki is None:
            self.pki = throwaway_pki(self.directory / "pki", admin_name="unused")
        self.port = self.port or free_port()
        args = [sys.executable, "-m", "mlgate_webhook", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--cert-file", str(self.pki.server_cert), "--key-file", str(self.pki.server_key),
                "--kubeconfig", str(self.cluster.kubeconfig), "--state-dir", str(self.directory / "state"),
                "--log-level", "info"]
        for path in self.policy_paths:
            args += ["-p", str(path)]
        if self.process is None:  # one Process (and log) across restarts
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.process = Process("mlgate webhook", args, self.directory / "webhook.log", env=env)
            self.cluster.processes.append(self.process)
        self.process.start()
        wait_for(f"the webhook's {self.url}/readyz", lambda: self.readyz()[0] == 200, timeout,
                 interval=0.2, alive=self.process.check_alive)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def ssl_context(self) -> ssl.SSLContext:
        assert self.pki is not None
        return ssl.create_default_context(cafile=str(self.pki.ca_cert))

    def readyz(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.url + "/readyz", context=self.ssl_context(), timeout=3) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), json.loads(exc.read() or b"{}")
        except (OSError, ValueError) as exc:
            return 0, {"error": str(exc)}

    def configurations(self) -> list[dict[str, Any]]:
        assert self.pki is not None
        return webhook_configurations(self.url, self.pki.ca_cert.read_bytes())

    def register(self, probe_namespace: str) -> None:
        """Apply the configurations and wait until the API server calls both webhooks."""
        self.cluster.kubectl("apply", "-f", "-", stdin=self.configurations()).check()
        self.wait_until_called(probe_namespace)

    def wait_until_called(self, namespace: str, timeout: float = REGISTER_TIMEOUT) -> None:
        """The API server loads webhook configurations asynchronously: dry-run a known-bad and a
        to-be-defaulted object until the verdicts come from mlgate."""
        bad, needs_default = probe_objects()
        eventually(f"the validating webhook to deny a known-bad TrainingJob in {namespace}",
                   lambda: self._denies(bad, namespace), timeout)
        eventually(f"the mutating webhook to default a PyTorchJob in {namespace}",
                   lambda: self._defaults(needs_default, namespace), timeout)

    def _denies(self, obj: dict[str, Any], namespace: str) -> Result | None:
        result = self.cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=obj)
        return result if not result.ok and "[gpu/gpu.max]" in result.stderr else None

    def _defaults(self, obj: dict[str, Any], namespace: str) -> Result | None:
        result = self.cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                                      stdin=obj)
        if not result.ok:
            return None
        container = json.loads(result.stdout)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
            "containers"][0]
        return result if (container.get("resources") or {}).get("requests") else None


def probe_objects() -> tuple[dict[str, Any], dict[str, Any]]:
    bad = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "probe-too-many-gpus"},
           "spec": {"framework": "pytorch", "image": "registry.example/train:1.0", "replicas": 1,
                    "resources": {"gpu": 64}}}
    container = {"name": "pytorch", "image": "registry.example/mnist:1.0",
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}
    needs_default = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "probe-defaults"},
                     "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "OnFailure",
                                                                 "template": {"spec": {"containers": [container]}}}}}}
    return bad, needs_default


def eventually(what: str, attempt: Callable[[], T | None], timeout: float, interval: float = 0.3) -> T:
    """Call `attempt` until it returns something other than None (bounded: HarnessError after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = attempt()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def dry_run(cluster: ControlPlane, obj: dict[str, Any], namespace: str) -> Result:
    return cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=obj)


def until_verdict(cluster: ControlPlane, obj: dict[str, Any], namespace: str, *, denied_with: str | None = None,
                  timeout: float = 30.0) -> Result:
    """Dry-run create `obj` until it is denied with `denied_with` in the message, or admitted when that is None.

    The webhook's facts and cluster policies come from watches, so a change shows after a short lag."""
    def attempt() -> Result | None:
        result = dry_run(cluster, obj, namespace)
        if denied_with is None:
            return result if result.ok else None
        return result if result.code == 1 and denied_with in result.stderr else None

    want = f"denied with {denied_with!r}" if denied_with else "admitted"
    return eventually(f"{obj['kind']} {obj['metadata']['name']} to be {want} in {namespace}", attempt, timeout)
