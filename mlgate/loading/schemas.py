"""CRD schemas applied offline, as the API server applies them when an object is created.

The API server refuses a custom object that its CRD's `openAPIV3Schema` or `x-kubernetes-validations` (CEL)
refuse, before any admission webhook sees it. `mlgate validate` checks the same, so a green CI run means the API
server will take the manifest. The steps follow the apiextensions-apiserver's order on CREATE:

1. unknown fields: kubectl asks for strict field validation, which refuses them (the API server alone drops them);
   `metadata` holds ObjectMeta's fields; an object without its own `properties` keeps none unless it has
   `x-kubernetes-preserve-unknown-fields`;
2. nulls of fields that are not `nullable` are dropped, then every `default` is filled in where its parent exists;
3. `status` is dropped where the version has a status subresource (a create cannot set it);
4. the structural schema, checked with `jsonschema` (OpenAPI v3.0 is draft 4 with `nullable`,
   `x-kubernetes-int-or-string`, `x-kubernetes-list-type`); `format` is not checked;
5. the CEL rules (cel_rules.py), only when step 4 found nothing that blocks them, as the API server does.

Each refusal is a `Violation`: a JSON pointer, the API server's error type as a short reason, and a detail.
`jsonschema` and `cel-python` come with the `mlgate[schema]` extra and are imported only when an object of a
known kind is checked; the webhook never calls this (the API server has already done it by then).
"""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from mlgate.loading.documents import InputError, expand
from mlgate.loading.violations import Violation
from mlgate.model import pointer

CRD_KIND = "CustomResourceDefinition"
EXTRA = "schema"  # pyproject.toml's extra that brings the modules below
MODULES = ("jsonschema", "celpy")
CHECKOUT_CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"  # a checkout or an editable install
PACKAGED_CRD_DIR = Path(__file__).resolve().parents[1] / "shipped_crds"  # an installed wheel's copy
# ObjectMeta's fields (k8s.io/apimachinery/pkg/apis/meta/v1/types.go): strict decoding refuses any other
OBJECT_META = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})
# Error types after which the API server leaves the CEL rules unchecked (apiextensions-apiserver's
# customresource strategy, `hasBlockingErr`): the values may not have the types the rules were compiled for
BLOCKING = frozenset({"unsupported value", "required value", "too long", "too many", "invalid type"})
CEL_BLOCKED = "the CEL rules, until the schema errors are fixed (the API server checks them only then)"


@dataclass
class Verdict:
    """What the CRD of an object's kind says about it: refusals, and what could not be checked here (why)."""

    crd: str
    violations: list[Violation] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (check, reason)


class SchemaLoadError(Exception):
    """A CRD file that cannot be read or is no CRD mlgate can use: `source: problem`."""


def missing_module() -> str | None:
    """The first module of the extra that is not installed, or None."""
    return next((m for m in MODULES if importlib.util.find_spec(m) is None), None)


def default_crd_dir() -> Path:
    """mlgate's own CRDs: the copy pyproject.toml puts in the wheel, else `manifests/crds/` of the checkout."""
    return PACKAGED_CRD_DIR if PACKAGED_CRD_DIR.is_dir() else CHECKOUT_CRD_DIR


@dataclass
class _Version:
    crd: str
    api_version: str
    schema: dict[str, Any]
    status_subresource: bool
    validator: Any = None  # the compiled jsonschema validator, built on first use
    has_rules: bool | None = None


