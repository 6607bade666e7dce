"""A TrainingJob's modelConfig as the engine sees it, from kinds.yaml data alone: its hyperparameters are refused
where they name a variable the reconciler sets (launch.reserved-env reads every `envFrom` field), and its dataPath
and outputPath are checked as storage locations (storage.checkpoint-uri reads every `storageUris` field)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import change, decide, outcome, trainingjob

from mlgate.model.kinds import KindSpec
from mlgate.model.results import Outcome

TJ = trainingjob()


def findings(obj: dict[str, Any], rule: str) -> list[tuple[str, str]]:
    return [(f.path, f.reason) for r in decide(obj, rule).results if r.rule == rule for f in r.findings]


# --- launch.reserved-env ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "refused"), [("TF_CONFIG", True), ("PET_NNODES", True), ("DATA_PATH", True),
                                              ("OUTPUT_PATH", True), ("CHECKPOINT_URI", True), ("LR", False)])
def test_a_model_config_hyperparameter_the_reconciler_would_drop_is_refused_at_its_key(key: str, refused: bool):
    obj = change(TJ, "/spec/modelConfig/hyperparameters", {key: "1"})
    expected = [(f"/spec/modelConfig/hyperparameters/{key}", "env set by operator")] if refused else []
    assert findings(obj, "launch.reserved-env") == expected


def test_deny_data_path_as_a_top_level_hyperparameter_too():
    obj = change(TJ, "/spec/hyperparameters", {"OUTPUT_PATH": "/out"})
    (finding,) = decide(obj, "launch.reserved-env").results[0].findings
    assert finding.path == "/spec/hyperparameters/OUTPUT_PATH"
    assert finding.detail == ("spec.hyperparameters names OUTPUT_PATH, which mlgate's reconciler sets itself, so this "
                              "value would never reach the pods")


# --- storage.checkpoint-uri ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["dataPath", "outputPath"])
def test_deny_a_model_config_uri_with_a_scheme_the_policy_does_not_allow(field: str):
    obj = change(TJ, f"/spec/modelConfig/{field}", "http://files.example/imagenet")
    assert findings(obj, "storage.checkpoint-uri") == [(f"/spec/modelConfig/{field}", "uri scheme not allowed")]


def test_deny_a_malformed_output_uri():
    obj = change(TJ, "/spec/modelConfig/outputPath", "s3:///models")
    assert findings(obj, "storage.checkpoint-uri") == [("/spec/modelConfig/outputPath", "uri malformed")]


def test_allow_object_store_uris_for_data_and_output():
    obj = change(change(TJ, "/spec/modelConfig/dataPath", "hf://acme/corpus"), "/spec/modelConfig/outputPath",
                 "s3://ml-models/llm")
    assert outcome(obj, "storage.checkpoint-uri") is Outcome.PASS


def test_an_absolute_path_in_the_pod_is_not_a_uri_to_check():
    obj = change(TJ, "/spec/modelConfig", {"dataPath": "/data/train", "outputPath": "/models"})
    assert outcome(obj, "storage.checkpoint-uri") is Outcome.SKIP


def test_a_kind_description_refuses_a_storage_uri_that_is_not_a_pointer():
    with pytest.raises(ValueError, match="is not a JSON pointer"):
        KindSpec.model_validate({"kind": "Train", "resource": "trains", "render": "trainingjob",
                                 "storageUris": ["spec.dataPath"]})
