"""Model-server runtimes as data: runtimes.yaml (KServe's ClusterServingRuntimes, pinned) plus a platform's file.

`load_runtimes(path)` returns the shipped catalog with the file's entries merged in by name: a known runtime is
overridden field by field (`triton: {image: registry.local/triton:24.01-py3}`), a new name adds a runtime and
must give every required field. The `storageInitializer` section is merged the same way. A file that does not
parse or does not fit the format raises RuntimesError naming the file, the line and the field.
`use_runtimes` installs the catalog the reconciler's passes read (`active_runtimes`); the default is the shipped
one. A runtime's `resources` and `securityContext` are defaults: what the service's predictor container sets
wins. `render_template` fills KServe's `{{.Name}}` and `{{.Labels.<key>}}` in args, env and probe paths.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlgate.loading.linemap import line_at, load_with_node
from mlgate.model import pointer

__all__ = ["SHIPPED_RUNTIMES", "Catalog", "Runtime", "RuntimesError", "active_runtimes", "load_runtimes",
           "render_template", "use_runtimes"]

SHIPPED_RUNTIMES = Path(__file__).with_name("runtimes.yaml")
_TEMPLATE = re.compile(r"\{\{\s*\.(Name|Labels\.([A-Za-z0-9_./-]+))\s*\}\}")
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # the CRD's spec.runtime pattern (a DNS label)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Runtime(_Strict):
    """One model server: what the predictor container runs, where it listens and reads models, how it is probed."""

    image: str = Field(min_length=1)
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    http_port: int = Field(alias="httpPort", ge=1, le=65535)
    grpc_port: int | None = Field(default=None, alias="grpcPort", ge=1, le=65535)
    model_dir: str = Field(alias="modelDir", pattern=r"^/")
    readiness_probe: dict[str, Any] | None = Field(default=None, alias="readinessProbe")
    liveness_probe: dict[str, Any] | None = Field(default=None, alias="livenessProbe")
    startup_probe: dict[str, Any] | None = Field(default=None, alias="startupProbe")
    # the container's defaults, as KServe's runtime containers declare them; the service's own values win
    resources: dict[str, Any] = Field(default_factory=dict)
    security_context: dict[str, Any] = Field(default_factory=dict, alias="securityContext")


class StorageInitializer(_Strict):
    """The init container that downloads a model (KServe's storage initializer): args [modelUri, modelDir]."""

    image: str = Field(min_length=1)
    resources: dict[str, Any] = Field(default_factory=dict)


class Catalog(_Strict):
    storage_initializer: StorageInitializer = Field(alias="storageInitializer")
    runtimes: dict[str, Runtime] = Field(min_length=1)


class RuntimesError(Exception):
    """A runtimes file that cannot be used: `file:line: field: problem`, each kept as data."""

    def __init__(self, source: str, line: int, field: str, problem: str):
        where = f"{source}:{line}" + (f": {field}" if field else "")
        super().__init__(f"{where}: {problem}")
        self.source, self.line, self.field, self.problem = source, line, field, problem


def load_runtimes(path: Path | None = None) -> Catalog:
    """The shipped catalog, with `path`'s entries merged in by name when given."""
    shipped, _ = _read(SHIPPED_RUNTIMES)
    if path is None:
        return _validate(shipped, SHIPPED_RUNTIMES, None)
    extra, node = _read(path)
    unknown = sorted(set(extra) - {"runtimes", "storageInitializer"})
    if unknown:
        raise RuntimesError(str(path), line_at(node, pointer.join("", unknown[0])) if node else 1, unknown[0],
                            "unknown section (expected runtimes, storageInitializer)")
    merged = copy.deepcopy(shipped)
    for section in ("runtimes", "storageInitializer"):
        value = extra.get(section)
        if value is not None and not isinstance(value, dict):
            raise RuntimesError(str(path), line_at(node, "/" + section) if node else 1, section, "must be a mapping")
    for name, entry in (extra.get("runtimes") or {}).items():
        if not isinstance(entry, dict):
            raise RuntimesError(str(path), line_at(node, f"/runtimes/{name}") if node else 1, f"runtimes.{name}",
                                "must be a mapping")
        if not re.match(_NAME, str(name)):
            raise RuntimesError(str(path), line_at(node, f"/runtimes/{name}") if node else 1, f"runtimes.{name}",
                                "a runtime name is a DNS label (lowercase letters, digits and '-')")
        merged["runtimes"][str(name)] = {**merged["runtimes"].get(str(name), {}), **entry}
    merged["storageInitializer"] = {**merged["storageInitializer"], **(extra.get("storageInitializer") or {})}
    return _validate(merged, path, node)


def _read(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimesError(str(path), 1, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data, node = load_with_node(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise RuntimesError(str(path), mark.line + 1 if mark else 1, "", f"not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise RuntimesError(str(path), 1, "", "must be a mapping with `runtimes` (and `storageInitializer`)")
    return data, node


def _validate(data: dict[str, Any], path: Path, node: yaml.Node | None) -> Catalog:
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = [str(part) for part in error["loc"]]
        line = line_at(node, "".join(f"/{pointer.escape(p)}" for p in where)) if node is not None else 1
        raise RuntimesError(str(path), line, ".".join(where), error["msg"]) from None


@dataclass
class _Active:
    catalog: Catalog | None = None


_ACTIVE = _Active()


def use_runtimes(catalog: Catalog | None) -> None:
    """Install the catalog every later pass reads (None: back to the shipped one)."""
    _ACTIVE.catalog = catalog


def active_runtimes() -> Catalog:
    if _ACTIVE.catalog is None:
        _ACTIVE.catalog = load_runtimes()
    return _ACTIVE.catalog


def render_template(value: Any, name: str, labels: dict[str, str]) -> Any:
    """`value` with `{{.Name}}` and `{{.Labels.<key>}}` filled in every string (a missing label is empty)."""
    if isinstance(value, str):
        return _TEMPLATE.sub(lambda m: name if m.group(1) == "Name" else str(labels.get(m.group(2), "")), value)
    if isinstance(value, dict):
        return {k: render_template(v, name, labels) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render_template(v, name, labels) for v in value]
    return value
