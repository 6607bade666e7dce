"""The policy document a platform team writes (and `kubectl apply`s as MLPolicy/ClusterMLPolicy).

    apiVersion: mlgate.dev/v1alpha1
    kind: ClusterMLPolicy          # or MLPolicy, which only ever applies in its own namespace
    metadata: {name: gpu-limits}
    spec:
      failurePolicy: Fail          # what a rule that cannot be evaluated does: Fail denies, Ignore admits
      unknownKinds: Judge          # pod specs found in a kind no description knows: Judge | Warn | Ignore
      gpuResources: [example.com/npu]   # more resource names (or shell patterns) this policy counts as GPUs
      match:   {kinds: [...], namespaces: [...], namespaceSelector: {...}, objectSelector: {...}}
      exclude: {same fields}
      allowExceptions: true        # MLPolicyExceptions may name any rule; false: none; or a list of rule IDs
      rules:
        - rule: gpu.max            # an ID from `mlgate rules`
          action: deny             # deny | warn | audit (checks only)
          params: {...}            # validated against the rule's own schema
      # CEL, shaped after ValidatingAdmissionPolicy (docs/authoring.md); `rules` or `validations`, or both
      matchConditions: [{name: gpu-jobs, expression: "workload.gpus.perJob > 0"}]
      variables: [{name: team, expression: "object.metadata.?labels.team.orValue('')"}]
      params: {...}                # any mapping: `params` in expressions
      validations:
        - name: team-label         # the id results and MLPolicyExceptions use; default validations[<index>]
          expression: "variables.team != ''"
          message: "..."           # or messageExpression
          reason: Forbidden        # as VAP's; kept for VAP users, the denial is mlgate's one message
          action: deny             # deny | warn | audit
          forEach: container       # object (default) | template | container
          fieldPath: ".image"      # relative to what forEach names
      mutations:                   # shaped after MutatingAdmissionPolicy's (docs/authoring.md)
        - name: cost-center        # default mutations[<index>]
          patchType: JSONPatch     # JSONPatch | ApplyConfiguration
          jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]"}
          forEach: template        # object (default) | template: relative to each pod template
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from mlgate.model.results import Action, FailurePolicy

API_VERSION = "mlgate.dev/v1alpha1"
POLICY_KINDS = ("MLPolicy", "ClusterMLPolicy")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Requirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


class LabelSelector(Strict):
    """metav1.LabelSelector: every matchLabels entry and every expression must hold."""

    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[Requirement] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.matchLabels.items()) and all(
            r.matches(labels) for r in self.matchExpressions
        )


class MatchBlock(Strict):
    kinds: list[str] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)
    namespaceSelector: LabelSelector | None = None
    objectSelector: LabelSelector | None = None


class RuleBinding(Strict):
    rule: str
    action: Action = Action.DENY
    params: dict[str, Any] = Field(default_factory=dict)


# a validation's or variable's name: a DNS label, so it can never be taken for a rule ID (which has a dot)
CEL_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
VARIABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"  # a CEL identifier, as VAP's variables


# a matchCondition's name: a qualified name, as VAP's (k8s.io/api admissionregistration/v1 MatchCondition)
CONDITION_NAME = r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"


class Variable(Strict):
    name: str = Field(pattern=VARIABLE_NAME, max_length=63)
    expression: str = Field(min_length=1)


class MatchCondition(Strict):
    name: str = Field(pattern=CONDITION_NAME, max_length=63)
    expression: str = Field(min_length=1)


class Validation(Strict):
    name: str | None = Field(default=None, pattern=CEL_NAME, max_length=63)
    expression: str = Field(min_length=1)
    message: str = ""
    messageExpression: str | None = None
    reason: Literal["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"] | None = None
    action: Action = Action.DENY
    forEach: Literal["object", "template", "container"] = "object"
    fieldPath: str | None = None


class PatchExpression(Strict):
    expression: str = Field(min_length=1)


class Mutation(Strict):
    """MutatingAdmissionPolicy's Mutation (k8s.io/api admissionregistration/v1beta1), plus name and forEach."""

    name: str | None = Field(default=None, pattern=CEL_NAME, max_length=63)
    patchType: Literal["JSONPatch", "ApplyConfiguration"]
    jsonPatch: PatchExpression | None = None
    applyConfiguration: PatchExpression | None = None
    forEach: Literal["object", "template"] = "object"
    action: Any = Field(default=None, json_schema_extra={"not": {}})  # refused at load with a clear message

    @model_validator(mode="after")
    def _one_patch(self) -> Mutation:
        wanted = "jsonPatch" if self.patchType == "JSONPatch" else "applyConfiguration"
        other = "applyConfiguration" if wanted == "jsonPatch" else "jsonPatch"
        if getattr(self, wanted) is None:
            raise ValueError(f"patchType {self.patchType} needs {wanted}.expression")
        if getattr(self, other) is not None:
            raise ValueError(f"patchType {self.patchType} takes {wanted}, not {other}")
        return self

    @property
    def expression(self) -> str:
        patch = self.jsonPatch if self.patchType == "JSONPatch" else self.applyConfiguration
        assert patch is not None
        return patch.expression


class UnknownKinds(StrEnum):
    """What a policy does with the pod specs found in an object of a kind no description knows."""

    JUDGE = "Judge"  # its rules judge them, each as one pod
    WARN = "Warn"  # as Judge, but a denial becomes a warning
    IGNORE = "Ignore"  # the policy does not apply


class PolicySpec(Strict):
    failurePolicy: FailurePolicy = FailurePolicy.FAIL
    unknownKinds: UnknownKinds = UnknownKinds.JUDGE
    gpuResources: list[str] = Field(default_factory=list, max_length=64)
    match: MatchBlock = Field(default_factory=MatchBlock)
    exclude: MatchBlock | None = None
    allowExceptions: StrictBool | list[str] = True
    rules: list[RuleBinding] = Field(default_factory=list)
    matchConditions: list[MatchCondition] = Field(default_factory=list, max_length=64)
    variables: list[Variable] = Field(default_factory=list, max_length=64)
    validations: list[Validation] = Field(default_factory=list, max_length=256)
    mutations: list[Mutation] = Field(default_factory=list, max_length=256)
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _something_to_do(self) -> PolicySpec:
        if not self.rules and not self.validations and not self.mutations:
            raise ValueError("a policy needs rules, validations or mutations")
        return self


class Metadata(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(min_length=1)
    namespace: str | None = None


class PolicyDocument(Strict):
    apiVersion: Literal["mlgate.dev/v1alpha1"]
    kind: Literal["MLPolicy", "ClusterMLPolicy"]
    metadata: Metadata
    spec: PolicySpec
    status: dict[str, Any] | None = None  # present on objects read back from a cluster
