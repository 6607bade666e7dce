"""JSON Schemas of the documents people write, generated from the models that load them, for editors.

`schemas/*.json` in the repository are these, kept equal by a test; a YAML file validates against one with
`# yaml-language-server: $schema=<path or URL>` (the YAML language server behind most editors). A policy's
rules are one of the registered rules, each with its own parameters' schema, so an editor completes them.
"""

from __future__ import annotations

from typing import Any

from mlgate.cli.testsuite import Suite
from mlgate.model.kinds import WorkloadKindDocument
from mlgate.model.policy import PolicyDocument
from mlgate.rules.registry import catalog

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def policy_schema() -> dict[str, Any]:
    schema = PolicyDocument.model_json_schema(by_alias=True)
    rules = []
    for spec in sorted(catalog().values(), key=lambda s: s.id):
        params = spec.params.model_json_schema(by_alias=True)
        for name, definition in params.pop("$defs", {}).items():
            schema.setdefault("$defs", {})[name] = definition
        rules.append({"type": "object", "description": spec.summary, "additionalProperties": False,
                      "required": ["rule"],
                      "properties": {"rule": {"const": spec.id}, "action": {"enum": ["deny", "warn", "audit"]},
                                     "params": params}})
    schema["$defs"]["RuleBinding"] = {"oneOf": rules}
    return {"$schema": DIALECT, "title": "MLPolicy or ClusterMLPolicy", **schema}


def json_schemas() -> dict[str, dict[str, Any]]:
    """File name -> schema."""
    return {
        "mlpolicy.json": policy_schema(),
        "policytest.json": {"$schema": DIALECT, "title": "PolicyTest", **Suite.model_json_schema(by_alias=True)},
        "workloadkind.json": {"$schema": DIALECT, "title": "WorkloadKind or ClusterWorkloadKind",
                              **WorkloadKindDocument.model_json_schema(by_alias=True)},
    }
