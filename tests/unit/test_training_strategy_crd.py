"""The TrainingJob CRD's modelConfig and distributedStrategy, as `mlgate validate` checks them offline (schema and
CEL rules). Fixtures are one minimal valid TensorFlow job with one change each; tests/e2e/test_e2e_crd_schema.py
sends the same bad objects to a real API server and compares its refusals with mlgate's."""

from __future__ import annotations

from typing import Any

import pytest
from builders import DELETE, change, trainingjob

from mlgate.loading.schemas import SchemaCatalog, default_crd_dir

TF = change(change(trainingjob(replicas=3), "/spec/framework", "tensorflow"), "/spec/distributedStrategy",
            "parameter_server")
TF = change(TF, "/spec/tensorflow", {"parameterServers": 1})
MODEL = {"hyperparameters": {"LR": "3e-5"}, "dataPath": "s3://ml-data/imagenet", "outputPath": "/models/out"}


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    return SchemaCatalog.from_paths([default_crd_dir()])


def refusals(catalog: SchemaCatalog, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    verdict = catalog.check(obj)
    assert verdict is not None
    return sorted((v.check, v.path, v.reason) for v in verdict.violations)


def details(catalog: SchemaCatalog, obj: dict[str, Any]) -> list[str]:
    verdict = catalog.check(obj)
    assert verdict is not None
    return [v.detail for v in verdict.violations]


STRATEGY = "/spec/distributedStrategy"
REFUSED = [
    ("deny_strategy_on_pytorch", change(TF, "/spec/framework", "pytorch"),
     [("cel", STRATEGY, "forbidden"), ("cel", "/spec/tensorflow", "forbidden")]),
    ("deny_strategy_on_the_default_framework", change(TF, "/spec/framework", DELETE),
     [("cel", STRATEGY, "forbidden"), ("cel", "/spec/tensorflow", "forbidden")]),
    ("deny_unknown_strategy", change(TF, STRATEGY, "central_storage"), [("schema", STRATEGY, "unsupported value")]),
    ("deny_mirrored_on_three_replicas", change(change(TF, STRATEGY, "mirrored"), "/spec/tensorflow", DELETE),
     [("cel", STRATEGY, "invalid value")]),
    ("deny_mirrored_with_a_parameter_server", change(change(TF, STRATEGY, "mirrored"), "/spec/replicas", 1),
     [("cel", STRATEGY, "invalid value")]),
    ("deny_multi_worker_mirrored_with_a_parameter_server", change(TF, STRATEGY, "multi_worker_mirrored"),
     [("cel", STRATEGY, "invalid value")]),
    ("deny_parameter_server_without_parameter_servers", change(TF, "/spec/tensorflow", DELETE),
     [("cel", STRATEGY, "invalid value")]),
    ("deny_parameter_server_with_zero_parameter_servers", change(TF, "/spec/tensorflow/parameterServers", 0),
     [("cel", STRATEGY, "invalid value")]),
    ("deny_parameter_server_without_a_worker", change(TF, "/spec/replicas", 1), [("cel", STRATEGY, "invalid value")]),
    ("deny_hyperparameters_in_both_places", change(change(TF, "/spec/modelConfig", MODEL), "/spec/hyperparameters",
                                                   {"EPOCHS": "3"}),
     [("cel", "/spec/modelConfig/hyperparameters", "forbidden")]),
    ("deny_a_relative_data_path", change(TF, "/spec/modelConfig", {"dataPath": "data/train"}),
     [("schema", "/spec/modelConfig/dataPath", "invalid value")]),
    ("deny_an_empty_output_path", change(TF, "/spec/modelConfig", {"outputPath": ""}),  # too short, no pattern
     [("schema", "/spec/modelConfig/outputPath", "invalid value")] * 2),
    ("deny_a_numeric_model_hyperparameter", change(TF, "/spec/modelConfig", {"hyperparameters": {"LR": 0.1}}),
     [("schema", "/spec/modelConfig/hyperparameters/LR", "invalid type")]),
    ("deny_an_unknown_model_config_field", change(TF, "/spec/modelConfig", {"dataDir": "/data"}),
     [("schema", "/spec/modelConfig/dataDir", "unknown field")]),
]


@pytest.mark.parametrize(("case", "obj", "expected"), REFUSED, ids=[c[0] for c in REFUSED])
def test_deny_what_the_strategy_and_model_config_rules_refuse(catalog: SchemaCatalog, case: str, obj: dict[str, Any],
                                                              expected: list[tuple[str, str, str]]) -> None:
    assert refusals(catalog, obj) == expected


ACCEPTED = [
    ("allow_parameter_server_with_a_chief_a_worker_and_a_ps", TF),
    ("allow_mirrored_on_one_replica", change(change(change(TF, STRATEGY, "mirrored"), "/spec/replicas", 1),
                                             "/spec/tensorflow", DELETE)),
    ("allow_multi_worker_mirrored_on_workers_only", change(change(TF, STRATEGY, "multi_worker_mirrored"),
                                                           "/spec/tensorflow", DELETE)),
    ("allow_multi_worker_mirrored_with_zero_parameter_servers", change(change(TF, STRATEGY, "multi_worker_mirrored"),
                                                                       "/spec/tensorflow/parameterServers", 0)),
    ("allow_tensorflow_without_a_strategy", change(TF, STRATEGY, DELETE)),
    ("allow_a_model_config", change(TF, "/spec/modelConfig", MODEL)),
    ("allow_a_model_config_beside_top_level_hyperparameters", change(
        change(TF, "/spec/modelConfig", {"dataPath": "gs://ml-data/x"}), "/spec/hyperparameters", {"LR": "1"})),
    ("allow_model_config_on_pytorch", change(trainingjob(), "/spec/modelConfig", MODEL)),
]


@pytest.mark.parametrize(("case", "obj"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_allow_what_the_api_server_accepts(catalog: SchemaCatalog, case: str, obj: dict[str, Any]) -> None:
    assert refusals(catalog, obj) == []


def test_the_refusals_say_what_to_do_instead(catalog: SchemaCatalog) -> None:
    assert details(catalog, change(TF, "/spec/tensorflow", DELETE)) == [
        "distributedStrategy parameter_server needs at least one parameter server: set tensorflow.parameterServers"]
    both = change(change(TF, "/spec/modelConfig", MODEL), "/spec/hyperparameters", {"EPOCHS": "3"})
    assert details(catalog, both) == [
        "set hyperparameters in spec.hyperparameters or in spec.modelConfig.hyperparameters, not both"]
