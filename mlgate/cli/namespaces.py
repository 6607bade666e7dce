"""Objects in the namespace admission would see them in.

kubectl creates an object that names no namespace in its context's namespace (normally
`default`), and the API server sends that namespace with the admission request. Offline, the
CLI fills it in the same way, or an MLPolicy in `default` and `match.namespaces: [default]`
would miss a manifest that leaves metadata.namespace out. The user's file is not rewritten:
the namespace filled in here is taken out of the mutated object again, and the patch is
computed against the filled-in object, so neither gains a field the user did not write.
"""

from __future__ import annotations

from typing import Any, Literal

from mlgate.engine import PolicySet, evaluate
from mlgate.model.exceptions import NO_EXCEPTIONS, Exceptions
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.namespaces import in_namespace
from mlgate.model.results import Decision

DEFAULT_NAMESPACE = "default"


def evaluate_in_namespace(
    obj: dict[str, Any], policies: PolicySet, namespace: str, *, facts: ClusterFacts = NO_FACTS,
    operation: Literal["CREATE", "UPDATE"] = "CREATE", old_obj: dict[str, Any] | None = None,
    exceptions: Exceptions = NO_EXCEPTIONS,
) -> Decision:
    """`evaluate` on the object as admission would see it; the mutated object keeps the user's metadata."""
    scoped = policies.kinds.cluster_scoped
    placed = in_namespace(obj, namespace, scoped)
    old = in_namespace(old_obj, namespace, scoped) if old_obj is not None else None
    decision = evaluate(placed, policies, facts=facts, operation=operation, old_obj=old, exceptions=exceptions)
    if placed is not obj and decision.mutated is not None:
        decision.mutated = _without_namespace(decision.mutated)
    return decision


def _without_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "namespace"}}
