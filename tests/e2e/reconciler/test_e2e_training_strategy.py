"""A TensorFlow TrainingJob's distributedStrategy and a TrainingJob's modelConfig against the real API server: the
objects are stored through the CRD (schema and CEL rules), one reconcile pass creates the pods, and the tests read
TF_CONFIG, DATA_PATH and OUTPUT_PATH back from the pods as stored. TF_CONFIG is checked against what Kubeflow
training-operator v1.9 writes (pkg/controller.v1/tensorflow/tensorflow.go): cluster per role, task {type, index}."""

from __future__ import annotations

import json
from typing import Any

import pytest
from control_plane import ControlPlane
from e2e_objects import in_namespace, trainingjob
from reconciler_steps import names, reconcile

from mlgate.engine import PolicySet
from mlgate_reconciler.client import Transport

pytestmark = pytest.mark.e2e


def create(cluster: ControlPlane, namespace: str, **spec: Any) -> None:
    cluster.kubectl("create", "-f", "-", stdin=in_namespace(trainingjob("llm", **spec), namespace)).check()


def env_of(cluster: ControlPlane, namespace: str, pod: str) -> dict[str, str]:
    container = cluster.get_object("pod", pod, namespace)["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_a_parameter_server_job_gets_ps_and_worker_pods_whose_tf_config_names_the_cluster_and_their_task(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, framework="tensorflow", distributedStrategy="parameter_server", replicas=3,
           tensorflow={"parameterServers": 2})
    outcome, _ = reconcile(transport, policies, namespace)
    pods = ["llm-chief-0", "llm-ps-0", "llm-ps-1", "llm-worker-0", "llm-worker-1"]
    assert names(cluster, "pods", namespace) == pods, outcome
    configs = {pod: json.loads(env_of(cluster, namespace, pod)["TF_CONFIG"]) for pod in pods}
    at = f"llm.{namespace}.svc:2222"
    cluster_spec = {"chief": [f"llm-chief-0.{at}"], "worker": [f"llm-worker-0.{at}", f"llm-worker-1.{at}"],
                    "ps": [f"llm-ps-0.{at}", f"llm-ps-1.{at}"]}
    assert all(c["cluster"] == cluster_spec for c in configs.values())
    assert {pod: c["task"] for pod, c in configs.items()} == {
        "llm-chief-0": {"type": "chief", "index": 0}, "llm-ps-0": {"type": "ps", "index": 0},
        "llm-ps-1": {"type": "ps", "index": 1}, "llm-worker-0": {"type": "worker", "index": 0},
        "llm-worker-1": {"type": "worker", "index": 1}}
    roles = {pod: cluster.get_object("pod", pod, namespace)["metadata"]["labels"]["mlgate.dev/replica-type"]
             for pod in pods}
    assert roles == {pod: pod.split("-")[1] for pod in pods}


def test_multi_worker_mirrored_gets_worker_pods_only_that_share_a_worker_cluster(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, framework="tensorflow", distributedStrategy="multi_worker_mirrored", replicas=2)
    reconcile(transport, policies, namespace)
    assert names(cluster, "pods", namespace) == ["llm-worker-0", "llm-worker-1"]
    config = json.loads(env_of(cluster, namespace, "llm-worker-1")["TF_CONFIG"])
    at = f"llm.{namespace}.svc:2222"
    assert config["cluster"] == {"worker": [f"llm-worker-0.{at}", f"llm-worker-1.{at}"]}
    assert config["task"] == {"type": "worker", "index": 1}


def test_a_mirrored_job_runs_one_worker_pod_without_tf_config(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, framework="tensorflow", distributedStrategy="mirrored", replicas=1)
    reconcile(transport, policies, namespace)
    assert names(cluster, "pods", namespace) == ["llm-worker-0"]
    assert "TF_CONFIG" not in env_of(cluster, namespace, "llm-worker-0")


def test_model_config_paths_and_hyperparameters_reach_every_stored_pod(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    model = {"hyperparameters": {"LR": "3e-5"}, "dataPath": "s3://ml-data/imagenet", "outputPath": "s3://ml-models/llm"}
    create(cluster, namespace, replicas=2, modelConfig=model)
    reconcile(transport, policies, namespace)
    for pod in ("llm-master-0", "llm-worker-0"):
        env = env_of(cluster, namespace, pod)
        assert (env["DATA_PATH"], env["OUTPUT_PATH"], env["LR"]) == ("s3://ml-data/imagenet", "s3://ml-models/llm",
                                                                     "3e-5")


def test_a_model_config_hyperparameter_named_like_a_launcher_variable_fails_the_job_before_any_pod(
        cluster: ControlPlane, namespace: str, transport: Transport, policies: PolicySet):
    create(cluster, namespace, replicas=2, modelConfig={"hyperparameters": {"MASTER_ADDR": "10.0.0.1"}})
    outcome, _ = reconcile(transport, policies, namespace)
    assert outcome.created == []
    status = cluster.get_object("trainingjob", "llm", namespace)["status"]
    [failed] = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert (status["phase"], failed["reason"]) == ("Failed", "PolicyViolation")
    assert "spec.modelConfig.hyperparameters names MASTER_ADDR" in failed["message"], failed
