"""The pre-flight check: the same policy engine as admission, run on an owner before anything is created.

An object that slipped past admission (webhook down with failurePolicy Ignore, or created before the policy
existed) is not materialized. Unless the caller passes facts, the engine gets the owner's namespace labels (read
from the API, so namespaceSelector policies match as in the webhook) and `known=False` for everything else:
rules that need PVCs, storage classes or nodes skip, never guess.
"""

from __future__ import annotations

from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.model.facts import ClusterFacts, StaticFacts

from .client import KubeClient

__all__ = ["MAX_MESSAGE", "namespace_facts", "violation"]

MAX_MESSAGE = 4096  # the CRDs allow 32768 per condition message; this keeps `kubectl describe` readable


def namespace_facts(client: KubeClient, namespace: str) -> ClusterFacts:
    """Facts that know the namespace's labels only (known=False: fact-based rules skip)."""
    ns = client.get_namespace(namespace)
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    return StaticFacts(namespaces={namespace: dict(labels)}, known=False)


def violation(obj: dict[str, Any], policies: PolicySet, facts: ClusterFacts) -> str | None:
    """None when the engine admits the object, else its violation messages in the engine's one format."""
    decision = evaluate(obj, policies, facts=facts)
    if decision.allowed:
        return None
    lines = [line for result in decision.violations for line in result.messages()]
    message = "denied by policy: " + "; ".join(lines or ["a policy denied the object"])
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
