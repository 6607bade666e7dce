"""Built-in objects (Pods, Jobs, Deployments...) as the API server decodes them, offline.

The API server refuses a built-in object whose JSON does not decode into its Go type, before any admission
webhook sees it: `spec: {containers: 5}` or `containers: "x"` never reach admission, so a CI run that let them
through would be green for a manifest `kubectl apply` refuses. This checks the same shapes against the OpenAPI v3
schemas of the pinned Kubernetes version (tools/control-plane/VERSION), which kube-apiserver publishes at
`/openapi/v3` and tools/kube_openapi.py copies into kube_openapi.json (the version is recorded in it):

- **invalid type**: an object, list, string, integer, number or boolean where the type says another
  (k8s.io/apimachinery's json decoding; a whole float such as 2.0 reaches the server as 2, since kubectl's YAML to
  JSON writes it so). A null is the field's zero value, as Go decodes it, and is never refused here;
- **unknown field**: kubectl asks for `fieldValidation=Strict` unless told otherwise (`--validate=strict` by
  default: kubernetes/kubectl pkg/cmd/util/helpers.go, `AddValidateFlags`, `GetValidationDirective`), and the API
  server then refuses unknown and duplicate fields; with `warn` it would drop them and warn. Objects without
  properties (RawExtension, FieldsV1) take any field;
- **required value**: a field the schema marks `required` (Container.name, PodSpec.containers, JobSpec.template,
  DeploymentSpec.selector...) missing or null; these come from the Go types' non-optional fields, and the API
  server's validation refuses each when it is empty;
- **unsupported value** on `apiVersion`: a version of a group the pinned version does not serve for that kind
  (`batch/v1beta1` CronJob).

Everything else the API server's hand-written validation says (name formats, label syntax, quantities' spelling,
enum values, ranges) is not checked here; the real API server's `--dry-run=server` is the full answer. The check
needs only the standard library: the light install (`pip install mlgate`, no jsonschema) runs it. The webhook does
not: the API server has decoded (and refused) such objects before admission is asked.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mlgate.loading.violations import Violation
from mlgate.model import pointer

DATA = Path(__file__).with_name("kube_openapi.json")
CHECK = "schema"
# what each OpenAPI type accepts, as PyYAML and JSON parse it; kubectl's YAML to JSON writes dates as strings
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "boolean": (bool,),
    "string": (str, datetime.date), "integer": (int,), "number": (int, float),
}


@dataclass(frozen=True)
class BuiltinSchemas:
    """The schemas of the built-in kinds of one Kubernetes version, by `apiVersion/kind`."""

    version: str
    kinds: dict[str, str]  # "apps/v1/Deployment" -> the schema's name
    schemas: dict[str, Any]

    @classmethod
    def load(cls, path: Path = DATA) -> BuiltinSchemas:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(str(data["kubernetes"]), data["kinds"], data["schemas"])

    def served(self, api_version: str, kind: str) -> str | None:
        return self.kinds.get(f"{api_version}/{kind}")

    def check(self, obj: dict[str, Any]) -> list[Violation] | None:
        """What the API server would refuse in `obj`, or None when it is of no built-in kind known here."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        name = self.served(api_version, kind)
        if name is not None:
            return sorted(set(self._walk({"$ref": name}, obj, "")), key=lambda v: (v.path, v.reason))
        group = api_version.rpartition("/")[0]
        others = [k.rpartition("/")[0] for k in self.kinds
                  if k.endswith(f"/{kind}") and k.rpartition("/")[0].rpartition("/")[0] == group]
        if not others:
            return None  # a custom resource, or a kind mlgate does not check
        return [Violation(CHECK, "/apiVersion", "unsupported value",
                          f"{json.dumps(api_version)}: Kubernetes v{self.version} serves {kind} as "
                          f"{', '.join(others)}", f"use apiVersion: {others[0]}")]

    def _walk(self, schema: dict[str, Any], value: Any, path: str) -> Iterator[Violation]:
        schema = self._resolved(schema)
        if value is None:
            return  # the zero value: a required field that is null is reported by its parent
        alternatives = schema.get("oneOf") or schema.get("anyOf")
        if alternatives:  # Quantity (string or number), IntOrString (integer or string)
            wanted = [self._resolved(a).get("type") for a in alternatives]
            if not any(_is(value, t) for t in wanted if isinstance(t, str)):
                yield _invalid_type(path, ",".join(t for t in wanted if isinstance(t, str)), value)
            return
        kind = schema.get("type")
        if not isinstance(kind, str):
            return
        if not _is(value, kind):
            yield _invalid_type(path, kind, value)
        elif kind == "array" and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                yield from self._walk(schema["items"], item, pointer.join(path, index))
        elif kind == "object":
            yield from self._fields(schema, value, path)

    def _fields(self, schema: dict[str, Any], value: dict[str, Any], path: str) -> Iterator[Violation]:
        properties: dict[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key, extra)
            if isinstance(child, dict):
                yield from self._walk(child, item, pointer.join(path, key))
            elif properties or extra is False:  # an object without properties (RawExtension) takes any field
                yield Violation(CHECK, pointer.join(path, str(key)), "unknown field",
                                f"not a field of this object in Kubernetes v{self.version}; kubectl's strict field "
                                "validation refuses it", "remove it, or check its spelling and indentation")
        for key in schema.get("required") or ():
            if value.get(key) is None:
                yield Violation(CHECK, pointer.join(path, key), "required value",
                                f"Kubernetes v{self.version} requires it")

    def _resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`$ref`, and the `allOf: [{$ref}]` the API server wraps references in, followed to their schema."""
        while True:
            if "$ref" in schema:
                schema = self.schemas[schema["$ref"]]
            elif len(schema.get("allOf") or ()) == 1 and "type" not in schema:
                schema = schema["allOf"][0]
            else:
                return schema


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _ACCEPTS.get(kind, object))


_NAMES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
          (dict, "object"), (datetime.date, "string"))


def _invalid_type(path: str, wanted: str, value: Any) -> Violation:
    found = next((name for kind, name in _NAMES if isinstance(value, kind)), type(value).__name__)
    return Violation(CHECK, path, "invalid type", f"must be of type {wanted}, not {found}")


@cache
def shipped() -> BuiltinSchemas:
    """The schemas shipped with mlgate, read once per process."""
    return BuiltinSchemas.load()
