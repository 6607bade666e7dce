"""The chart charts/mlgate, the real helm CLI and the kustomize base it must match.

helm is built by tools/control-plane/helm.sh (`make control-plane`) from helm.sh/helm/v3 at the version in
tools/control-plane/HELM_VERSION, cached in ~/.cache/mlgate/helm/v<version>/helm. Every helm call gets its
own config, cache and data directories, so the tests never read or write the user's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mlgate"
MANIFESTS = REPO / "manifests"
HELM_VERSION_FILE = REPO / "tools" / "control-plane" / "HELM_VERSION"
BUILD_COMMAND = "make control-plane"
RELEASE, NAMESPACE = "mlgate", "mlgate-system"
TIMEOUT = 120.0
# manifests/webhooks.yaml's fields each webhook keeps under any values.
WEBHOOK_CONFIGMAP = "mlgate-webhook-configurations"  # what the self-managed webhook registers
KEPT = ("rules", "matchConditions", "objectSelector", "admissionReviewVersions", "sideEffects", "timeoutSeconds",
        "matchPolicy", "reinvocationPolicy")

Obj = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name


class HelmMissing(RuntimeError):
    """helm is not built; the message says how to build it."""


def helm_version() -> str:
    return HELM_VERSION_FILE.read_text(encoding="utf-8").strip()


def helm_path() -> Path:
    """The cached helm binary (or $MLGATE_HELM), or HelmMissing with the command that builds it."""
    if os.environ.get("MLGATE_HELM"):
        path = Path(os.environ["MLGATE_HELM"])
    else:
        root = os.environ.get("MLGATE_HELM_CACHE") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlgate" / "helm")
        path = Path(root) / f"v{helm_version()}" / "helm"
    if not os.access(path, os.X_OK):
        raise HelmMissing(f"helm v{helm_version()} is not built ({path}); build it with `{BUILD_COMMAND}`")
    return path


@dataclass(frozen=True)
class Run:
    """What one helm call printed and returned."""

    args: Sequence[str]
    code: int
    stdout: str
    stderr: str

    def check(self) -> Run:
        if self.code != 0:
            raise AssertionError(f"helm {' '.join(self.args)} exited {self.code}:\n{self.stdout}{self.stderr}")
        return self


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path  # HELM_CONFIG_HOME, HELM_CACHE_HOME and HELM_DATA_HOME live under it

    def run(self, *args: str, kubeconfig: Path | None = None, timeout: float = TIMEOUT) -> Run:
        env = {**os.environ, "HELM_CONFIG_HOME": str(self.home / "config"),
               "HELM_CACHE_HOME": str(self.home / "cache"), "HELM_DATA_HOME": str(self.home / "data")}
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        done = subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
        return Run(args, done.returncode, done.stdout, done.stderr)

    def template(self, *args: str, namespace: str = NAMESPACE, values: Obj | None = None) -> Run:
        """`helm template` of the chart, with extra values given as a file (as a user would)."""
        extra: list[str] = []
        if values is not None:
            path = self.home / f"values-{hashlib.sha256(repr(values).encode()).hexdigest()[:12]}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(values), encoding="utf-8")
            extra = ["--values", str(path)]
        return self.run("template", RELEASE, str(CHART), "--namespace", namespace, *extra, *args)

    def render(self, *args: str, namespace: str = NAMESPACE, values: Obj | None = None) -> list[Obj]:
        return documents(self.template(*args, namespace=namespace, values=values).check().stdout)


def documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def by_key(objects: Sequence[Obj]) -> dict[Key, Obj]:
    return {key(o): o for o in objects}


def kustomize(directory: Path = MANIFESTS) -> list[Obj]:
    """What `kubectl kustomize` renders, read at test time (others edit manifests/ too)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise HelmMissing("kubectl (with its built-in kustomize) is not on PATH")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return documents(done.stdout)


def configurations(objects: Sequence[Obj]) -> list[Obj]:
    """The webhook configurations: applied as objects (certs.mode secret), or in the ConfigMap the webhook
    registers them from (`mlgate serve --self-managed`: modes selfManaged and certManager, and kustomize)."""
    out = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
    for o in objects:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == WEBHOOK_CONFIGMAP:
            out += documents(o["data"]["webhooks.yaml"])
    return out


def webhooks(objects: Sequence[Obj]) -> dict[str, Obj]:
    """Every webhook of the two configurations, by kind and name."""
    return {f"{o['kind']}/{hook['name']}": hook for o in configurations(objects) for hook in o["webhooks"]}
