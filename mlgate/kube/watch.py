"""LIST + WATCH of one resource, shared by the webhook's fact cache and the reconciler's informers.

Transports only: the engine never imports this (an import-linter contract says so). The Kubernetes client is
used for what it is good at (kubeconfig and in-cluster credentials, token refresh, TLS); requests go to plain
resource paths through one `ApiClient`, and responses are read as JSON lines. The generated API classes are not
loaded: they cost ~25 MB of memory.

A `Reflector` runs on one daemon thread: LIST in pages of `PAGE` items (their items replace what the consumer
held), then WATCH from the list's resourceVersion with bookmarks; a 410 Gone lists again at once, any other error
after a capped exponential backoff (`reach.Backoff`, client-go's reflector backoff; a resource the API server does
not serve counts as listed and empty, so readiness does not wait for optional CRDs). `transform` (optional)
shrinks each object before it is handed over, so a consumer that needs only names never holds whole pods.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .reach import Backoff, Reachability, describe, unreachable

__all__ = ["ApiError", "Get", "OnEvent", "OnReplace", "Reflector", "Response", "api_client", "api_get", "server_of"]

log = logging.getLogger("mlgate.kube")
WATCH_SECONDS = 300
LIST_TIMEOUT = 30
PAGE = 500

OnReplace = Callable[[str, Sequence[Mapping[str, Any]]], None]
OnEvent = Callable[[str, str, Mapping[str, Any]], None]


class Response(Protocol):
    """The part of a urllib3 response the loops read."""

    status: int
    data: bytes

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]: ...

    def release_conn(self) -> None: ...


Get = Callable[[str, dict[str, str], float], Response]


class ApiError(Exception):
    """A non-2xx answer from the API server: its status and its message (str: "<status>: <message>")."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass
class Reflector:
    kind: str
    path: str
    get: Get
    on_replace: OnReplace
    on_event: OnEvent
    stop: threading.Event
    selector: str = ""  # a label selector, e.g. "mlgate.dev/job-name"
    transform: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    on_unserved: Callable[[str], None] | None = None  # told when the kind is not served (its LIST was a 404)
    synced: threading.Event = field(default_factory=threading.Event)  # set after the first complete LIST
    backoff: Backoff = field(default_factory=Backoff)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"watch-{self.kind}", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                version = self._list()
                self.backoff.reset()
                while not self.stop.is_set():
                    version = self._watch(version)
            except ApiError as exc:
                if exc.status == 410:  # the watch fell too far behind: list again now
                    continue
                if exc.status == 404 and not self.synced.is_set():
                    # Not served (e.g. no Volcano CRDs): nothing of it exists, so the consumer is in sync
                    # with an empty list; keep looking in case the CRD is installed later.
                    self.on_replace(self.kind, [])
                    if self.on_unserved is not None:
                        self.on_unserved(self.kind)
                    self.synced.set()
                self._back_off(exc)
            except Exception as exc:  # a dropped connection, or a bug in a consumer: never the end of the watch
                self._back_off(exc)

    def _back_off(self, exc: Exception) -> None:
        delay = self.backoff.next()
        log.warning("%s: %s; listing again in %.1fs", self.kind, _why(exc), delay)
        self.stop.wait(delay)

    def _list(self) -> str:
        items: list[Mapping[str, Any]] = []
        query = self._query({"limit": str(PAGE)})
        while True:
            body = json.loads(self.get(self.path, query, LIST_TIMEOUT).data)
            items.extend(self._shrink(item) for item in body.get("items") or [])
            meta = body.get("metadata") or {}
            if not meta.get("continue"):
                break
            query = {**query, "continue": str(meta["continue"])}
        self.on_replace(self.kind, items)
        self.synced.set()
        return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        query = self._query({"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                             "timeoutSeconds": str(WATCH_SECONDS)})
        response = self.get(self.path, query, WATCH_SECONDS + 30)
        try:
            for line in _lines(response):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or "watch error"))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") != "BOOKMARK":
                    self.on_event(self.kind, str(event.get("type")), self._shrink(obj))
                if self.stop.is_set():
                    break
        finally:
            response.release_conn()
        return version

    def _query(self, query: dict[str, str]) -> dict[str, str]:
        return {**query, "labelSelector": self.selector} if self.selector else query

    def _shrink(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return self.transform(obj) if self.transform else obj


def _lines(response: Response) -> Iterator[bytes]:
    buffer = b""
    for chunk in response.stream(None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (line for line in complete if line.strip())
    if buffer.strip():
        yield buffer


def _why(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status == 404:
        return "the API server does not serve this resource (is the CRD installed?)"
    if status == 403:
        return "forbidden: the ServiceAccount lacks list/watch on this resource"
    if unreachable(exc):
        return f"cannot reach the API server: {describe(exc)}"
    return f"{type(exc).__name__}: {exc}"


def api_client(kubeconfig: str | None, in_cluster: bool, context: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient` with kubeconfig (its current context, or `context`) or in-cluster
    credentials (TLS, token refresh)."""
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
    return client.ApiClient()


def server_of(api: Any) -> str:
    """The API server's URL an `ApiClient` sends to, e.g. https://127.0.0.1:6443."""
    return str(getattr(getattr(api, "configuration", None), "host", "") or "the API server")


def api_get(kubeconfig: str | None, in_cluster: bool, context: str | None = None, *, api: Any = None,
            reach: Reachability | None = None) -> Get:
    """GET through the Kubernetes client's credentials (or those of `api`); the response body is left unread.
    With `reach`, every request's outcome (an answer, or none) is recorded there."""
    api = api if api is not None else api_client(kubeconfig, in_cluster, context)

    def get(path: str, query: dict[str, str], timeout: float) -> Response:
        method, url, headers, body, post = api.param_serialize(
            "GET", path, query_params=list(query.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = api.call_api(method, url, headers, body, post, _request_timeout=timeout).response
        if not 200 <= response.status < 300:
            message = response.data[:300].decode(errors="replace")
            response.release_conn()
            raise ApiError(response.status, message)
        return response  # type: ignore[no-any-return]

    if reach is None:
        return get
    observed = reach

    def get_observed(path: str, query: dict[str, str], timeout: float) -> Response:
        return observed.observe(lambda: get(path, query, timeout))

    return get_observed
