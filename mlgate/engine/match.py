"""Which policies apply to an object: kinds, namespaces, selectors, exclusions."""

from __future__ import annotations

from typing import Any

from mlgate.engine.policyset import Policy
from mlgate.model.facts import ClusterFacts
from mlgate.model.policy import MatchBlock
from mlgate.model.results import FailurePolicy
from mlgate.model.workload import Workload, as_dict

NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it on every namespace


def namespace_labels(namespace: str, facts: ClusterFacts) -> dict[str, str]:
    labels = dict(facts.namespace_labels(namespace) or {})
    labels.setdefault(NAME_LABEL, namespace)
    return labels


class Scope:
    """The workload as match blocks see it; namespace and object labels are looked up once, when first needed."""

    def __init__(self, workload: Workload, facts: ClusterFacts, operation: str = "CREATE"):
        self.workload = workload
        self.facts = facts
        self.operation = operation
        self._ns_labels: dict[str, str] | None = None
        self._labels: dict[str, str] | None = None

    @property
    def ns_labels(self) -> dict[str, str]:
        if self._ns_labels is None:
            self._ns_labels = namespace_labels(self.workload.namespace, self.facts)
        return self._ns_labels

    @property
    def labels(self) -> dict[str, str]:
        if self._labels is None:
            self._labels = self.workload.labels
        return self._labels


def _hits(block: MatchBlock, scope: Scope) -> bool:
    workload = scope.workload
    if block.kinds and workload.kind not in block.kinds and "*" not in block.kinds:
        return False
    if block.namespaces and workload.namespace not in block.namespaces:
        return False
    if block.namespaceSelector and not block.namespaceSelector.matches(scope.ns_labels):
        return False
    return not (block.objectSelector and not block.objectSelector.matches(scope.labels))


def _any_field(block: MatchBlock) -> bool:
    return bool(block.kinds or block.namespaces or block.namespaceSelector or block.objectSelector)


def applies(policy: Policy, scope: Scope) -> bool:
    if policy.namespace is not None and policy.namespace != scope.workload.namespace:
        return False
    if not _hits(policy.match, scope):
        return False
    if policy.admits is not None and not policy.admits(scope.workload, scope.facts, scope.operation):
        return False
    exclude = policy.exclude
    return not (exclude is not None and _any_field(exclude) and _hits(exclude, scope))


def unseen_namespace(policy: Policy, scope: Scope) -> str | None:
    """Why a policy that did not apply might have: its namespaceSelector was judged without cluster facts (the
    namespace's labels unknown, only its name label assumed), and it matches the object otherwise. None when
    the policy was judged on what is known."""
    selector = policy.match.namespaceSelector
    if scope.facts.known or (policy.namespace is not None and policy.namespace != scope.workload.namespace):
        return None
    if policy.admits is not None:  # a ValidatingAdmissionPolicy's selectors
        if policy.admits(scope.workload, scope.facts, scope.operation) or not policy.admits(
                scope.workload, scope.facts, scope.operation, namespaces=False):
            return None
    elif selector is None or selector.matches(scope.ns_labels) or not _hits(
            policy.match.model_copy(update={"namespaceSelector": None}), scope):
        return None
    field = "spec.match.namespaceSelector" if policy.admits is None else "its namespaceSelector"
    return (f"the labels of namespace {scope.workload.namespace!r} are not known (no cluster facts; --facts gives "
            f"them), so {field} was not judged")


def failure_policy_for(obj: dict[str, Any], policies: tuple[Policy, ...], facts: ClusterFacts) -> FailurePolicy | None:
    """What an engine failure on `obj` should do: Fail if any policy that matches its kind, namespace
    and labels says Fail, Ignore if only Ignore ones match, None if none does.

    Read from the raw object, since the failure may have been in working out the workload itself.
    """
    meta = as_dict(obj.get("metadata"))
    name, namespace = meta.get("name"), meta.get("namespace")
    bare = Workload(obj, str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""),
                    name if isinstance(name, str) else "", namespace if isinstance(namespace, str) else "")
    scope = Scope(bare, facts)
    modes = {p.failure_policy for p in policies if applies(p, scope)}
    return FailurePolicy.FAIL if FailurePolicy.FAIL in modes else (FailurePolicy.IGNORE if modes else None)