class SchemaCatalog:
    """The schemas of CRDs, by group, kind and version; later CRDs for a kind replace earlier ones."""

    def __init__(self, crds: Iterable[dict[str, Any]] = ()):
        self.kinds: dict[tuple[str, str], dict[str, _Version]] = {}
        self._cel: Any = None  # cel_rules.Rules, made on first use
        for crd in crds:
            self.add(crd)

    def __getstate__(self) -> dict[str, Any]:
        """The schemas alone, for a worker process that is spawned: compiled validators are local classes that do
        not pickle, and the worker builds its own on first use."""
        kinds = {key: {name: replace(version, validator=None) for name, version in versions.items()}
                 for key, versions in self.kinds.items()}
        return {**self.__dict__, "kinds": kinds, "_cel": None}

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path]) -> SchemaCatalog:
        """Every CustomResourceDefinition in the files and directories given; other documents are passed over."""
        catalog = cls()
        catalog.extend(paths)
        return catalog

    def extend(self, paths: Iterable[str | Path]) -> int:
        """Adds the CRDs with a schema under `paths`; how many there were."""
        added = 0
        for source, crd in _read_crds(paths):
            try:
                added += self.add(crd)
            except SchemaLoadError as exc:
                raise SchemaLoadError(f"{source}: {exc}") from exc
        return added

    def add(self, crd: dict[str, Any]) -> int:
        """Adds one CRD; 1 when it has a schema to check against, else 0."""
        spec: dict[str, Any] = crd["spec"] if isinstance(crd.get("spec"), dict) else {}
        names: dict[str, Any] = spec["names"] if isinstance(spec.get("names"), dict) else {}
        name = str((crd.get("metadata") or {}).get("name", "?"))
        group, kind, versions = spec.get("group"), names.get("kind"), spec.get("versions")
        if not isinstance(group, str) or not isinstance(kind, str) or not isinstance(versions, list):
            raise SchemaLoadError(f"{name}: a CRD needs spec.group, spec.names.kind and spec.versions")
        known: dict[str, _Version] = {}
        for version in versions:
            if not isinstance(version, dict) or not version.get("served", True) or "name" not in version:
                continue
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(schema, dict):
                known[str(version["name"])] = _Version(name, f"{group}/{version['name']}", schema,
                                                       "status" in (version.get("subresources") or {}))
        if known:
            self.kinds[(group, kind)] = known
        return 1 if known else 0

    def __len__(self) -> int:
        return len(self.kinds)

    def check(self, obj: dict[str, Any]) -> Verdict | None:
        """The verdict on one object, or None when no CRD here describes its kind."""
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        versions = self.kinds.get((group, str(obj.get("kind"))))
        if versions is None:
            return None
        schema = versions.get(version)
        if schema is None:
            served = ", ".join(v.api_version for v in versions.values())
            return Verdict(next(iter(versions.values())).crd, [Violation(
                "schema", "/apiVersion", "unsupported value",
                f"{_quoted(obj.get('apiVersion'))}: {obj.get('kind')} is served as {served}")])
        return self._check(schema, obj)

    def _check(self, version: _Version, obj: dict[str, Any]) -> Verdict:
        from mlgate.loading import cel_rules

        verdict = Verdict(version.crd)
        found = verdict.violations
        value = normalise(version.schema, obj, "", found, root=True)
        if version.status_subresource:
            # a create cannot set status; strict decoding still refuses unknown fields in it
            value.pop("status", None)
            found[:] = [v for v in found if v.reason == "unknown field" or not v.path.startswith("/status/")]
        found += structural_violations(version, value)
        if version.has_rules is None:
            version.has_rules = cel_rules.has_rules(version.schema)
        if not version.has_rules:
            return verdict
        if any(v.reason in BLOCKING for v in found):
            verdict.unchecked.append(("cel", CEL_BLOCKED))
            return verdict
        if self._cel is None:
            self._cel = cel_rules.Rules()
        self._cel.check(version.schema, value, found, verdict.unchecked)
        return verdict


