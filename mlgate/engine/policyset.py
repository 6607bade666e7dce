"""Compiled policies: documents whose rule IDs and parameters have been checked."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlgate.model.policy import MatchBlock
from mlgate.model.results import Action, FailurePolicy
from mlgate.rules.registry import Params, RuleSpec


@dataclass(frozen=True)
class Binding:
    rule: RuleSpec
    params: Params
    action: Action


@dataclass(frozen=True)
class Policy:
    name: str
    bindings: tuple[Binding, ...]
    match: MatchBlock = field(default_factory=MatchBlock)
    exclude: MatchBlock | None = None
    failure_policy: FailurePolicy = FailurePolicy.FAIL
    namespace: str | None = None  # set for a namespaced MLPolicy
    source: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class PolicySet:
    policies: tuple[Policy, ...] = ()
    generation: int = 0

    def __len__(self) -> int:
        return len(self.policies)
