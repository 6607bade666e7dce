"""A reproducible corpus of mixed ML manifests for the benchmarks."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import yaml

SECURE_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_SC = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}


def _container(name: str, gpus: int, rng: random.Random) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": f"registry.example/team-{rng.randint(1, 40)}/train:{rng.randint(1, 9)}.0",
        "command": ["torchrun", "--nproc-per-node", str(max(gpus, 1)), "train.py"],
        "args": ["--epochs", str(rng.randint(1, 90)), "--lr", "0.0003", "--batch-size", "256"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "DATASET", "value": "s3://datasets/imagenet"}],
        "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus}},
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
    }
    roll = rng.random()
    if roll < 0.6:
        container["securityContext"] = copy.deepcopy(SECURE_CONTAINER)
    elif roll < 0.65:
        container["securityContext"] = {"privileged": True}
    if rng.random() < 0.5:
        container["resources"]["requests"] = dict(container["resources"]["limits"])
    return container


def _pod_spec(name: str, gpus: int, rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [_container(name, gpus, rng)],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    }
    if rng.random() < 0.7:
        spec["securityContext"] = copy.deepcopy(POD_SC)
    return spec


def manifest(index: int, rng: random.Random) -> dict[str, Any]:
    """Half the kinds mlgate knew first (PyTorchJob, TFJob, Job, TrainingJob, Pod), half the others a GPU
    platform receives (JobSet, LeaderWorkerSet, RayCluster, Volcano Job, Deployment, and a kind no
    description knows, which the pod-spec search judges)."""
    if index % 2:
        return _other_kind(index, rng)
    index //= 2
    gpus = rng.choice([0, 1, 2, 4, 8, 8, 12])
    meta = {"name": f"job-{index}", "namespace": f"team-{index % 17}", "labels": {"team": f"t{index % 17}"}}
    kind = index % 5
    if kind == 0:
        replicas = {"Master": 1, "Worker": rng.randint(1, 15)}
        specs = {r: {"replicas": n, "restartPolicy": "OnFailure", "template": {"spec": _pod_spec("pytorch", gpus, rng)}}
                 for r, n in replicas.items()}
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                "spec": {"pytorchReplicaSpecs": specs}}
    if kind == 1:
        specs = {r: {"replicas": n, "template": {"spec": _pod_spec("tensorflow", gpus, rng)}}
                 for r, n in {"Chief": 1, "Worker": rng.randint(1, 7), "PS": 2}.items()}
        return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta, "spec": {"tfReplicaSpecs": specs}}
    if kind == 2:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"parallelism": rng.randint(1, 4), "template": {"spec": _pod_spec("main", gpus, rng)}}}
    if kind == 3:
        return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob", "metadata": meta,
                "spec": {"framework": "pytorch", "image": "registry.example/llm:1.0", "replicas": rng.randint(1, 16),
                         "resources": {"gpu": gpus, "cpu": "8", "memory": "64Gi"},
                         "hyperparameters": {"lr": "0.0003", "epochs": "3"},
                         "checkpoint": {"uri": f"s3://ckpt/job-{index}"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _pod_spec("main", gpus, rng)}


def _other_kind(index: int, rng: random.Random) -> dict[str, Any]:
    gpus = rng.choice([0, 1, 2, 4, 8, 8, 12])
    meta = {"name": f"svc-{index}", "namespace": f"team-{index % 17}", "labels": {"team": f"t{index % 17}"}}

    def template(name: str) -> dict[str, Any]:
        return {"metadata": {"labels": {"app": name}}, "spec": _pod_spec(name, gpus, rng)}

    kind = (index // 2) % 6
    if kind == 0:
        jobs = [{"name": "workers", "replicas": rng.randint(1, 4),
                 "template": {"spec": {"parallelism": 4, "completions": 4, "template": template("worker")}}}]
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                "spec": {"replicatedJobs": jobs}}
    if kind == 1:
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
                "spec": {"replicas": rng.randint(1, 3), "leaderWorkerTemplate": {
                    "size": 4, "leaderTemplate": template("leader"), "workerTemplate": template("worker")}}}
    if kind == 2:
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("head")},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": rng.randint(1, 8), "numOfHosts": 1,
                                  "rayStartParams": {}, "template": template("worker")}]}}
    if kind == 3:
        tasks = [{"name": "ps", "replicas": 1, "template": template("ps")},
                 {"name": "worker", "replicas": rng.randint(1, 8), "template": template("worker")}]
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
                "spec": {"minAvailable": 2, "schedulerName": "volcano", "tasks": tasks}}
    if kind == 4:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": rng.randint(1, 4), "selector": {"matchLabels": {"app": "serve"}},
                         "template": template("serve")}}
    return {"apiVersion": "data.example.com/v1", "kind": "FeatureSync", "metadata": meta,
            "spec": {"schedule": "@hourly", "workers": [{"name": "sync", "template": template("sync")}]}}


def write_corpus(directory: Path, count: int, per_file: int = 10, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for start in range(0, count, per_file):
        path = directory / f"manifests-{start:06d}.yaml"
        docs = [manifest(i, rng) for i in range(start, min(start + per_file, count))]
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        files.append(path)
    return files
