"""A small typed wrapper over the Kubernetes API calls the reconciler makes.

Requests go to plain resource paths through one `kubernetes.client.ApiClient` (credentials, TLS, token
refresh); bodies are plain JSON dicts. The generated API classes are not loaded (they cost ~25 MB).
Every write (create, patch, replace status, delete) is counted in `writes` by verb and kind, so tests and
benchmarks can check that a second reconcile pass makes zero writes; its result goes to `observer` (the
informers' cache, cache.py), so a pass reading from the cache sees its own writes at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlgate.kube.reach import Reachability
from mlgate.kube.watch import ApiError  # one error type for the watch and the requests

__all__ = ["PATHS", "ApiError", "KubeClient", "Transport", "WriteObserver", "collection_path", "kube_transport",
           "object_path", "rate_limited"]

REQUEST_TIMEOUT = 30.0
# a batch Job deleted without a propagation policy orphans its pods (the API's default for batch/v1 Jobs)
BACKGROUND = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}

# kind -> (API prefix, plural) for namespaced kinds the reconciler reads or writes
PATHS: dict[tuple[str, str], tuple[str, str]] = {
    ("v1", "Pod"): ("/api/v1", "pods"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Secret"): ("/api/v1", "secrets"),  # an MPI job's SSH Secret, by name only
    ("v1", "Event"): ("/api/v1", "events"),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims"),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs"),  # an MPI job's launcher
    ("autoscaling/v2", "HorizontalPodAutoscaler"): ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): ("/apis/gateway.networking.k8s.io/v1", "httproutes"),
    ("coordination.k8s.io/v1", "Lease"): ("/apis/coordination.k8s.io/v1", "leases"),
    ("mlgate.dev/v1alpha1", "TrainingJob"): ("/apis/mlgate.dev/v1alpha1", "trainingjobs"),
    ("mlgate.dev/v1alpha1", "InferenceService"): ("/apis/mlgate.dev/v1alpha1", "inferenceservices"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): ("/apis/scheduling.volcano.sh/v1beta1", "podgroups"),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): ("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups"),
}


class Transport(Protocol):
    """One HTTP request to the API server: (status, body bytes)."""

    def __call__(self, method: str, path: str, query: dict[str, str], body: Any,
                 content_type: str) -> tuple[int, bytes]: ...


class WriteObserver(Protocol):
    """Told what each write did: the object the API answered with, or the name a DELETE removed."""

    def written(self, obj: dict[str, Any]) -> None: ...

    def deleted(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    """Namespace "" means every namespace."""
    prefix, plural = PATHS[(api_version, kind)]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{name}"


@dataclass
class KubeClient:
    transport: Transport
    writes: Counter[str] = field(default_factory=Counter)  # "create Pod", "patch TrainingJob", ...
    on_write: Callable[[str, str], None] | None = None  # (verb, kind), e.g. for a metric
    observer: WriteObserver | None = None

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self._call("GET", object_path(api_version, kind, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", f"/api/v1/namespaces/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        """Namespace "" lists every namespace."""
        query = {"labelSelector": selector} if selector else {}
        try:
            body = self._call("GET", collection_path(api_version, kind, namespace), query)
        except ApiError as exc:
            if exc.status == 404:  # the kind is not served (e.g. no Volcano CRDs): nothing of it exists
                return []
            raise
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves this kind (discovery, a read: a 404 means its CRDs are not installed)."""
        prefix, plural = PATHS[(api_version, kind)]
        try:
            body = self._call("GET", prefix)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return any(isinstance(r, dict) and r.get("name") == plural for r in body.get("resources") or [])

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], obj["kind"], meta["namespace"])
        return self._written(self._write("create", obj["kind"], "POST", path, obj))

    def patch(self, api_version: str, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; put metadata.resourceVersion in it for an optimistic-concurrency check."""
        path = object_path(api_version, kind, namespace, name)
        return self._written(self._write("patch", kind, "PATCH", path, patch,
                                         content_type="application/merge-patch+json"))

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource; the body's resourceVersion makes a stale write fail with 409."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) + "/status"
        return self._written(self._write("status", obj["kind"], "PUT", path, obj))

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """False when it was already gone."""
        try:
            self._write("delete", kind, "DELETE", object_path(api_version, kind, namespace, name),
                        BACKGROUND if kind == "Job" else None)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        if self.observer is not None:
            self.observer.deleted(api_version, kind, namespace, name)
        return True

    def _written(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.observer is not None:
            self.observer.written(obj)
        return obj

    def _write(self, verb: str, kind: str, method: str, path: str, body: Any, *,
               content_type: str = "application/json") -> dict[str, Any]:
        self.writes[f"{verb} {kind}"] += 1
        if self.on_write is not None:
            self.on_write(verb, kind)
        return self._call(method, path, {}, body, content_type=content_type)

    def _call(self, method: str, path: str, query: dict[str, str] | None = None, body: Any = None, *,
              content_type: str = "application/json") -> dict[str, Any]:
        status, data = self.transport(method, path, query or {}, body, content_type)
        if not 200 <= status < 300:
            raise ApiError(status, _message(data))
        parsed = json.loads(data) if data else {}
        return parsed if isinstance(parsed, dict) else {}


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or data[:300].decode(errors="replace"))
    except (ValueError, AttributeError):
        return data[:300].decode(errors="replace")


def kube_transport(kubeconfig: str | None = None, in_cluster: bool = False, *, api: Any = None,
                   reach: Reachability | None = None) -> Transport:
    """A Transport with the Kubernetes client's credentials (of `api`, else of the kubeconfig file or in-cluster);
    with `reach`, every request's outcome (an answer, or none) is recorded there."""
    from kubernetes.client.exceptions import ApiException

    from mlgate.kube.watch import api_client

    api = api if api is not None else api_client(kubeconfig, in_cluster)

    def send(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, serialized, post = api.param_serialize(
            method, path, query_params=list(query.items()), header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(method, url, headers, serialized, post, _request_timeout=REQUEST_TIMEOUT)
            raw = response.response
            try:
                return int(raw.status), bytes(raw.data)
            finally:
                raw.release_conn()
        except ApiException as exc:
            return int(exc.status or 0), (exc.body or b"") if isinstance(exc.body, bytes) else str(exc.body).encode()

    if reach is None:
        return send
    observed = reach

    def send_observed(method: str, path: str, query: dict[str, str], body: Any,
                      content_type: str) -> tuple[int, bytes]:
        return observed.observe(lambda: send(method, path, query, body, content_type))

    return send_observed


def rate_limited(transport: Transport, qps: float, burst: int) -> Transport:
    """The transport behind a token bucket shared by every caller: at most `burst` requests at once, refilled at
    `qps` per second (client-go's defaults for a controller are 20 and 30)."""
    lock = threading.Lock()
    tokens, last = float(burst), time.monotonic()

    def send(method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, bytes]:
        nonlocal tokens, last
        with lock:  # callers queue here in turn; the sleep keeps the order fair
            now = time.monotonic()
            tokens = min(float(burst), tokens + (now - last) * qps)
            last = now
            if tokens < 1:
                time.sleep((1 - tokens) / qps)
                tokens, last = 1.0, time.monotonic()
            tokens -= 1
        return transport(method, path, query, body, content_type)

    return send
