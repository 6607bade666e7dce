"""The webhook's LIST+WATCH loops: they feed the facts cache and the cluster policy source.

Imported only when `mlgate serve` runs with `--in-cluster` or `--kubeconfig`. The loop itself (`Reflector`) is
shared with the reconciler: mlgate/kube/watch.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mlgate.kube.facts import FACT_PATHS
from mlgate.kube.reach import Reachability
from mlgate.kube.watch import Reflector, api_client, api_get, server_of

from .exception_store import ClusterExceptionSource
from .facts_cache import WatchedFacts
from .policy_store import ClusterPolicySource

__all__ = ["FACTS", "POLICIES", "start_watches", "status_patcher"]

FACTS = FACT_PATHS  # the fact kinds and where each is listed
POLICIES = {
    "MLPolicy": "/apis/mlgate.dev/v1alpha1/mlpolicies",
    "ClusterMLPolicy": "/apis/mlgate.dev/v1alpha1/clustermlpolicies",
    "ClusterWorkloadKind": "/apis/mlgate.dev/v1alpha1/clusterworkloadkinds",
}
EXCEPTIONS = {"MLPolicyException": "/apis/mlgate.dev/v1alpha1/mlpolicyexceptions"}


def start_watches(
    facts: WatchedFacts, policies: ClusterPolicySource | None, *, kubeconfig: str | None, in_cluster: bool,
    exceptions: ClusterExceptionSource | None = None, reach: Reachability | None = None,
) -> threading.Event:
    """Start every reflector; set the returned event to stop them. With `reach`, whether the API server answers
    their requests is recorded there (and its `server` set)."""
    api = api_client(kubeconfig, in_cluster)
    if reach is not None:
        reach.server = server_of(api)
    get = api_get(kubeconfig, in_cluster, api=api, reach=reach)
    stop = threading.Event()
    for kind, path in FACTS.items():
        Reflector(kind, path, get, facts.replace, facts.apply, stop, on_unserved=facts.unserved).start()
    if policies is not None:
        for kind, path in POLICIES.items():
            Reflector(kind, path, get, policies.replace, policies.apply, stop).start()
    if exceptions is not None:
        for kind, path in EXCEPTIONS.items():
            Reflector(kind, path, get, exceptions.replace, exceptions.apply, stop).start()
    return stop


def status_patcher(*, kubeconfig: str | None, in_cluster: bool) -> Callable[[str, str, str, dict[str, Any]], None]:
    """A merge patch of an MLPolicy's or ClusterMLPolicy's status subresource."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client(kubeconfig, in_cluster))
    group, _, version = "mlgate.dev/v1alpha1".partition("/")

    def patch(kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        plural = {**POLICIES, **EXCEPTIONS}[kind].rsplit("/", 1)[1]
        body = {"status": status}
        if namespace:
            api.patch_namespaced_custom_object_status(group, version, namespace, plural, name, body,
                                                      _content_type="application/merge-patch+json")
        else:
            api.patch_cluster_custom_object_status(group, version, plural, name, body,
                                                   _content_type="application/merge-patch+json")

    return patch
