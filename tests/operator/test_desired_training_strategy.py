"""A TrainingJob's TensorFlow distributedStrategy and modelConfig, as desired children (pure).

TF_CONFIG as Kubeflow training-operator v1.9 writes it (pkg/controller.v1/tensorflow/tensorflow.go
genTFConfigJSONStr and isDistributed): {"cluster": {role: ["<pod>.<job>.<ns>.svc:<port>"]}, "task": {"type",
"index"}, "environment": "cloud"}, none for a one-pod job; the roles each strategy needs follow the TensorFlow
distributed-training guide (MirroredStrategy: one machine; MultiWorkerMirroredStrategy: workers only;
ParameterServerStrategy: a coordinator as `chief`, workers and `ps`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import change, trainingjob

from mlgate.workloads.catalog import SHIPPED
from mlgate.workloads.extract import extract
from mlgate_reconciler import desired, frameworks
from mlgate_reconciler.desired import desired_children


def tf_job(strategy: str | None, replicas: int, ps: int = 0) -> dict[str, Any]:
    job = change(change(trainingjob(replicas=replicas), "/spec/framework", "tensorflow"),
                 "/spec/template/spec/containers/0/name", "tensorflow")
    if strategy is not None:
        job = change(job, "/spec/distributedStrategy", strategy)
    return change(job, "/spec/tensorflow", {"parameterServers": ps}) if ps else job


def pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in desired_children(job) if c["kind"] == "Pod"]


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}  # the main container


def tf_configs(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: json.loads(env(p)["TF_CONFIG"]) for p in pods(job)}


def hosts(role: str, count: int) -> list[str]:
    return [f"llm-{role}-{i}.llm.ml.svc:2222" for i in range(count)]


# --- distributedStrategy ------------------------------------------------------------------------------------


def test_parameter_server_gets_a_chief_workers_and_parameter_servers_that_all_share_one_cluster():
    configs = tf_configs(tf_job("parameter_server", replicas=3, ps=2))
    assert list(configs) == ["llm-chief-0", "llm-worker-0", "llm-worker-1", "llm-ps-0", "llm-ps-1"]
    cluster = {"chief": hosts("chief", 1), "worker": hosts("worker", 2), "ps": hosts("ps", 2)}
    assert all(c["cluster"] == cluster and c["environment"] == "cloud" for c in configs.values())


def test_parameter_server_names_each_pod_its_own_role_and_index_within_the_role():
    configs = tf_configs(tf_job("parameter_server", replicas=3, ps=2))
    assert {name: (c["task"]["type"], c["task"]["index"]) for name, c in configs.items()} == {
        "llm-chief-0": ("chief", 0), "llm-worker-0": ("worker", 0), "llm-worker-1": ("worker", 1),
        "llm-ps-0": ("ps", 0), "llm-ps-1": ("ps", 1)}


def test_parameter_server_pods_carry_their_role_label_and_the_tf_port():
    for pod in pods(tf_job("parameter_server", replicas=2, ps=1)):
        role = pod["metadata"]["name"].split("-")[1]
        assert pod["metadata"]["labels"]["mlgate.dev/replica-type"] == role
        assert {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"} in pod["spec"]["containers"][0]["ports"]


def test_multi_worker_mirrored_runs_workers_only_with_a_worker_cluster():
    configs = tf_configs(tf_job("multi_worker_mirrored", replicas=3))
    assert list(configs) == ["llm-worker-0", "llm-worker-1", "llm-worker-2"]
    assert all(c["cluster"] == {"worker": hosts("worker", 3)} for c in configs.values())
    assert [c["task"] for c in configs.values()] == [{"type": "worker", "index": i} for i in range(3)]


def test_mirrored_runs_one_worker_pod_without_a_tf_config():
    (pod,) = pods(tf_job("mirrored", replicas=1))
    assert pod["metadata"]["name"] == "llm-worker-0"
    assert "TF_CONFIG" not in env(pod)


def test_mirrored_stays_one_pod_even_where_the_schema_was_bypassed():
    assert [p["metadata"]["name"] for p in pods(tf_job("mirrored", replicas=4, ps=1))] == ["llm-worker-0"]


def test_without_a_strategy_tensorflow_keeps_a_chief_and_a_tf_config_in_every_pod():
    configs = tf_configs(tf_job(None, replicas=2))
    assert list(configs) == ["llm-chief-0", "llm-worker-0"]
    assert configs["llm-worker-0"]["cluster"] == {"chief": hosts("chief", 1), "worker": hosts("worker", 1)}


@pytest.mark.parametrize(("strategy", "replicas", "ps"), [("parameter_server", 3, 2), ("multi_worker_mirrored", 3, 0),
                                                          ("mirrored", 1, 0), (None, 2, 1)])
def test_the_engine_judges_exactly_the_roles_the_reconciler_creates(strategy: str | None, replicas: int, ps: int):
    job = tf_job(strategy, replicas, ps)
    workload = extract(job, kinds=SHIPPED)
    assert workload is not None
    created: dict[str, int] = {}
    for pod in pods(job):
        role = pod["metadata"]["name"].split("-")[1]
        created[role] = created.get(role, 0) + 1
    assert {t.role.lower(): t.replicas for t in workload.templates} == created


# --- modelConfig --------------------------------------------------------------------------------------------

MODEL = {"hyperparameters": {"LR": "3e-5", "EPOCHS": "3"}, "dataPath": "s3://ml-data/imagenet",
         "outputPath": "/models/out"}


def test_data_and_output_paths_reach_every_pod_as_written():
    for pod in pods(change(trainingjob(replicas=3), "/spec/modelConfig", MODEL)):
        assert (env(pod)["DATA_PATH"], env(pod)["OUTPUT_PATH"]) == ("s3://ml-data/imagenet", "/models/out")


def test_model_config_hyperparameters_become_env_sorted_by_key_after_the_framework_env():
    main = pods(change(trainingjob(), "/spec/modelConfig", MODEL))[0]["spec"]["containers"][0]
    names = [e["name"] for e in main["env"]]
    assert names[-4:] == ["EPOCHS", "LR", "DATA_PATH", "OUTPUT_PATH"]
    assert names.index("RANK") < names.index("EPOCHS")


def test_a_model_config_without_paths_sets_no_path_variables():
    job = change(trainingjob(), "/spec/modelConfig", {"hyperparameters": {"LR": "1"}})
    assert {"DATA_PATH", "OUTPUT_PATH"}.isdisjoint(env(pods(job)[0]))


def test_where_both_places_were_stored_model_config_wins_per_key_and_the_rest_is_kept():
    job = change(change(trainingjob(), "/spec/hyperparameters", {"LR": "1", "SEED": "7"}), "/spec/modelConfig",
                 {"hyperparameters": {"LR": "2"}})
    assert (env(pods(job)[0])["LR"], env(pods(job)[0])["SEED"]) == ("2", "7")


def test_a_hyperparameter_named_like_a_path_variable_never_overrides_it():
    job = change(change(trainingjob(), "/spec/modelConfig", MODEL), "/spec/modelConfig/hyperparameters/DATA_PATH",
                 "/elsewhere")
    assert [e["value"] for e in pods(job)[0]["spec"]["containers"][0]["env"] if e["name"] == "DATA_PATH"] == [
        "s3://ml-data/imagenet"]


def test_every_hyperparameter_the_reconciler_drops_is_one_admission_refuses():
    launch = SHIPPED.find("mlgate.dev/v1alpha1", "TrainingJob").launch  # type: ignore[union-attr]
    assert launch is not None
    assert launch.env_from == ("/spec/hyperparameters", "/spec/modelConfig/hyperparameters")
    refused = set(launch.reservedEnv) | set(launch.envFromReserved)
    dropped = frameworks.FRAMEWORK_ENV_NAMES | set(desired.CHECKPOINT_ENV) | {n for _, n in desired.MODEL_CONFIG_ENV}
    assert {n for n in dropped if not n.startswith(tuple(launch.reservedPrefixes))} - refused == set()
