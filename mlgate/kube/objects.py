"""Which stored objects are judged, and in what shape: pure rules shared by `validate --cluster` and the audit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlgate.workloads.catalog import KindCatalog

__all__ = ["OPT_OUT", "controlled_by_judged", "opted_out", "slim"]

OPT_OUT = ("mlgate.dev/ignore", "true")  # the label the webhook configurations' namespaceSelector excludes


def controlled_by_judged(obj: Mapping[str, Any], catalog: KindCatalog) -> bool:
    """Whether the object's controller is an object of a kind the engine judges."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller") and catalog.find(str(owner.get("apiVersion") or ""), str(owner.get("kind") or "")):
            return True
    return False


def opted_out(namespace_labels: Mapping[str, str] | None) -> bool:
    """Whether a namespace with these labels is left out of admission, so out of judging."""
    return namespace_labels is not None and namespace_labels.get(OPT_OUT[0]) == OPT_OUT[1]


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj
