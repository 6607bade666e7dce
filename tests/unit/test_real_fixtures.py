"""Manifests from real projects (tests/fixtures/real, provenance in SOURCES.md) load cleanly and
map to the pod templates their authors meant: roles, replica counts, containers and GPUs per pod,
all read off the files by hand. Kinds mlgate does not police (Volcano Job, PodGroup, ReplicaSet)
must come back as None rather than be half-understood.
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
    "coscheduling-podgroup-replicaset.yaml": [("PodGroup", None), ("ReplicaSet", None)],
    "kubeflow-mpijob-v1-tensorflow-mnist.yaml": [
        ("MPIJob", [("Launcher", 1, ["mpi"], 0), ("Worker", 2, ["mpi"], 0)])
    ],
    "kubeflow-pytorchjob-elastic-imagenet.yaml": [("PyTorchJob", [("Worker", 2, ["pytorch"], 0)])],
    "kubeflow-pytorchjob-mnist-nccl.yaml": [
        ("PyTorchJob", [("Master", 1, ["pytorch"], 1), ("Worker", 1, ["pytorch"], 1)])
    ],
    "kubeflow-pytorchjob-simple.yaml": [
        ("PyTorchJob", [("Master", 1, ["pytorch"], 0), ("Worker", 1, ["pytorch"], 0)])
    ],
    "kubeflow-tfjob-dist-mnist.yaml": [
        ("TFJob", [("PS", 2, ["tensorflow"], 0), ("Worker", 4, ["tensorflow"], 0)])
    ],
    "kubeflow-tfjob-mnist-with-summaries.yaml": [("TFJob", [("Worker", 1, ["tensorflow"], 0)])],
    "kubeflow-tfjob-simple.yaml": [("TFJob", [("Worker", 2, ["tensorflow"], 0)])],
    "kubeflow-xgboostjob-iris-train.yaml": [
        ("XGBoostJob", [("Master", 1, ["xgboostjob"], 0), ("Worker", 2, ["xgboostjob"], 0)])
    ],
    "kueue-pod-group.yaml": [("Pod", [("pod", 1, ["sleep"], 0)]), ("Pod", [("pod", 1, ["sleep"], 0)])],
    "kueue-sample-job-partial-admission.yaml": [("Job", [("job", 20, ["dummy-job"], 0)])],
    "kueue-sample-job.yaml": [("Job", [("job", 3, ["dummy-job"], 0)])],
    "kueue-sample-pytorchjob.yaml": [
        ("PyTorchJob", [("Master", 1, ["pytorch"], 0), ("Worker", 1, ["pytorch"], 0)])
    ],
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
    "nvidia-gpu-pod.yaml": [("Pod", [("pod", 1, ["cuda-container"], 1)])],
    "volcano-job-tf-example-gpu.yaml": [("Job", None)],  # batch.volcano.sh/v1alpha1, not batch/v1
    "yunikorn-gang-scheduling-job.yaml": [("Job", [("job", 2, ["sleep30"], 0)])],
    "yunikorn-tfjob-mnist.yaml": [("TFJob", [("PS", 2, ["tensorflow"], 0), ("Worker", 4, ["tensorflow"], 0)])],
}


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
    for doc in documents(name):
        workload = extract(doc)
        assert workload is not None
        for template in workload.templates:
            for key, index, container in template.containers():
                assert pointer.resolve(doc, template.path(key, index, "name")) == container["name"]
                assert pointer.resolve(doc, template.path(key, index, "image")) == container["image"]
