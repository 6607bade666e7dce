"""`mlgate rules NAME`: one rule and every parameter described, those of a nested object indented under it.

The text comes from the parameter models' JSON Schema (pydantic `Field(description=...)`), the same schema that
schemas/mlpolicy.json publishes, so the help and the editor's hints cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from mlgate.rules.registry import RuleSpec

Schema = Mapping[str, Any]


def describe_rule(spec: RuleSpec) -> list[str]:
    schema = spec.params.model_json_schema(by_alias=True)
    kind = "mutation" if spec.is_mutation else "check"
    return [f"{spec.id} ({kind}): {spec.summary}",
            *_parameters(schema.get("properties", {}), schema.get("$defs", {}), "  "),
            f"  docs: docs/rules.md#{spec.id}"]


def _parameters(properties: Schema, defs: Schema, indent: str) -> Iterator[str]:
    for name, schema in properties.items():
        inner = nested_properties(schema, defs)
        default = f" (default {json.dumps(schema['default'])})" if "default" in schema and inner is None else ""
        yield f"{indent}{name}: {schema.get('description', '')}{default}"
        if inner is not None:
            yield from _parameters(inner, defs, indent + "  ")


def nested_properties(schema: Schema, defs: Schema) -> Schema | None:
    """The properties of the object a parameter holds, or of each item of its list; None for a plain value."""
    for candidate in (schema, schema.get("items") or {}, *schema.get("anyOf", ())):
        ref = candidate.get("$ref") or (candidate.get("items") or {}).get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return defs[ref.removeprefix("#/$defs/")].get("properties", {})  # type: ignore[no-any-return]
    return None
