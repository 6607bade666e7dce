"""Objects the e2e tests apply, and what the offline CLI says about them (the expected online verdict)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from control_plane import REPO, to_yaml

NamespaceFactory = Callable[..., str]  # the make_namespace fixture: labels in, a fresh namespace's name out

EXAMPLES = REPO / "examples"
MLGATE = [sys.executable, "-m", "mlgate"]
VOLCANO = {"mlgate.dev/scheduler": "volcano"}
OUT_OF_WEBHOOK = {"mlgate.dev/ignore": "true"}  # the shipped webhook configurations skip such namespaces
SHIPPED_POLICY_ARGS = ["-p", str(REPO / "policies"), "-p", str(EXAMPLES / "policies" / "gang-volcano.yaml")]


def example(name: str) -> dict[str, Any]:
    data = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out.setdefault("metadata", {})["namespace"] = namespace
    return out


def trainingjob(name: str, **spec: Any) -> dict[str, Any]:
    """A small TrainingJob the shipped policies admit, which the defaults policy still fills in."""
    body: dict[str, Any] = {"framework": "pytorch", "image": "registry.example/train:1.0", "replicas": 2,
                            "resources": {"gpu": 1, "cpu": "4", "memory": "16Gi"},
                            "checkpoint": {"uri": f"s3://ml-checkpoints/{name}"}}
    body.update(spec)
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def pytorchjob(name: str, limits: dict[str, Any], workers: int = 1) -> dict[str, Any]:
    def role(replicas: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "registry.example/train:1.0", "resources": {"limits": limits}}
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": role(1), "Worker": role(workers)}}}


def _offline(command: str, obj: dict[str, Any], namespace_labels: dict[str, str] | None, tmp: Path,
             *extra: str) -> subprocess.CompletedProcess[str]:
    tmp.mkdir(parents=True, exist_ok=True)
    # JSON: PyYAML would write "3e-5" unquoted, which go-yaml (and so mlgate) reads as a number
    manifest, facts = tmp / "object.json", tmp / "facts.yaml"
    manifest.write_text(json.dumps(obj), encoding="utf-8")
    namespace = str(obj["metadata"]["namespace"])
    facts.write_text(to_yaml({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": namespace, "labels": namespace_labels or {}}}), encoding="utf-8")
    return subprocess.run([*MLGATE, command, *SHIPPED_POLICY_ARGS, "--facts", str(facts), *extra, str(manifest)],
                          capture_output=True, text=True, timeout=60, check=False)


def offline_mutate(obj: dict[str, Any], tmp: Path, namespace_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """`mlgate mutate` with the policies the webhook serves: the object as the API server should store it."""
    done = _offline("mutate", obj, namespace_labels, tmp)
    assert done.returncode in (0, 1), done.stderr
    return yaml.safe_load(done.stdout)  # type: ignore[no-any-return]


def offline_violations(obj: dict[str, Any], tmp: Path,
                       namespace_labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`mlgate validate -o json`'s findings for `obj` that deny or warn (each has policy, rule, path, message
    and fix), as the webhook says them: a denial, then its warnings."""
    done = _offline("validate", obj, namespace_labels, tmp, "-o", "json")
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)["results"][0]
    return [*result["violations"], *result["warnings"]]


def missing_in(live: Any, expected: Any, path: str = "") -> list[str]:
    """Where `live` lacks what `expected` has: every expected key with its value, lists of the same length
    (a default added twice is a longer list). The API server may add fields of its own (CRD defaults)."""
    if isinstance(expected, dict):
        if not isinstance(live, dict):
            return [f"{path or '/'}: expected an object, got {live!r}"]
        return [m for key, value in expected.items()
                for m in (missing_in(live[key], value, f"{path}/{key}") if key in live else [f"{path}/{key}: missing"])]
    if isinstance(expected, list):
        if not isinstance(live, list) or len(live) != len(expected):
            return [f"{path}: expected {expected!r}, got {live!r}"]
        return [m for index, (a, b) in enumerate(zip(live, expected, strict=True))
                for m in missing_in(a, b, f"{path}/{index}")]
    return [] if live == expected else [f"{path}: expected {expected!r}, got {live!r}"]
