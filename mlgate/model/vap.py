"""Kubernetes' ValidatingAdmissionPolicy and its Binding (admissionregistration.k8s.io/v1), as mlgate reads them.

The fields are k8s.io/api admissionregistration/v1 types.go's. Unknown fields are refused, as a typo would be;
`status` (the API server's type-checking report) and the metadata the API server adds are accepted and not read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlgate.model.policy import LabelSelector, MatchCondition, Metadata, Variable
from mlgate.model.results import FailurePolicy

VAP_API_VERSION = "admissionregistration.k8s.io/v1"
VAP_KIND = "ValidatingAdmissionPolicy"
VAP_BINDING_KIND = "ValidatingAdmissionPolicyBinding"
VAP_KINDS = (VAP_KIND, VAP_BINDING_KIND)

Operation = Literal["*", "CREATE", "UPDATE", "DELETE", "CONNECT"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceRule(_Strict):
    apiGroups: list[str] = Field(default_factory=list)
    apiVersions: list[str] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    operations: list[Operation] = Field(default_factory=list)
    resourceNames: list[str] = Field(default_factory=list)
    scope: Literal["*", "Cluster", "Namespaced"] = "*"


class MatchResources(_Strict):
    namespaceSelector: LabelSelector | None = None
    objectSelector: LabelSelector | None = None
    resourceRules: list[ResourceRule] = Field(default_factory=list)
    excludeResourceRules: list[ResourceRule] = Field(default_factory=list)
    matchPolicy: Literal["Exact", "Equivalent"] = "Equivalent"


class ParamKind(_Strict):
    apiVersion: str
    kind: str


class VapValidation(_Strict):
    expression: str = Field(min_length=1)
    message: str = ""
    messageExpression: str | None = None
    reason: Literal["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"] | None = None


class AuditAnnotation(_Strict):
    key: str
    valueExpression: str


class VapSpec(_Strict):
    paramKind: ParamKind | None = None
    matchConstraints: MatchResources | None = None
    validations: list[VapValidation] = Field(default_factory=list)
    failurePolicy: FailurePolicy = FailurePolicy.FAIL
    auditAnnotations: list[AuditAnnotation] = Field(default_factory=list)
    matchConditions: list[MatchCondition] = Field(default_factory=list, max_length=64)
    variables: list[Variable] = Field(default_factory=list)


class ParamRef(_Strict):
    name: str | None = None
    namespace: str | None = None
    selector: LabelSelector | None = None
    parameterNotFoundAction: Literal["Allow", "Deny"] | None = None


class BindingSpec(_Strict):
    policyName: str
    paramRef: ParamRef | None = None
    matchResources: MatchResources | None = None
    validationActions: list[Literal["Deny", "Warn", "Audit"]] = Field(min_length=1)


class VapDocument(_Strict):
    apiVersion: Literal["admissionregistration.k8s.io/v1"]
    kind: Literal["ValidatingAdmissionPolicy"]
    metadata: Metadata
    spec: VapSpec
    status: dict[str, Any] | None = None


class BindingDocument(_Strict):
    apiVersion: Literal["admissionregistration.k8s.io/v1"]
    kind: Literal["ValidatingAdmissionPolicyBinding"]
    metadata: Metadata
    spec: BindingSpec
    status: dict[str, Any] | None = None
