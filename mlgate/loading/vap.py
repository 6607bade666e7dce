"""ValidatingAdmissionPolicies with their Bindings as mlgate policies, judged as the API server judges them
(docs/authoring.md, "ValidatingAdmissionPolicy offline").

Each (policy, binding) pair becomes one `Policy` named `<policy>@<binding>`, whose validations are the same
`CelValidation` checks MLPolicy's are: one CEL runtime, one Result and Finding model, every output format.
What decides which objects a pair judges follows k8s.io/apiserver/pkg/admission/plugin/policy/matching and
webhook/predicates/rules: the policy's matchConstraints and the binding's matchResources must both match (resource
rules with their operations, excludeResourceRules, namespaceSelector, objectSelector), then every matchCondition.
validationActions map to mlgate's actions (Deny -> deny, else Warn -> warn, else audit). An expression that errs
is decided by failurePolicy, which only denies where the binding denies (the API server turns such an error into
a warning under `Warn`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from mlgate.engine.match import namespace_labels
from mlgate.engine.policyset import Binding, Policy
from mlgate.model import pointer
from mlgate.model.facts import ClusterFacts
from mlgate.model.policy import LabelSelector
from mlgate.model.results import Action, FailurePolicy
from mlgate.model.vap import BindingDocument, MatchResources, ResourceRule, VapDocument
from mlgate.model.workload import Workload
from mlgate.rules.cel.env import CompileError
from mlgate.rules.cel.params import ParamSource
from mlgate.rules.cel.served import guess_resource
from mlgate.rules.cel.validation import CelProgram, CelValidation, Expression
from mlgate.rules.registry import NoParams, RuleSpec

__all__ = ["CompiledVap", "ResourceMatch", "compile_vap", "pair"]

ErrorFn = Callable[[str, str], object]
_NOT_IN_VAP = ("workload", "template", "container")  # mlgate's own variables, which a VAP does not have


@dataclass(frozen=True)
class CompiledVap:
    """A ValidatingAdmissionPolicy whose expressions compiled, waiting for its bindings."""

    document: VapDocument
    program: CelProgram
    validations: tuple[CelValidation, ...]
    source: str


@dataclass(frozen=True)
class LoadedBinding:
    """A ValidatingAdmissionPolicyBinding, with where its fields are for the errors of pairing it."""

    document: BindingDocument
    source: str
    lines: dict[str, int]


@dataclass(frozen=True)
class ResourceMatch:
    """MatchResources as a predicate on the object (the `Policy.admits` of a VAP's pair)."""

    constraints: MatchResources
    binding: MatchResources | None

    @property
    def selects_namespaces(self) -> bool:
        return any(b is not None and b.namespaceSelector is not None and _any_label(b.namespaceSelector)
                   for b in (self.constraints, self.binding))

    def __call__(self, workload: Workload, facts: ClusterFacts, operation: str, *, namespaces: bool = True) -> bool:
        return _matches(self.constraints, workload, facts, operation, require_rules=True, namespaces=namespaces) \
            and (self.binding is None or _matches(self.binding, workload, facts, operation, require_rules=False,
                                                  namespaces=namespaces))


def _any_label(selector: LabelSelector) -> bool:
    return bool(selector.matchLabels or selector.matchExpressions)


def _matches(block: MatchResources, workload: Workload, facts: ClusterFacts, operation: str, *,
             require_rules: bool, namespaces: bool) -> bool:
    if (block.resourceRules or require_rules) and not any(_rule(r, workload, operation)
                                                          for r in block.resourceRules):
        return False
    if any(_rule(r, workload, operation) for r in block.excludeResourceRules):
        return False
    if not _selects(block.objectSelector, workload.labels):
        return False
    if not namespaces:
        return True
    if workload.namespace and workload.kind != "Namespace":  # cluster-scoped objects ignore namespaceSelector
        return _selects(block.namespaceSelector, namespace_labels(workload.namespace, facts))
    return workload.kind != "Namespace" or _selects(block.namespaceSelector, workload.labels)


def _selects(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    return selector is None or selector.matches(labels)


def _rule(rule: ResourceRule, workload: Workload, operation: str) -> bool:
    """admissionregistration's Rule: `*` or the value, for operations, groups, versions and resources (a bare
    resource or `*` never matches a subresource, and offline there is none)."""
    group, _, version = workload.api_version.rpartition("/")
    resource = guess_resource(workload.kind)
    scoped = {"*": True, "Namespaced": bool(workload.namespace), "Cluster": not workload.namespace}[rule.scope]
    return (scoped and _any(rule.operations, operation) and _any(rule.apiGroups, group)
            and _any(rule.apiVersions, version) and any(r in ("*", "*/*", resource) for r in rule.resources)
            and (not rule.resourceNames or workload.name in rule.resourceNames))


def _any(values: Iterable[str], value: str) -> bool:
    return any(v in ("*", value) for v in values)


def compile_vap(document: VapDocument, source: str, err: ErrorFn) -> CompiledVap | None:
    """The policy's expressions compiled and type-checked; each problem goes to `err(pointer, message)`."""
    spec = document.spec
    failed = False

    def compiled(ptr: str, text: str, returns: tuple[str, ...], known: set[str]) -> Expression | None:
        nonlocal failed
        try:
            expression = Expression.compile(text, returns)
        except CompileError as exc:
            err(ptr, str(exc))
            failed = True
            return None
        wrong = sorted(set(_NOT_IN_VAP) & expression.roots) + [
            f"variables.{n}" for n in expression.variables if n not in known]
        if wrong:
            err(ptr, f"{', '.join(wrong)} is not a variable of this ValidatingAdmissionPolicy")
            failed = True
            return None
        return expression

    if spec.matchConstraints is None or not spec.matchConstraints.resourceRules:
        err("/spec/matchConstraints/resourceRules", "a ValidatingAdmissionPolicy needs resourceRules")
        failed = True
    declared: set[str] = set()
    variables: dict[str, Expression] = {}
    for i, variable in enumerate(spec.variables):
        found = compiled(pointer.join("/spec/variables", i, "expression"), variable.expression, (), declared)
        declared.add(variable.name)
        if found is not None:
            variables[variable.name] = found
    conditions = []
    for i, condition in enumerate(spec.matchConditions):
        found = compiled(pointer.join("/spec/matchConditions", i, "expression"), condition.expression, ("BOOL",),
                         declared)
        if found is not None:
            conditions.append((condition.name, found))
    for i, annotation in enumerate(spec.auditAnnotations):  # compiled to refuse what the API server would
        compiled(pointer.join("/spec/auditAnnotations", i, "valueExpression"), annotation.valueExpression,
                 ("STRING",), declared)
    program = CelProgram(tuple(conditions), variables, None, workload_view=False)
    validations = []
    for i, validation in enumerate(spec.validations):
        base = pointer.join("/spec/validations", i)
        expression = compiled(base + "/expression", validation.expression, ("BOOL",), declared)
        message = None if validation.messageExpression is None else compiled(
            base + "/messageExpression", validation.messageExpression, ("STRING",), declared)
        if expression is not None:
            validations.append(CelValidation(f"validations[{i}]", program, expression, validation.message,
                                             message))
    return None if failed else CompiledVap(document, program, tuple(validations), source)


def pair(policies: Iterable[CompiledVap], bindings: Iterable[LoadedBinding],
         err: Callable[[LoadedBinding, str, str], object]) -> list[Policy]:
    """One Policy per binding, named `<policy>@<binding>`; a binding whose policy is missing (the API server would
    silently do nothing for it) or whose paramRef does not fit it is `err(binding, pointer, message)`."""
    by_name = {p.document.metadata.name: p for p in policies}
    out = []
    for loaded in bindings:
        binding = loaded.document
        vap = by_name.get(binding.spec.policyName)
        if vap is None:
            err(loaded, "/spec/policyName", f"no ValidatingAdmissionPolicy {binding.spec.policyName!r} is loaded; "
                                            f"loaded: {', '.join(sorted(by_name)) or 'none'}")
            continue
        kind, ref = vap.document.spec.paramKind, binding.spec.paramRef
        if (kind is None) != (ref is None):
            problem = f"needs a paramRef: the policy's paramKind is {kind.kind}" if kind is not None else \
                "names params, but the policy has no paramKind"
            err(loaded, "/spec/paramRef", f"binding {binding.metadata.name!r} {problem}")
            continue
        validations = vap.validations
        if kind is not None and ref is not None:
            params = ParamSource(kind.apiVersion, kind.kind, ref.name, ref.namespace, ref.selector,
                                 ref.parameterNotFoundAction or "Deny")
            program = replace(vap.program, param_source=params)
            validations = tuple(replace(v, program=program) for v in validations)
        actions = binding.spec.validationActions
        action = Action.DENY if "Deny" in actions else Action.WARN if "Warn" in actions else Action.AUDIT
        failure = vap.document.spec.failurePolicy if action is Action.DENY else FailurePolicy.IGNORE
        if action is not Action.DENY and vap.document.spec.failurePolicy is FailurePolicy.FAIL:
            validations = tuple(replace(v, errors_warn=True) for v in validations)
        assert vap.document.spec.matchConstraints is not None  # compile_vap refused it otherwise
        out.append(Policy(
            name=f"{vap.document.metadata.name}@{binding.metadata.name}",
            bindings=tuple(Binding(RuleSpec(v.id, v.message or v.expression.text, NoParams, check=v.check),
                                   NoParams(), action) for v in validations),
            failure_policy=failure,
            source=vap.source,
            admits=ResourceMatch(vap.document.spec.matchConstraints, binding.spec.matchResources),
        ))
    return out
