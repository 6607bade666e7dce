"""A ValidatingAdmissionPolicy's `params`: the objects its binding's paramRef names, found in the cluster facts.

As k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_dispatcher.go collects them: `paramRef.name` names
one object, `paramRef.selector` every object it selects (the validations run once per object); the namespace is
`paramRef.namespace`, else the object's own for a namespaced param kind. When none is found,
`parameterNotFoundAction: Allow` admits (the policy does not apply), and `Deny` is an error that the policy's
failurePolicy decides. Without cluster facts nothing can be found, and the validations say they could not check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mlgate.model.facts import ClusterFacts
from mlgate.model.policy import LabelSelector
from mlgate.model.results import Skipped, Unevaluable

__all__ = ["ParamObjects", "ParamSource"]


@runtime_checkable
class ParamObjects(Protocol):
    """Facts that hold objects of any kind (the CLI's facts file); the webhook's do not, and need not: the API
    server judges the cluster's own policies."""

    def param_objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]: ...


@dataclass(frozen=True)
class ParamSource:
    api_version: str
    kind: str
    name: str | None = None
    namespace: str | None = None
    selector: LabelSelector | None = None
    not_found: str = "Deny"  # parameterNotFoundAction

    def resolve(self, namespace: str, facts: ClusterFacts) -> list[Mapping[str, Any]] | Skipped | Unevaluable:
        """The params objects, the same ones on every call (validations of one policy share their evaluation)."""
        what = f"{self.kind} {self.name!r}" if self.name else f"{self.kind} objects selected by paramRef.selector"
        if not facts.known:
            return Skipped(f"params ({what}) are not known without cluster facts (--facts gives them)", looked=False)
        if not isinstance(facts, ParamObjects):
            return Skipped(f"params ({what}) cannot be looked up in these cluster facts", looked=False)
        found = [o for o in facts.param_objects(self.api_version, self.kind) if self._selects(o, namespace)]
        if found:
            return found
        if self.not_found == "Allow":
            return Skipped(f"no params found ({what}); parameterNotFoundAction is Allow")
        return Unevaluable(f"no params found for policy binding with `Deny` parameterNotFoundAction ({what})")

    def _selects(self, obj: Mapping[str, Any], namespace: str) -> bool:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        own = str(meta.get("namespace") or "")
        wanted = self.namespace if self.namespace is not None else namespace if own else ""
        if own != wanted:
            return False
        if self.name is not None:
            return bool(meta.get("name") == self.name)
        labels = meta.get("labels")
        labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        return self.selector is not None and self.selector.matches(labels)
