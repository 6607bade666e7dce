"""One minimal valid object per shipped kind: hardened pods asking for one GPU per container.

Each `Case` says where the kind keeps its first container and its pod volumes (so a test can make the
one change that matters), and how many pods it runs (so a GPU count can be checked against the way the
kind runs its pods: LWS `size` x `replicas`, JobSet `replicas` x `parallelism`, Ray `replicas` x
`numOfHosts`, Volcano task replicas, Spark `instances`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tests.builders import pod_spec


@dataclass(frozen=True)
class Case:
    obj: dict[str, Any]
    container: str  # pointer of the first container the user wrote (or the field it is built from)
    volumes: str  # pointer of a pod's volumes list
    pods: int | None  # pods that run at once, each with one GPU (None: steps, no count at once)
    mutable: bool = True

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def id(self) -> str:
        return f"{str(self.obj['apiVersion']).split('/')[0]}/{self.kind}"


def _obj(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "work", "namespace": "ml"}, "spec": spec}


def _pts() -> dict[str, Any]:
    return {"spec": pod_spec("main", 1)}


def _ray(workers: dict[str, Any]) -> dict[str, Any]:
    return {"headGroupSpec": {"template": {"spec": pod_spec("head", 0)}},
            "workerGroupSpecs": [{"groupName": "gpu", "template": _pts(), **workers}]}


def _container_only() -> dict[str, Any]:
    container = copy.deepcopy(pod_spec("main", 1)["containers"][0])
    del container["name"]
    return container


def _apps(kind: str, replicas: int | None) -> Case:
    spec = {"template": _pts(), **({"replicas": replicas} if replicas is not None else {})}
    return Case(_obj("apps/v1", kind, spec), "/spec" + TEMPLATE, "/spec/template/spec/volumes", replicas or 1)


def _kubeflow(kind: str, field: str, replicas: dict[str, int], **spec: Any) -> Case:
    specs = {role: {"replicas": count, "template": _pts()} for role, count in replicas.items()}
    base = f"/spec/{field}/{next(iter(replicas))}"
    return Case(_obj("kubeflow.org/v1", kind, {field: specs, **spec}), base + TEMPLATE,
                base + "/template/spec/volumes", sum(replicas.values()))


def _in(at: str, obj: dict[str, Any], pods: int, *, mutable: bool = True) -> Case:
    """A case whose pod template sits at `at`."""
    return Case(obj, at + TEMPLATE, at + "/template/spec/volumes", pods, mutable)


TEMPLATE = "/template/spec/containers/0"


def cases() -> list[Case]:
    hardened = pod_spec()
    spark_role = {"cores": 1, "memory": "1g", "gpu": {"name": "nvidia.com/gpu", "quantity": 1},
                  "securityContext": hardened["containers"][0]["securityContext"],
                  "podSecurityContext": hardened["securityContext"]}
    spark = {"type": "Python", "mode": "cluster", "image": "registry.example/spark:3.5", "sparkVersion": "3.5.0",
             "driver": copy.deepcopy(spark_role), "executor": {**copy.deepcopy(spark_role), "instances": 4}}
    jobset = {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                  "template": {"spec": {"parallelism": 4, "completions": 4, "template": _pts()}}}]}
    lws = {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "leaderTemplate": _pts(), "workerTemplate": _pts()}}
    volcano = {"minAvailable": 3, "schedulerName": "volcano",
               "tasks": [{"name": "ps", "replicas": 1, "template": _pts()},
                         {"name": "worker", "replicas": 2, "template": _pts()}]}
    cron = {"schedule": "@daily", "jobTemplate": {"spec": {"parallelism": 2, "template": _pts()}}}
    trial = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 2, "template": _pts()}}
    experiment = {"parallelTrialCount": 2, "trialTemplate": {"trialSpec": trial}}
    runtime = {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"parallelism": 2, "template": _pts()}}}]}}}
    patch_at = "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/spec"
    patched_pod = {"securityContext": hardened["securityContext"],
                   "containers": [{"name": "node", "securityContext": hardened["containers"][0]["securityContext"]}]}
    train_job = {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 4, "image": "registry.example/train:1.0",
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
                 "runtimePatches": [{"manager": "ml.example/team", "trainingRuntimeSpec": {"template": {"spec": {
                     "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": patched_pod}}}}],
                 }}}}]}
    isvc = {"predictor": {"minReplicas": 2, "securityContext": hardened["securityContext"],
                          "model": {"modelFormat": {"name": "pytorch"}, "storageUri": "s3://models/llm",
                                    **_container_only()}}}
    workflow = {"entrypoint": "train", "securityContext": hardened["securityContext"],
                "templates": [{"name": "train", "container": _container_only()}]}
    ray_workers = "/workerGroupSpecs/0"
    return [
        _apps("Deployment", 3), _apps("StatefulSet", 2), _apps("ReplicaSet", 4), _apps("DaemonSet", None),
        _in("/spec/jobTemplate/spec", _obj("batch/v1", "CronJob", cron), 2),
        _in("/spec/replicatedJobs/0/template/spec", _obj("jobset.x-k8s.io/v1alpha2", "JobSet", jobset), 8),
        Case(_obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", lws),
             "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0",
             "/spec/leaderWorkerTemplate/workerTemplate/spec/volumes", 8),
        _in("/spec" + ray_workers, _obj("ray.io/v1", "RayCluster",
                              _ray({"replicas": 2, "numOfHosts": 2, "minReplicas": 1, "maxReplicas": 4})), 4),
        _in("/spec/rayClusterSpec" + ray_workers,
            _obj("ray.io/v1", "RayJob", {"entrypoint": "python train.py", "rayClusterSpec": _ray({"replicas": 3})}), 3),
        _in("/spec/rayClusterConfig" + ray_workers,
            _obj("ray.io/v1", "RayService", {"rayClusterConfig": _ray({"replicas": 1, "numOfHosts": 4})}), 4),
        _in("/spec/tasks/0", _obj("batch.volcano.sh/v1alpha1", "Job", volcano), 3),
        _kubeflow("PaddleJob", "paddleReplicaSpecs", {"Worker": 3}),
        _kubeflow("JAXJob", "jaxReplicaSpecs", {"Worker": 2}),
        _kubeflow("MXJob", "mxReplicaSpecs", {"Scheduler": 1, "Worker": 2}, jobMode="MXTrain"),
        Case(_obj("kubeflow.org/v1", "Notebook", {"template": {"spec": pod_spec("main", 1)}}),
             "/spec/template/spec/containers/0", "/spec/template/spec/volumes", 1),
        _in("/spec/trialTemplate/trialSpec/spec", _obj("kubeflow.org/v1beta1", "Experiment", experiment), 2),
        _in("/spec/template/spec/replicatedJobs/0/template/spec",
            _obj("trainer.kubeflow.org/v1alpha1", "TrainingRuntime", runtime), 2),
        Case(_obj("trainer.kubeflow.org/v1alpha1", "TrainJob", train_job), patch_at + "/containers/0",
             patch_at + "/volumes", 4, mutable=False),
        Case(_obj("sparkoperator.k8s.io/v1beta2", "SparkApplication", spark), "/spec/driver", "/spec/volumes", 5,
             mutable=False),
        Case(_obj("serving.kserve.io/v1beta1", "InferenceService", isvc), "/spec/predictor/model",
             "/spec/predictor/volumes", 2, mutable=False),
        Case(_obj("argoproj.io/v1alpha1", "Workflow", workflow), "/spec/templates/0/container", "/spec/volumes", None,
             mutable=False),
    ]
