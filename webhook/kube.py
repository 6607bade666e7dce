"""LIST+WATCH loops that feed the facts cache and the cluster policy source.

Imported only when `mlgate serve` runs with `--in-cluster` or `--kubeconfig`. The Kubernetes
client is used for what it is good at (kubeconfig and in-cluster credentials, token refresh,
TLS); requests go to plain resource paths through one `ApiClient`, and responses are read as
JSON lines. The generated API classes are not loaded: they cost ~25 MB of memory here.

Each resource gets one daemon thread: LIST (its items replace what the cache held), then WATCH
from the list's resourceVersion; a 410 Gone lists again at once, any other error after a backoff.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .facts_cache import WatchedFacts
from .policy_store import ClusterPolicySource

log = logging.getLogger("mlgate.webhook.kube")
WATCH_SECONDS = 300
LIST_TIMEOUT = 30
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
FACTS = {
    "Namespace": "/api/v1/namespaces",
    "PersistentVolumeClaim": "/api/v1/persistentvolumeclaims",
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
    "Node": "/api/v1/nodes",
}
POLICIES = {
    "MLPolicy": "/apis/mlgate.dev/v1alpha1/mlpolicies",
    "ClusterMLPolicy": "/apis/mlgate.dev/v1alpha1/clustermlpolicies",
}

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
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Reflector:
    kind: str
    path: str
    get: Get
    on_replace: OnReplace
    on_event: OnEvent
    stop: threading.Event

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"watch-{self.kind}", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                version = self._list()
                failures = 0
                while not self.stop.is_set():
                    version = self._watch(version)
            except ApiError as exc:
                if exc.status == 410:  # the watch fell too far behind: list again now
                    continue
                failures = self._back_off(exc, failures)
            except Exception as exc:
                failures = self._back_off(exc, failures)

    def _back_off(self, exc: Exception, failures: int) -> int:
        delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
        log.warning("%s: %s; listing again in %.0fs", self.kind, _why(exc), delay)
        self.stop.wait(delay)
        return failures + 1

    def _list(self) -> str:
        response = self.get(self.path, {}, LIST_TIMEOUT)
        body = json.loads(response.data)
        self.on_replace(self.kind, body.get("items") or [])
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_SECONDS)}
        response = self.get(self.path, query, WATCH_SECONDS + 30)
        try:
            for line in _lines(response):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or "watch error"))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                self.on_event(self.kind, str(event.get("type")), obj)
                if self.stop.is_set():
                    break
        finally:
            response.release_conn()
        return version


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
    return f"{type(exc).__name__}: {exc}"


def api_get(kubeconfig: str | None, in_cluster: bool) -> Get:
    """GET through the Kubernetes client's credentials; the response body is left unread."""
    from kubernetes import client, config

    if in_cluster:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    api = client.ApiClient()

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

    return get


def start_watches(
    facts: WatchedFacts, policies: ClusterPolicySource | None, *, kubeconfig: str | None, in_cluster: bool,
) -> threading.Event:
    """Start every reflector; set the returned event to stop them."""
    get = api_get(kubeconfig, in_cluster)
    stop = threading.Event()
    for kind, path in FACTS.items():
        Reflector(kind, path, get, facts.replace, facts.apply, stop).start()
    if policies is not None:
        for kind, path in POLICIES.items():
            Reflector(kind, path, get, policies.replace, policies.apply, stop).start()
    return stop
