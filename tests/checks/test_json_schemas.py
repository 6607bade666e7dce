"""schemas/*.json are the JSON Schemas of the documents people write, generated from the models that load them
(mlgate/cli/schemas.py); every shipped and example document validates, and a typo does not."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from mlgate.cli.schemas import json_schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"


def documents(*globs: str) -> list[tuple[str, Any]]:
    return [(f"{p.relative_to(ROOT)}[{i}]", d) for g in globs for p in sorted(ROOT.glob(g))
            for i, d in enumerate(yaml.safe_load_all(p.read_text(encoding="utf-8"))) if d]


def test_the_committed_schemas_are_the_generated_ones():
    generated = {name: json.dumps(s, indent=2, sort_keys=True) + "\n" for name, s in json_schemas().items()}
    if os.environ.get("MLGATE_UPDATE_GOLDEN"):
        for name, text in generated.items():
            (SCHEMAS / name).write_text(text, encoding="utf-8")
    assert {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.json")} == generated


POLICIES = [d for d in documents("policies/*.yaml", "examples/policies/*.yaml", "examples/library/*.yaml",
                                 "tests/policy-suites/*/policies.yaml")
            if d[1].get("kind") in ("MLPolicy", "ClusterMLPolicy")]
SUITES = documents("tests/policy-suites/*/suite*.yaml")


@pytest.mark.parametrize(("where", "document"), POLICIES, ids=[w for w, _ in POLICIES])
def test_every_shipped_and_example_policy_validates(where: str, document: Any):
    errors = [e.message for e in Draft202012Validator(json_schemas()["mlpolicy.json"]).iter_errors(document)]
    assert errors == [], where


@pytest.mark.parametrize(("where", "document"), SUITES, ids=[w for w, _ in SUITES])
def test_every_policy_suite_validates(where: str, document: Any):
    errors = [e.message for e in Draft202012Validator(json_schemas()["policytest.json"]).iter_errors(document)]
    assert errors == [], where


def test_a_misspelt_rule_parameter_does_not_validate():
    policy = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "gpu"},
              "spec": {"rules": [{"rule": "gpu.max", "params": {"perContainr": 8}}]}}
    assert not Draft202012Validator(json_schemas()["mlpolicy.json"]).is_valid(policy)
    policy["spec"]["rules"][0]["params"] = {"perContainer": 8}
    assert Draft202012Validator(json_schemas()["mlpolicy.json"]).is_valid(policy)
