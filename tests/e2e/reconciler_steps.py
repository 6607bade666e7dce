"""Steps the reconciler's e2e tests share: one pass with a fresh client, and the names of a kind."""

from __future__ import annotations

from control_plane import ControlPlane

from mlgate.engine import PolicySet
from mlgate_reconciler.client import KubeClient, Transport
from mlgate_reconciler.reconcile import reconcile_training_job
from mlgate_reconciler.results import PassResult


def reconcile(transport: Transport, policies: PolicySet, namespace: str, name: str = "llm") -> tuple[PassResult,
                                                                                                      KubeClient]:
    """One pass with a fresh client, so `client.writes` counts this pass's writes only."""
    client = KubeClient(transport)
    return reconcile_training_job(client, namespace, name, policies), client


def names(cluster: ControlPlane, kind: str, namespace: str) -> list[str]:
    out = cluster.kubectl("get", kind, "-n", namespace, "-o", "jsonpath={.items[*].metadata.name}").check()
    return sorted(out.stdout.split())
