"""Manifests from real projects (tests/fixtures/real, provenance in SOURCES.md) load cleanly and
map to the pod templates their authors meant: roles, replica counts, containers and GPUs per pod,
all read off the files by hand. Kinds a description knows are read as it says; kinds no description
knows (a Kueue Workload) are searched for pod specs, each judged as one pod. Objects without any pod
spec (Service, ConfigMap, RBAC, Namespace, PodGroup, Queue...) must come back as None.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mlgate.loading.documents import read_documents
from mlgate.model import pointer
from mlgate.model.workload import PodTemplate
from mlgate.workloads.extract import extract

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"

# role, replicas, container names (init + regular), nvidia.com/gpu limit of the pod
Template = tuple[str, int, list[str], int]
# one entry per document: (kind, templates), templates None where extract must return None
EXPECTED: dict[str, list[tuple[str, list[Template] | None]]] = {
    "argo-cronworkflow-hello-world.yaml": [("CronWorkflow", [("hello-world-with-time", 1, ["main"], 0)])],
    "argo-workflow-container-set-parallel.yaml": [("Workflow", [("main", 1, ["a", "b"], 0)])],
    "argo-workflow-dag-diamond.yaml": [("Workflow", [("echo", 1, ["main"], 0)])],
    "argo-workflow-hello-world.yaml": [("Workflow", [("hello-world", 1, ["main"], 0)])],
    "argo-workflow-scripts-python.yaml": [
        ("Workflow", [("gen-random-int", 1, ["main"], 0), ("print-message", 1, ["main"], 0)])
    ],
    "argo-workflowtemplate-dag-inline.yaml": [
        ("WorkflowTemplate", [("/spec/templates/0/dag/tasks/0/inline", 1, ["main"], 0)])
    ],
    "argo-workflowtemplate-templates.yaml": [
        ("WorkflowTemplate", [("print-message", 1, ["main"], 0)]),
        ("WorkflowTemplate", [("random-fail-template", 1, ["main"], 0)]),
        ("WorkflowTemplate", [("print-message", 1, ["main"], 0)]),
        ("WorkflowTemplate", [("print-message", 1, ["main"], 0)]),
        ("WorkflowTemplate", [("print-message", 1, ["main"], 0)]),
    ],
    "coscheduling-podgroup-replicaset.yaml": [("PodGroup", None), ("ReplicaSet", [("pod", 6, ["nginx"], 0)])],
    "data-on-eks-sparkapplication-spark-rapids-gpu.yaml": [
        (
            "SparkApplication",
            [
                ("driver", 1, ["spark-kubernetes-driver"], 0),
                ("executor", 1, ["volume-permission", "spark-kubernetes-executor"], 1),
            ],
        )
    ],
    "gke-samples-deployment-vllm-gemma-3-1b-it-gpu.yaml": [
        ("Deployment", [("pod", 1, ["inference-server"], 1)]),
        ("Service", None),
    ],
    "jobset-jobset-pytorch-resnet.yaml": [("JobSet", [("workers", 4, ["pytorch"], 0)])],
    "jobset-jobset-v6e-tpu-multislice.yaml": [("JobSet", [("slice", 8, ["jax-tpu"], 0)])],
    "katib-experiment-darts-gpu-job.yaml": [("Experiment", [("job", 1, ["training-container"], 1)])],
    "katib-experiment-pytorchjob-mnist.yaml": [
        ("Experiment", [("Master", 1, ["pytorch"], 0), ("Worker", 1, ["pytorch"], 0)])
    ],
    "katib-experiment-trainjob-pytorch.yaml": [("Experiment", [("node", 2, ["node"], 0)])],
    "kserve-clusterservingruntime-huggingfaceserver-multinode.yaml": [
        ("ClusterServingRuntime", [("runtime", 1, ["kserve-container"], 0), ("worker", 1, ["worker-container"], 0)])
    ],
    "kserve-clusterservingruntime-huggingfaceserver.yaml": [
        ("ClusterServingRuntime", [("runtime", 1, ["kserve-container"], 0)])
    ],
    "kserve-inferenceservice-huggingface-llama2-gpu.yaml": [
        ("InferenceService", [("predictor", 1, ["kserve-container"], 1)])
    ],
    "kserve-inferenceservice-sklearn-iris.yaml": [("InferenceService", [("predictor", 1, ["kserve-container"], 0)])],
    "kserve-inferenceservice-torchserve-gpu.yaml": [("InferenceService", [("predictor", 1, ["kserve-container"], 1)])],
    "kserve-inferenceservice-transformer-collocation.yaml": [
        ("InferenceService", [("predictor", 1, ["kserve-container", "transformer-container"], 0)])
    ],
    "kserve-servingruntime-pytorch-collocation.yaml": [
        ("ServingRuntime", [("runtime", 1, ["kserve-container", "transformer-container"], 0)])
    ],
    "kubeflow-jaxjob-cpu-demo.yaml": [("JAXJob", [("Worker", 2, ["jax"], 0)])],
    "kubeflow-mpijob-v1-tensorflow-mnist.yaml": [("MPIJob", [("Launcher", 1, ["mpi"], 0), ("Worker", 2, ["mpi"], 0)])],
    "kubeflow-mxjob-byteps-dist-gpu.yaml": [
        ("MXJob", [("Scheduler", 1, ["mxnet"], 0), ("Server", 2, ["mxnet"], 0), ("Worker", 2, ["mxnet"], 8)])
    ],
    "kubeflow-mxjob-dist.yaml": [
        ("MXJob", [("Scheduler", 1, ["mxnet"], 0), ("Server", 1, ["mxnet"], 0), ("Worker", 1, ["mxnet"], 1)])
    ],
    "kubeflow-notebook-jupyter-test.yaml": [("Notebook", [("notebook", 1, ["notebook"], 0)])],
    "kubeflow-notebook-sample-v1.yaml": [("Notebook", [("notebook", 1, ["notebook-sample-v1"], 0)])],
    "kubeflow-paddlejob-simple-gpu.yaml": [("PaddleJob", [("Worker", 2, ["paddle"], 2)])],
    "kubeflow-pytorchjob-elastic-imagenet.yaml": [("PyTorchJob", [("Worker", 2, ["pytorch"], 0)])],
    "kubeflow-pytorchjob-mnist-nccl.yaml": [
        ("PyTorchJob", [("Master", 1, ["pytorch"], 1), ("Worker", 1, ["pytorch"], 1)])
    ],
    "kubeflow-pytorchjob-simple.yaml": [("PyTorchJob", [("Master", 1, ["pytorch"], 0), ("Worker", 1, ["pytorch"], 0)])],
    "kubeflow-tfjob-dist-mnist.yaml": [("TFJob", [("PS", 2, ["tensorflow"], 0), ("Worker", 4, ["tensorflow"], 0)])],
    "kubeflow-tfjob-mnist-with-summaries.yaml": [("TFJob", [("Worker", 1, ["tensorflow"], 0)])],
    "kubeflow-tfjob-simple.yaml": [("TFJob", [("Worker", 2, ["tensorflow"], 0)])],
    "kubeflow-trainer-clustertrainingruntime-deepspeed-distributed.yaml": [
        ("ClusterTrainingRuntime", [("node", 1, ["node"], 0), ("launcher", 1, ["node"], 0)])
    ],
    "kubeflow-trainer-clustertrainingruntime-torch-distributed.yaml": [
        ("ClusterTrainingRuntime", [("node", 1, ["node"], 0)])
    ],
    "kubeflow-trainer-clustertrainingruntime-torchtune-llama3-2-1b.yaml": [
        (
            "ClusterTrainingRuntime",
            [
                ("dataset-initializer", 1, ["dataset-initializer"], 0),
                ("model-initializer", 1, ["model-initializer"], 0),
                ("node", 1, ["node"], 2),
            ],
        )
    ],
    "kubeflow-trainer-trainingruntime-multi-step.yaml": [
        ("TrainingRuntime", [("dataset-initializer", 1, ["dataset-initializer"], 0), ("node", 1, ["node"], 0)]),
        ("TrainJob", [("node", 2, ["node"], 0)]),  # its runtime is not in the facts: the trainer node only
    ],
    "kubeflow-trainer-trainjob-lammps-gpus.yaml": [("TrainJob", [("node", 2, ["node"], 1)])],
    "kubeflow-trainer-trainjob-multi-node.yaml": [("TrainJob", [("node", 3, ["node"], 0)])],
    "kubeflow-xgboostjob-iris-train.yaml": [
        ("XGBoostJob", [("Master", 1, ["xgboostjob"], 0), ("Worker", 2, ["xgboostjob"], 0)])
    ],
    "kuberay-raycluster-kai-gpu-sharing.yaml": [
        ("Queue", None),
        ("Queue", None),
        ("RayCluster", [("head", 1, ["head"], 0), ("shared-gpu", 2, ["worker"], 0)]),
    ],
    "kuberay-raycluster-sample.yaml": [
        ("RayCluster", [("head", 1, ["ray-head"], 0), ("workergroup", 1, ["ray-worker"], 0)])
    ],
    "kuberay-raycluster-verl-gpu-head.yaml": [("RayCluster", [("head", 1, ["ray-head"], 4)])],
    "kuberay-rayjob-light-weight-submitter.yaml": [
        (
            "RayJob",
            [
                ("head", 1, ["ray-head"], 0),
                ("small-group", 1, ["ray-worker"], 0),
                ("submitter", 1, ["my-custom-rayjob-submitter"], 0),
            ],
        ),
        ("ConfigMap", None),
    ],
    "kuberay-rayjob-pytorch-image-classifier-gpu.yaml": [
        ("RayJob", [("head", 1, ["ray-head"], 0), ("gpu-group", 4, ["ray-worker"], 1)])
    ],
    "kuberay-rayservice-deepseek-gpu.yaml": [
        ("RayService", [("head", 1, ["ray-head"], 0), ("gpu-group", 2, ["ray-worker"], 8)])
    ],
    "kuberay-rayservice-stable-diffusion-gpu.yaml": [
        ("RayService", [("head", 1, ["ray-head"], 0), ("gpu-group", 1, ["ray-worker"], 1)])
    ],
    # HAMi: nvidia.com/gpu is the number of GPUs; gpumem, gpumem-percentage and gpucores are shares of each
    "hami-pod-default-use.yaml": [("Pod", [("pod", 1, ["ubuntu-container"], 2)])],
    "hami-pod-use-memory-fraction.yaml": [("Pod", [("pod", 1, ["ubuntu-container"], 2)])],
    "kubernetes-deployment-nginx.yaml": [("Deployment", [("pod", 3, ["nginx"], 0)])],
    "kubernetes-replicaset-frontend.yaml": [("ReplicaSet", [("pod", 3, ["php-redis"], 0)])],
    "kubernetes-statefulset-web.yaml": [("Service", None), ("StatefulSet", [("pod", 3, ["nginx"], 0)])],
    "kueue-cronjob-sample.yaml": [("CronJob", [("job", 3, ["dummy-job"], 0)])],
    "kueue-pod-group.yaml": [("Pod", [("pod", 1, ["sleep"], 0)]), ("Pod", [("pod", 1, ["sleep"], 0)])],
    "kueue-sample-job-partial-admission.yaml": [("Job", [("job", 20, ["dummy-job"], 0)])],
    "kueue-sample-job.yaml": [("Job", [("job", 3, ["dummy-job"], 0)])],
    "kueue-sample-pytorchjob.yaml": [("PyTorchJob", [("Master", 1, ["pytorch"], 0), ("Worker", 1, ["pytorch"], 0)])],
    # no description ships for a Kueue Workload: its pod spec is found by search, one pod per template
    "kueue-workload-v1beta2-sample.yaml": [("Workload", [("/spec/podSets/0/template", 1, ["container"], 0)])],
    "lws-leaderworkerset-multi-template.yaml": [
        ("LeaderWorkerSet", [("leader", 3, ["nginx2"], 0), ("worker", 9, ["nginx"], 0)])
    ],
    "lws-leaderworkerset-sglang.yaml": [
        ("LeaderWorkerSet", [("leader", 2, ["sglang-leader"], 1), ("worker", 2, ["sglang-worker"], 1)]),
        ("Service", None),
    ],
    "lws-leaderworkerset-vllm-gpu.yaml": [
        ("LeaderWorkerSet", [("leader", 2, ["vllm-leader"], 8), ("worker", 2, ["vllm-worker"], 8)]),
        ("Service", None),
    ],
    "lws-leaderworkerset-volcano-worker-only.yaml": [("LeaderWorkerSet", [("worker", 8, ["nginx"], 0)])],
    "mpi-operator-v1-tensorflow-benchmarks.yaml": [
        ("MPIJob", [("Launcher", 1, ["tensorflow-benchmarks"], 0), ("Worker", 2, ["tensorflow-benchmarks"], 1)])
    ],
    "mpi-operator-v2beta1-nccl-tests.yaml": [("MPIJob", [("Launcher", 1, ["nccl"], 0), ("Worker", 2, ["nccl"], 8)])],
    "mpi-operator-v2beta1-pi.yaml": [
        ("MPIJob", [("Launcher", 1, ["mpi-launcher"], 0), ("Worker", 2, ["mpi-worker"], 0)])
    ],
    "mpi-operator-v2beta1-tensorflow-benchmarks.yaml": [
        ("MPIJob", [("Launcher", 1, ["tensorflow-benchmarks"], 0), ("Worker", 2, ["tensorflow-benchmarks"], 1)])
    ],
    "nvidia-daemonset-device-plugin-privileged.yaml": [
        ("Namespace", None),
        ("Role", None),
        ("ServiceAccount", None),
        ("RoleBinding", None),
        ("DaemonSet", [("pod", 1, ["nvidia-device-plugin-ctr"], 0)]),
    ],
    "nvidia-daemonset-device-plugin.yaml": [("DaemonSet", [("pod", 1, ["nvidia-device-plugin-ctr"], 0)])],
    "nvidia-gpu-pod.yaml": [("Pod", [("pod", 1, ["cuda-container"], 1)])],
    "spark-operator-scheduledsparkapplication-spark-pi.yaml": [
        (
            "ScheduledSparkApplication",
            [("driver", 1, ["spark-kubernetes-driver"], 0), ("executor", 1, ["spark-kubernetes-executor"], 0)],
        )
    ],
    "spark-operator-sparkapplication-spark-pi.yaml": [
        (
            "SparkApplication",
            [("driver", 1, ["spark-kubernetes-driver"], 0), ("executor", 1, ["spark-kubernetes-executor"], 0)],
        )
    ],
    # batch.volcano.sh/v1alpha1 Jobs: one template per task
    "volcano-job-mindspore-gpu.yaml": [
        ("Job", [("mpimaster", 1, ["mpimaster"], 0), ("mpiworker", 2, ["mpiworker"], 1)])
    ],
    "volcano-job-paddlepaddle-ctr.yaml": [("Job", [("pserver", 2, ["pserver"], 0), ("trainer", 2, ["trainer"], 0)])],
    "volcano-job-tf-example-gpu.yaml": [("Job", [("ps", 1, ["tensorflow"], 0), ("worker", 3, ["tensorflow"], 1)])],
    "yunikorn-gang-scheduling-job.yaml": [("Job", [("job", 2, ["sleep30"], 0)])],
    "yunikorn-tfjob-mnist.yaml": [("TFJob", [("PS", 2, ["tensorflow"], 0), ("Worker", 4, ["tensorflow"], 0)])],
}


# Kinds whose pods an operator builds from other fields (Argo's `main`, Spark's driver and executor, KServe's
# `kserve-container`, a TrainJob's `node`): such a container's name, and its image where it comes from an
# application-wide field or the runtime, is no field of its own in the file.
BUILT = frozenset(
    (
        "Workflow",
        "WorkflowTemplate",
        "ClusterWorkflowTemplate",
        "CronWorkflow",
        "SparkApplication",
        "ScheduledSparkApplication",
        "InferenceService",
        "TrainJob",
    )
)


def judged_kind(doc: dict[str, Any]) -> str:
    """The kind whose pods `doc` runs: a Katib Experiment's trial, else its own."""
    if doc.get("kind") == "Experiment":
        return str(pointer.resolve(doc, "/spec/trialTemplate/trialSpec/kind"))
    return str(doc.get("kind"))


