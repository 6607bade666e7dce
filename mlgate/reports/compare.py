"""When a built report needs writing: compare it with the stored one, leaving out what only time changed.

A report's content is everything but the results' timestamps and what the API server adds to metadata. The
audit writes a report only when its content changed, and then keeps the timestamp of every result that was
already there, so "when was this found" stays the first time it was found.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

# what the report builder writes in metadata; the rest is the server's (uid, resourceVersion, managedFields) or a
# client's (kubectl's last-applied-configuration annotation)
OWN_METADATA = ("name", "namespace", "labels")


def dumps(report: Mapping[str, Any]) -> str:
    """The canonical serialization: sorted keys, no spaces; the same report is the same bytes."""
    return json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report without timestamps and server-set metadata."""
    meta = report.get("metadata") or {}
    body = {k: v for k, v in report.items() if k not in ("metadata", "results")}
    body["metadata"] = {k: meta[k] for k in OWN_METADATA if meta.get(k)}
    body["results"] = [_untimed(r) for r in report.get("results") or []]
    return body


def digest(report: Mapping[str, Any]) -> str:
    """A short fingerprint of the content: an audit can keep these instead of whole reports."""
    return hashlib.sha256(dumps(content(report)).encode()).hexdigest()[:32]


def unchanged(stored: Mapping[str, Any] | None, built: Mapping[str, Any]) -> bool:
    """Whether writing `built` over `stored` would change anything but timestamps."""
    return stored is not None and content(stored) == content(built)


def settle(stored: Mapping[str, Any] | None, built: dict[str, Any]) -> dict[str, Any] | None:
    """What to write: None when nothing but timestamps changed, else `built` with the stored timestamp of every
    result that was there already (the same object, policy, rule, outcome, message and properties)."""
    if unchanged(stored, built):
        return None
    if stored is None:
        return built
    found = {dumps(_untimed(r)): r["timestamp"] for r in stored.get("results") or [] if "timestamp" in r}
    results = [{**r, "timestamp": found.get(dumps(_untimed(r)), r.get("timestamp"))} for r in built["results"]]
    return {**built, "results": [{k: v for k, v in r.items() if v is not None} for r in results]}


def stale(stored_names: Iterable[str], built: Iterable[Mapping[str, Any]]) -> list[str]:
    """Stored reports no built one replaces (a namespace split differently, or emptied): to delete, sorted."""
    wanted = {r["metadata"]["name"] for r in built}
    return sorted(set(stored_names) - wanted)


def _untimed(result: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "timestamp"}
