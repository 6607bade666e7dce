"""The rule catalog: every rule registers here once, with its parameter schema.

A rule is either a check (returns findings) or a mutation (edits the object in place).
The registry refuses duplicate or badly named IDs at import time, so a broken catalog
never reaches a policy.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate.model.results import Finding, Skipped, Unchecked, Unevaluable
from mlgate.model.workload import Workload
from mlgate.rules.devices import BUILT_IN, GpuResources

FAMILIES = ("gpu", "gpu_sharing", "mig", "storage", "pod_security", "defaults", "gang", "gang_size", "launch",
            "capacity", "queues")
RULE_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class Params(BaseModel):
    """Base of every rule's parameters: camelCase in YAML, unknown fields refused, and no type coercion, so a
    wrong-typed parameter (`perPod: "2"`, `perContainer: true`, `perJob: 4.0`) is a load error rather than a
    quietly different number. A tuple field takes a YAML list only when it says `Field(strict=False)`."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, strict=True
    )


class NoParams(Params):
    pass


@dataclass(frozen=True)
class Context:
    facts: ClusterFacts = field(default_factory=lambda: NO_FACTS)
    operation: Literal["CREATE", "UPDATE"] = "CREATE"
    deadline: float | None = None  # time.monotonic() past which the evaluation is abandoned
    gpus: GpuResources = BUILT_IN  # the resource names the running policy counts as GPUs

    def check_deadline(self) -> None:
        """Raise DeadlineExceeded once the deadline has passed: called between rules, so the work stops there
        rather than finishing in the background after the caller gave up."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded("the evaluation passed its deadline and was abandoned")


class DeadlineExceeded(Exception):
    """The evaluation ran past its deadline; nothing of it is kept."""


class MutationFailed(Exception):
    """A mutation that could not be applied to this object (a CEL mutation that erred, a patch whose path is
    not there): an `error` outcome that failurePolicy decides, not a bug, so it is logged without a traceback."""


CheckResult = Iterable[Finding | Unchecked] | Skipped | Unevaluable
CheckFn = Callable[[Workload, Any, Context], CheckResult]
# A mutation edits the workload in place. One registered with reports_changes=True returns
# whether it changed anything, which spares the engine a copy of the object around it.
# A mutation that cannot apply to this workload returns a `Skipped` saying why.
MutateFn = Callable[[Workload, Any, Context], bool | Skipped | None]


@dataclass(frozen=True)
class RuleSpec:
    id: str
    summary: str
    params: type[Params]
    check: CheckFn | None = None
    mutate: MutateFn | None = None
    order: int = 100  # mutations run in ascending order
    reports_changes: bool = False

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def is_mutation(self) -> bool:
        return self.mutate is not None


REGISTRY: dict[str, RuleSpec] = {}
P = TypeVar("P", bound=Params)


def _register(spec: RuleSpec) -> None:
    if not RULE_ID.match(spec.id):
        raise ValueError(f"rule id {spec.id!r} must look like 'family.rule-name'")
    if spec.id in REGISTRY:
        raise ValueError(f"rule id {spec.id!r} is registered twice")
    if not issubclass(spec.params, Params):
        raise TypeError(f"rule {spec.id!r}: params must subclass rules.registry.Params")
    REGISTRY[spec.id] = spec


def check(
    rule_id: str, summary: str, params: type[P] = NoParams  # type: ignore[assignment]
) -> Callable[[Callable[[Workload, P, Context], CheckResult]], Callable[..., CheckResult]]:
    def wrap(fn: Callable[[Workload, P, Context], CheckResult]) -> Callable[..., CheckResult]:
        _register(RuleSpec(rule_id, summary, params, check=fn))
        return fn

    return wrap


def mutation(
    rule_id: str, summary: str, params: type[P] = NoParams, order: int = 100,  # type: ignore[assignment]
    reports_changes: bool = False,
) -> Callable[[Callable[[Workload, P, Context], bool | Skipped | None]], Callable[..., bool | Skipped | None]]:
    def wrap(fn: Callable[[Workload, P, Context], bool | Skipped | None]) -> Callable[..., bool | Skipped | None]:
        _register(RuleSpec(rule_id, summary, params, mutate=fn, order=order, reports_changes=reports_changes))
        return fn

    return wrap


def catalog() -> dict[str, RuleSpec]:
    """All rules, with every family module imported."""
    for family in FAMILIES:
        importlib.import_module(f"mlgate.rules.{family}")
    return REGISTRY
