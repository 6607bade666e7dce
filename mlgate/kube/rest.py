"""JSON requests to plain resource paths, through the Kubernetes client's credentials (kubeconfig or in-cluster).

For transports that write a few objects of their own (the webhook's Secret, Lease and webhook configurations);
the generated API classes are not loaded, as in `watch.py`.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .reach import Reachability
from .watch import ApiError, api_client

__all__ = ["ApiError", "Rest", "kube_rest"]

REQUEST_TIMEOUT = 30.0


class Rest(Protocol):
    def __call__(self, method: str, path: str, body: Any = None, *,
                 content_type: str = "application/json") -> dict[str, Any] | None:
        """The answer's JSON; None for a 404; ApiError for any other non-2xx answer."""


def kube_rest(kubeconfig: str | None, in_cluster: bool, *, api: Any = None, reach: Reachability | None = None) -> Rest:
    """Requests through the credentials of `api` (default: a client for kubeconfig or in-cluster); with `reach`,
    every request's outcome (an answer, or none) is recorded there."""
    from kubernetes.client.exceptions import ApiException

    api = api if api is not None else api_client(kubeconfig, in_cluster)

    def call(method: str, path: str, body: Any = None, *,
             content_type: str = "application/json") -> dict[str, Any] | None:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, serialized, post = api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            raw = api.call_api(method, url, headers, serialized, post, _request_timeout=REQUEST_TIMEOUT).response
            try:
                status, data = int(raw.status), bytes(raw.data)
            finally:
                raw.release_conn()
        except ApiException as exc:
            status, data = int(exc.status or 0), exc.body if isinstance(exc.body, bytes) else str(exc.body).encode()
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise ApiError(status, _message(data))
        parsed = json.loads(data) if data else {}
        return parsed if isinstance(parsed, dict) else {}

    if reach is None:
        return call
    observed = reach

    def call_observed(method: str, path: str, body: Any = None, *,
                      content_type: str = "application/json") -> dict[str, Any] | None:
        return observed.observe(lambda: call(method, path, body, content_type=content_type))

    return call_observed


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or data[:300].decode(errors="replace"))
    except (ValueError, AttributeError):
        return data[:300].decode(errors="replace")