def documents(name: str) -> list[dict[str, Any]]:
    docs = list(read_documents([str(REAL / name)]))
    assert [d.error for d in docs] == [None] * len(docs)
    return [d.data for d in docs if d.data is not None]


def gpus(template: PodTemplate) -> int:
    return sum(
        int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for _, _, c in template.regular_containers()
    )


def describe(template: PodTemplate) -> Template:
    names = [c["name"] for _, _, c in template.regular_containers()]
    return (template.role, template.replicas, names, gpus(template))


def test_every_fixture_has_expectations_and_every_expectation_a_fixture() -> None:
    assert sorted(p.name for p in REAL.glob("*.yaml")) == sorted(EXPECTED)


def test_sources_md_records_every_fixture_once() -> None:
    listed = re.findall(r"^## `([^`]+)`", (REAL / "SOURCES.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted(listed) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_maps_to_the_templates_its_authors_meant(name: str) -> None:
    docs = documents(name)
    assert [d["kind"] for d in docs] == [kind for kind, _ in EXPECTED[name]]
    for doc, (_, templates) in zip(docs, EXPECTED[name], strict=True):
        workload = extract(doc)
        if templates is None:
            assert workload is None
        else:
            assert workload is not None
            assert [describe(t) for t in workload.templates] == templates
            assert workload.total_replicas == sum(t[1] for t in templates)


@pytest.mark.parametrize("name", sorted(n for n, docs in EXPECTED.items() if any(t for _, t in docs)))
def test_template_paths_point_at_the_fields_in_the_file(name: str) -> None:
    for doc, (_, templates) in zip(documents(name), EXPECTED[name], strict=True):
        if templates is None:
            continue
        workload = extract(doc)
        assert workload is not None
        built = judged_kind(doc) in BUILT
        for template in workload.templates:
            for key, index, container in template.containers():
                if not built:
                    assert pointer.resolve(doc, template.path(key, index, "name")) == container["name"]
                    assert pointer.resolve(doc, template.path(key, index, "image")) == container["image"]
                    continue
                # a container an operator builds points at the field it was built from, and at no other value
                assert isinstance(pointer.resolve(doc, template.path(key, index)), dict)
                for field in ("name", "image"):
                    held = pointer.resolve(doc, template.path(key, index, field))
                    assert held is None or held == container.get(field)
