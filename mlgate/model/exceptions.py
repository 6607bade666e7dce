"""MLPolicyException: one policy's named rules let off for named objects, narrowly, until a date.

    apiVersion: mlgate.dev/v1alpha1
    kind: MLPolicyException
    metadata: {name: nccl-net-admin, namespace: team-a}   # covers objects in its own namespace only
    spec:
      policy: pod-security          # a ClusterMLPolicy's name, or an MLPolicy's in this namespace
      rules: [pod-security.baseline]                     # rule IDs of that policy; at least one
      match:                        # exactly one of:
        names: [llama-pretrain]     #   objects of these names
        # selector: {matchLabels: {...}, matchExpressions: [...]}   #   objects whose labels match
      containers: [nccl]            # optional: only findings about these containers
      capabilities: [NET_ADMIN]     # optional: only findings about these capabilities (capabilities.add)
      expiresAt: "2030-01-31T00:00:00Z"   # RFC 3339; from then on the exception does nothing
      reason: "NCCL over RoCE needs NET_ADMIN until the CNI plugin ships (NET-1234)"

An object's namespace is never named: the exception's own namespace is the only one it covers, so
the right to create exceptions in a namespace (RBAC) is exactly the right to let that namespace off.
A finding is excepted when every narrowing given holds for it; a finding a narrowing cannot place
(a pod-level field, for a `containers` narrowing) is not excepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from mlgate.model.policy import LabelSelector, Metadata, Strict
from mlgate.model.results import ExceptionRef

EXCEPTION_KIND = "MLPolicyException"
DEFAULT_NAMESPACE = "default"  # of a file's exception that names none, as kubectl's context would give
# RFC 3339 date-time, as the API server's `format: date-time` reads it (a `T` or space, seconds required)
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class ExceptionMatch(Strict):
    """Which objects of the exception's namespace it covers: by name, or by label selector."""

    names: list[str] = Field(default_factory=list, max_length=64)
    selector: LabelSelector | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ExceptionMatch:
        if bool(self.names) == (self.selector is not None):
            raise ValueError("give exactly one of names or selector")
        if self.selector is not None and not (self.selector.matchLabels or self.selector.matchExpressions):
            raise ValueError("an empty selector would match every object of the namespace; name the labels")
        return self


class ExceptionSpec(Strict):
    policy: str = Field(min_length=1, max_length=253)
    rules: list[str] = Field(min_length=1, max_length=64)
    match: ExceptionMatch
    containers: list[str] = Field(default_factory=list, max_length=64)
    capabilities: list[str] = Field(default_factory=list, max_length=64)
    expiresAt: datetime
    reason: str = Field(min_length=1, max_length=1024)

    @field_validator("expiresAt", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        # YAML reads an unquoted timestamp as a datetime already; one without a zone is ambiguous
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError("must name its time zone, e.g. 2030-01-31T00:00:00Z")
            return value
        if not isinstance(value, str) or not _RFC3339.match(value):
            raise ValueError(f"must be an RFC 3339 date-time such as 2030-01-31T00:00:00Z, not {value!r}")
        return value

    @field_validator("capabilities")
    @classmethod
    def _no_all(cls, value: list[str]) -> list[str]:
        if "ALL" in value:
            raise ValueError('"ALL" cannot be excepted; name each capability')
        return value


class ExceptionDocument(Strict):
    apiVersion: Literal["mlgate.dev/v1alpha1"]
    kind: Literal["MLPolicyException"]
    metadata: Metadata
    spec: ExceptionSpec
    status: dict[str, Any] | None = None  # present on objects read back from a cluster


@dataclass(frozen=True)
class PolicyException:
    """A checked MLPolicyException, as the engine applies it."""

    namespace: str
    name: str
    policy: str
    rules: tuple[str, ...]  # in the order written, for errors that point at one
    expires_at: datetime
    reason: str
    names: frozenset[str] = frozenset()
    selector: LabelSelector | None = None
    containers: frozenset[str] = frozenset()
    capabilities: frozenset[str] = frozenset()
    source: str = ""

    @property
    def ref(self) -> ExceptionRef:
        return ExceptionRef(self.namespace, self.name, self.expires_at)

    def live(self, now: datetime) -> bool:
        """In force until the instant `expiresAt` names, and not from then on."""
        return now < self.expires_at

    def names_policy(self, policy_key: str) -> bool:
        """A ClusterMLPolicy goes by its name; an MLPolicy of this namespace by `namespace/name`."""
        return policy_key in (self.policy, f"{self.namespace}/{self.policy}")

    def covers_object(self, namespace: str, name: str, labels: dict[str, str]) -> bool:
        if namespace != self.namespace:
            return False
        return name in self.names if self.names else self.selector is not None and self.selector.matches(labels)


@dataclass(frozen=True)
class Exceptions:
    """The exceptions in force and the instant they are judged at: the engine reads no clock."""

    items: tuple[PolicyException, ...] = ()
    now: datetime | None = None

    def __post_init__(self) -> None:
        if self.items and (self.now is None or self.now.tzinfo is None):
            raise ValueError("exceptions are judged at a time with a zone (datetime.now(UTC))")

    def for_rule(self, policy_key: str, rule: str) -> list[PolicyException]:
        return [e for e in self.items if rule in e.rules and e.names_policy(policy_key)]


NO_EXCEPTIONS = Exceptions()
