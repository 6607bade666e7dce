"""The objects the review budget (review_budget.toml) is counted on: the webhook benchmark's PyTorchJob and
one real upstream manifest per kind where the repository keeps one (tests/fixtures/real/SOURCES.md names them)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.builders import pod_spec

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"


def bench_pytorchjob() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from webhook_bench import pytorchjob
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return pytorchjob()


def real(name: str) -> Callable[[], dict[str, Any]]:
    def load() -> dict[str, Any]:
        documents = [d for d in yaml.safe_load_all((REAL / name).read_text(encoding="utf-8")) if d]
        return dict(documents[0])
    return load


def gpu_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "ml"},
            "spec": pod_spec("main", 1)}


OBJECTS: dict[str, Callable[[], dict[str, Any]]] = {
    "pytorchjob": bench_pytorchjob,
    "raycluster": real("kuberay-raycluster-sample.yaml"),
    "jobset": real("jobset-jobset-pytorch-resnet.yaml"),
    "deployment": real("gke-samples-deployment-vllm-gemma-3-1b-it-gpu.yaml"),
    "pod": gpu_pod,
}
