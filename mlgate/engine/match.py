"""Which policies apply to an object: kinds, namespaces, selectors, exclusions."""

from __future__ import annotations

from mlgate.engine.policyset import Policy
from mlgate.model.facts import ClusterFacts
from mlgate.model.policy import MatchBlock
from mlgate.model.workload import Workload

NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it on every namespace


def namespace_labels(namespace: str, facts: ClusterFacts) -> dict[str, str]:
    labels = dict(facts.namespace_labels(namespace) or {})
    labels.setdefault(NAME_LABEL, namespace)
    return labels


def _hits(block: MatchBlock, workload: Workload, ns_labels: dict[str, str]) -> bool:
    if block.kinds and workload.kind not in block.kinds and "*" not in block.kinds:
        return False
    if block.namespaces and workload.namespace not in block.namespaces:
        return False
    if block.namespaceSelector and not block.namespaceSelector.matches(ns_labels):
        return False
    return not (block.objectSelector and not block.objectSelector.matches(workload.labels))


def _any_field(block: MatchBlock) -> bool:
    return bool(block.kinds or block.namespaces or block.namespaceSelector or block.objectSelector)


def applies(policy: Policy, workload: Workload, facts: ClusterFacts) -> bool:
    if policy.namespace is not None and policy.namespace != workload.namespace:
        return False
    ns_labels = namespace_labels(workload.namespace, facts)
    if not _hits(policy.match, workload, ns_labels):
        return False
    exclude = policy.exclude
    return not (exclude is not None and _any_field(exclude) and _hits(exclude, workload, ns_labels))
