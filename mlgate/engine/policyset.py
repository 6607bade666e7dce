"""Compiled policies: documents whose rule IDs and parameters have been checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from mlgate.model.facts import ClusterFacts
from mlgate.model.policy import MatchBlock, UnknownKinds
from mlgate.model.results import Action, FailurePolicy
from mlgate.model.workload import Workload
from mlgate.rules.devices import BUILT_IN, GpuResources
from mlgate.rules.registry import Params, RuleSpec
from mlgate.workloads.catalog import SHIPPED, KindCatalog

__all__ = ["Admits", "Binding", "KindRef", "Policy", "PolicySet", "UnknownKinds"]


@dataclass(frozen=True)
class Binding:
    rule: RuleSpec
    params: Params
    action: Action


class Admits(Protocol):
    """Whether a policy judges the object; `namespaces=False` leaves namespace selectors out (to tell a policy
    judged without the namespace's labels from one that does not apply)."""

    @property
    def selects_namespaces(self) -> bool: ...

    def __call__(self, workload: Workload, facts: ClusterFacts, operation: str, *, namespaces: bool = True) -> bool:
        ...


@dataclass(frozen=True)
class KindRef:
    """A kind a policy names in match or exclude, and where: a kind no description knows matches nothing."""

    kind: str
    field: str  # e.g. spec.match.kinds[0]
    line: int | None


@dataclass(frozen=True)
class Policy:
    name: str
    bindings: tuple[Binding, ...]
    match: MatchBlock = field(default_factory=MatchBlock)
    exclude: MatchBlock | None = None
    failure_policy: FailurePolicy = FailurePolicy.FAIL
    namespace: str | None = None  # set for a namespaced MLPolicy
    source: str = ""
    unknown_kinds: UnknownKinds = UnknownKinds.JUDGE
    gpus: GpuResources = BUILT_IN  # what the policy's rules count as GPUs (spec.gpuResources)
    kind_refs: tuple[KindRef, ...] = ()
    allowed_exceptions: frozenset[str] | None = None  # rules an MLPolicyException may name; None: every rule
    # a ValidatingAdmissionPolicy's match (resource rules, selectors, operations), judged beside `match`; such a
    # policy judges objects of any kind, pod templates or not
    admits: Admits | None = None

    def allows_exception(self, rule: str) -> bool:
        return self.allowed_exceptions is None or rule in self.allowed_exceptions

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @cached_property
    def checks(self) -> tuple[Binding, ...]:
        """The bindings of rules that check, in the policy's order: worked out once per compiled policy."""
        return tuple(b for b in self.bindings if b.rule.check is not None)


@dataclass(frozen=True)
class PolicySet:
    policies: tuple[Policy, ...] = ()
    generation: int = 0
    kinds: KindCatalog = SHIPPED  # the shipped kinds plus the set's own WorkloadKinds

    @cached_property
    def selecting_namespaces(self) -> tuple[Policy, ...]:
        """The policies with a namespaceSelector: the only ones that cannot be judged without cluster facts."""
        return tuple(p for p in self.policies if p.match.namespaceSelector is not None
                     or (p.admits is not None and p.admits.selects_namespaces))

    @cached_property
    def any_kind(self) -> tuple[Policy, ...]:
        """The policies that judge objects without pod templates too (ValidatingAdmissionPolicies)."""
        return tuple(p for p in self.policies if p.admits is not None)

    @cached_property
    def mutation_steps(self) -> tuple[tuple[Policy, Binding], ...]:
        """Every mutation binding in the order they run: rule order, then policy key, then position."""
        steps = sorted(
            ((b.rule.order, p.key, i, p, b) for p in self.policies for i, b in enumerate(p.bindings) if b.rule.mutate),
            key=lambda s: s[:3],
        )
        return tuple((policy, binding) for *_, policy, binding in steps)
