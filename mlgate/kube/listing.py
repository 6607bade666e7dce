"""Paged LIST and API discovery over the shared client (`watch.api_get`): GET only, never a write.

`list_items` asks for `limit` items at a time and follows `metadata.continue`, so 5,000 stored jobs are ten small
answers, never one large one, and the caller holds one page at a time. `served` asks discovery (`/api`, `/apis`,
then `/apis/<group>/<version>` once per group version needed) which of the kinds the engine knows the API server
serves, and at which version: a kind whose CRD is not installed is reported, not an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from mlgate.kube.watch import LIST_TIMEOUT, PAGE, ApiError, Get

__all__ = ["Served", "list_items", "served"]


def list_items(get: Get, path: str, query: dict[str, str] | None = None, page: int = PAGE) -> Iterator[dict[str, Any]]:
    """The items at `path`, page by page (limit/continue). A continue token that expired (410) raises ApiError: the
    pages already given would mix two versions of the collection."""
    params = {**(query or {}), "limit": str(page)}
    while True:
        response = get(path, params, LIST_TIMEOUT)
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        yield from body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return
        params = {**params, "continue": str(token)}


@dataclass(frozen=True)
class Served:
    """A kind the API server serves: where to list it."""

    group: str
    version: str
    kind: str
    resource: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        """The collection, in one namespace or (None) in all."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{namespace}" if namespace and self.namespaced else ""
        return f"{root}{where}/{self.resource}"


@dataclass(frozen=True)
class Wanted:
    """A kind asked for: its group, kind, plural resource and the versions its description reads (none: any)."""

    group: str
    kind: str
    resource: str
    versions: tuple[str, ...] = ()


def served(get: Get, wanted: Iterable[Wanted]) -> tuple[list[Served], list[Wanted]]:
    """(the kinds served, at the version discovery prefers among those their description reads; those not)."""
    groups = _groups(get)
    resources: dict[str, list[dict[str, Any]]] = {}  # group version -> its APIResourceList
    found: list[Served] = []
    missing: list[Wanted] = []
    for want in wanted:
        offered = groups.get(want.group, [])
        versions = [v for v in offered if not want.versions or v in want.versions]
        hit = None
        for version in versions:
            group_version = f"{want.group}/{version}" if want.group else version
            if group_version not in resources:
                resources[group_version] = _resources(get, group_version)
            hit = next((r for r in resources[group_version]
                        if r.get("name") == want.resource and r.get("kind") == want.kind
                        and "list" in (r.get("verbs") or [])), None)
            if hit is not None:
                found.append(Served(want.group, version, want.kind, want.resource, bool(hit.get("namespaced"))))
                break
        if hit is None:
            missing.append(want)
    return found, missing


def _groups(get: Get) -> dict[str, list[str]]:
    """Group -> its served versions, the preferred one first."""
    core = _json(get, "/api")
    groups: dict[str, list[str]] = {"": [str(v) for v in core.get("versions") or []]}
    for group in _json(get, "/apis").get("groups") or []:
        preferred = str((group.get("preferredVersion") or {}).get("version") or "")
        versions = [str(v.get("version")) for v in group.get("versions") or []]
        groups[str(group.get("name"))] = sorted(versions, key=lambda v: v != preferred)
    return groups


def _resources(get: Get, group_version: str) -> list[dict[str, Any]]:
    path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
    try:
        return list(_json(get, path).get("resources") or [])
    except ApiError as exc:
        if exc.status in (404, 503):  # a group version going away, or an aggregated API that is down
            return []
        raise


def _json(get: Get, path: str) -> dict[str, Any]:
    response = get(path, {}, LIST_TIMEOUT)
    try:
        body = json.loads(response.data)
    finally:
        response.release_conn()
    return body if isinstance(body, dict) else {}
