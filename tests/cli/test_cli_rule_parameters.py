"""Every parameter of every rule is described, nested ones too, and `mlgate rules NAME` shows each one."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field

from mlgate.cli.main import cli
from mlgate.cli.rulehelp import nested_properties
from mlgate.rules.registry import catalog


def undescribed(model: type[BaseModel]) -> list[str]:
    """The dotted path of every parameter, at any depth, that has no description."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})

    def walk(properties: dict[str, Any], prefix: str) -> list[str]:
        missing = []
        for name, prop in properties.items():
            if not prop.get("description"):
                missing.append(prefix + name)
            inner = nested_properties(prop, defs)
            if inner is not None:
                missing += walk(inner, f"{prefix}{name}.")
        return missing

    return walk(schema.get("properties", {}), "")


@pytest.mark.parametrize("rule_id", sorted(catalog()))
def test_every_parameter_of_the_rule_at_any_depth_has_a_description(rule_id: str):
    assert undescribed(catalog()[rule_id].params) == []


def test_the_walk_finds_an_undescribed_field_inside_a_list_of_objects():
    class Inner(BaseModel):
        name: str = Field(description="described")
        checks: list[str] = []

    class Outer(BaseModel):
        items: list[Inner] = Field(default=[], description="described")
        plain: int = 1

    assert undescribed(Outer) == ["items.checks", "plain"]


def test_rules_with_a_name_shows_the_fields_of_a_nested_parameter_indented_under_it():
    result = CliRunner().invoke(cli, ["rules", "pod-security.restricted"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("pod-security.restricted (check): ")
    exceptions = lines.index("  exceptions: named exceptions: capabilities, host paths, sysctls, volume types, "
                             "per container")  # an object: its fields carry the defaults
    assert lines[exceptions + 5:exceptions + 8] == [
        "    containers: containers that skip container-level checks: {name, checks} or a bare name",
        "      name: the container's name (init, regular or ephemeral)",
        "      checks: container-level check IDs it skips (null: every one) (default null)",
    ]
    assert lines[-1] == "  docs: docs/rules.md#pod-security.restricted"
    assert not [line for line in lines if line.rstrip().endswith(":")]  # no parameter without its text