def _read_crds(paths: Iterable[str | Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # no line map: upstream CRDs run to megabytes
    try:
        files = list(expand(str(p) for p in paths))
    except InputError as exc:
        raise SchemaLoadError(str(exc)) from exc
    for source in files:
        try:
            with open(source, "rb") as handle:
                documents = list(yaml.load_all(handle, Loader=loader))
        except OSError as exc:
            raise SchemaLoadError(f"{source}: cannot read: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{source}:{mark.line + 1}" if mark is not None else source
            raise SchemaLoadError(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from exc
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == CRD_KIND:
                yield source, document


# --- step 1 to 3: unknown fields, nulls, defaults ---------------------------------------------------------


def normalise(schema: dict[str, Any], value: Any, path: str, found: list[Violation], *, root: bool = False) -> Any:
    """`value` as the API server validates it: unknown fields reported and dropped, nulls of fields that are not
    nullable dropped, defaults filled in. The input is not changed."""
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return value
        out = [normalise(items, v, pointer.join(path, i), found) for i, v in enumerate(value)]
        if schema.get("x-kubernetes-list-type") == "map":
            found += _duplicate_keys(out, schema.get("x-kubernetes-list-map-keys") or [], path)
        return out
    keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if not isinstance(value, dict) or schema.get("type", "object" if keeps_unknown else None) != "object":
        return value  # a wrong type is the structural check's to report
    properties: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    resource = root or bool(schema.get("x-kubernetes-embedded-resource"))
    result: dict[str, Any] = {}
    for key, item in value.items():
        where = pointer.join(path, key)
        child = properties.get(key) or (extra if isinstance(extra, dict) else None)
        if resource and key in ("apiVersion", "kind", "metadata") and key not in properties:
            child = {"type": "object" if key == "metadata" else "string"}
        if resource and key == "metadata" and isinstance(item, dict):
            found += [_unknown(pointer.join(where, k)) for k in item if k not in OBJECT_META]
            result[key] = item
            continue
        if child is None:
            if keeps_unknown or extra is True:
                result[key] = item
            else:
                found.append(_unknown(where))
            continue
        if item is None and not child.get("nullable"):
            continue  # dropped, as the API server drops it; a default may take its place below
        result[key] = normalise(child, item, where, found)
    for key, child in properties.items():
        if key not in result and "default" in child:
            result[key] = normalise(child, copy.deepcopy(child["default"]), pointer.join(path, key), [])
    return result


def _unknown(where: str) -> Violation:
    return Violation("schema", where, "unknown field", "not a field of this object in its CRD schema; kubectl's "
                     "strict field validation refuses it", "remove it, or check its spelling and indentation")


def _duplicate_keys(items: list[Any], keys: list[str], path: str) -> Iterator[Violation]:
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True, default=str)
        if key in seen:
            yield Violation("schema", pointer.join(path, index), "duplicate value", key)
        seen.add(key)


# --- step 4: the structural schema ------------------------------------------------------------------------


def structural_violations(version: _Version, value: dict[str, Any]) -> list[Violation]:
    if version.validator is None:
        version.validator = _validator(version.schema)
    errors = list(version.validator.iter_errors(value))
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    found: list[Violation] = []
    for error in errors:
        if error.validator in ("anyOf", "oneOf") and tuple(error.absolute_path) in typed:
            continue  # `must be of type integer,string` says it already
        found += _violations(error)
    return sorted(set(found), key=lambda v: (v.path, v.reason, v.detail))


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema  # type: ignore[import-untyped]

    base = jsonschema.Draft4Validator
    # a JSON number with nothing after the point is an integer to the API server (2.0 is stored as 2)
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, v: (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer()))
    return jsonschema.validators.extend(base, type_checker=checker)(openapi_to_json_schema(schema))


# keywords that say nothing jsonschema should check: documentation, defaults (applied already), CEL, formats
_SKIPPED = frozenset({"description", "default", "example", "externalDocs", "format", "title", "nullable"})


def openapi_to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """One OpenAPI v3.0 schema node of a CRD as a JSON Schema (draft 4) node."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SKIPPED or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: openapi_to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = openapi_to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [openapi_to_json_schema(child) for child in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"), (type(None), "null"))


def _json_type(value: Any) -> str:
    return next(name for kind, name in _JSON_TYPES if isinstance(value, kind))


def _quoted(value: Any) -> str:
    return json.dumps(value, default=str)


def _violations(error: Any) -> Iterator[Violation]:
    """The API server's wording (k8s.io/kube-openapi validate errors) for one jsonschema error."""
    path = pointer.join("", *error.absolute_path)
    value, expected, keyword = error.instance, error.validator_value, error.validator
    if keyword == "required":
        for name in expected:
            if isinstance(value, dict) and name not in value:
                yield Violation("schema", pointer.join(path, name), "required value", "the CRD schema requires it")
        return
    if keyword == "uniqueItems":
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                yield Violation("schema", pointer.join(path, index), "duplicate value", _quoted(item))
            seen.append(item)
        return
    yield Violation("schema", path, *_wording(keyword, value, expected, error.schema))


_UNITS = {"Length": "characters", "Items": "items", "Properties": "properties"}


def _wording(keyword: str, value: Any, expected: Any, schema: dict[str, Any]) -> tuple[str, str]:
    """(reason, detail) of one failed keyword."""
    if keyword == "type":
        wanted = ",".join(expected) if isinstance(expected, list) else expected
        return "invalid type", f"must be of type {wanted}, not {_json_type(value)}"
    if keyword == "enum":
        return "unsupported value", f"{_quoted(value)}: supported values: {', '.join(map(_quoted, expected))}"
    if keyword[:3] in ("max", "min") and keyword[3:] in _UNITS:
        size = f"{len(value)} {_UNITS[keyword[3:]]}"
        if keyword.startswith("min"):
            return "invalid value", f"{size}; should have at least {expected}"
        return ("too long" if keyword == "maxLength" else "too many"), f"{size}; may have at most {expected}"
    if keyword in ("minimum", "maximum"):
        exclusive = schema.get("exclusiveMinimum" if keyword == "minimum" else "exclusiveMaximum") is True
        side = ("greater than" if keyword == "minimum" else "less than") + ("" if exclusive else " or equal to")
        return "invalid value", f"{_quoted(value)}: should be {side} {expected}"
    if keyword == "pattern":
        return "invalid value", f"{_quoted(value)}: should match '{expected}'"
    if keyword == "multipleOf":
        return "invalid value", f"{_quoted(value)}: should be a multiple of {expected}"
    return "invalid value", f"{_quoted(value)[:80]}: does not satisfy {keyword}"
