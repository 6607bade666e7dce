"""MLPolicy `validations` as checks the engine runs like any rule (docs/authoring.md).

A policy's CEL parts compile once, at load, into a `CelProgram` (its matchConditions, variables and params) and
one `CelValidation` per validation, each bound into the policy as a `Binding` whose check is `CelValidation.check`.
So the engine needs nothing new: every validation gives a RuleResult with the usual five outcomes, exceptions
name it by its id, and failurePolicy decides the ones that err.

Per evaluation, what a policy's validations share is worked out once and kept in `Workload.memo`: the matchConditions'
verdict, the activations (the object is converted for CEL once per activation, not once per expression), and the
variables: each evaluated at most once, when the first expression that names a variable runs; one that errs fails
only the expressions that name it, as in VAP.
Between expressions the deadline is checked; inside one, cel-cpp's comprehension budget (10,000 iterations) bounds it.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any, Literal

from mlgate.model import pointer
from mlgate.model.results import Finding, Skipped, Unevaluable
from mlgate.model.workload import PodTemplate, Workload
from mlgate.rules.cel import env
from mlgate.rules.cel.params import ParamSource
from mlgate.rules.cel.served import served
from mlgate.rules.cel.view import namespace_object, request_view, template_view, workload_view
from mlgate.rules.common import container_label
from mlgate.rules.registry import CheckResult, Context, NoParams

ForEach = Literal["object", "template", "container"]
_VARIABLE_REF = re.compile(r"(?<![.?\w])variables\.([A-Za-z_][A-Za-z0-9_]*)")
# a root is a name not selected from something else: `object.spec.template` names `object`, not `template`
_ROOT_REF = re.compile(r"(?<![.?\w])(" + "|".join(env.ROOTS) + r")\b")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"')
# one step of a fieldPath, as in CRD validation rules: `.name`, `['name']` or `[0]`
_FIELD_STEP = re.compile(r"\.?([A-Za-z_$][A-Za-z0-9_$-]*)|\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]")


@dataclass(frozen=True)
class Expression:
    """A compiled expression and what it reads: the roots to bind and the variables to work out first."""

    text: str
    program: Any
    roots: frozenset[str]
    variables: tuple[str, ...]
    returns: tuple[str, ...] = ()

    @classmethod
    def compile(cls, text: str, returns: tuple[str, ...] = ()) -> Expression:
        program = env.compile_expression(text, returns) if env.available() else None
        code = _STRING.sub("''", text)  # a name inside a string literal is not a reference
        return cls(text, program, frozenset(_ROOT_REF.findall(code)), tuple(dict.fromkeys(_VARIABLE_REF.findall(code))),
                   returns)

    def __reduce__(self) -> tuple[Any, tuple[str, tuple[str, ...]]]:
        # cel-cpp's compiled programs do not pickle: a worker started by spawn (macOS, Windows) compiles its own
        return Expression.compile, (self.text, self.returns)


@dataclass(frozen=True)
class CelProgram:
    """A policy's shared CEL parts."""

    conditions: tuple[tuple[str, Expression], ...] = ()
    variables: dict[str, Expression] = field(default_factory=dict)
    params: dict[str, Any] | None = field(default_factory=dict)  # None: a VAP without paramKind
    workload_view: bool = True  # False for a ValidatingAdmissionPolicy, whose expressions cannot name it
    param_source: ParamSource | None = None  # a VAP binding's paramRef: `params` from the cluster facts

    @property
    def key(self) -> str:
        return f"cel:{id(self)}"


@dataclass(frozen=True)
class CelValidation:
    id: str
    program: CelProgram
    expression: Expression
    message: str
    message_expression: Expression | None = None
    for_each: ForEach = "object"
    field_path: tuple[str | int, ...] = ()
    # a VAP binding that warns (not denies) under failurePolicy Fail: the API server warns of an error, too
    errors_warn: bool = False

    def check(self, workload: Workload, params: NoParams, context: Context) -> CheckResult:
        result = self._check(workload, params, context)
        if self.errors_warn and isinstance(result, Unevaluable):
            return iter([Finding(self._path(workload, None, None), f"expression '{self.expression.text}' resulted "
                                 f"in error: {result.reason}", self._detail(workload, None, None, None))])
        return result

    def _check(self, workload: Workload, params: NoParams, context: Context) -> CheckResult:
        if not env.available():
            return Skipped(f"CEL validations cannot be checked: {env.INSTALL_HINT}", looked=False)
        source = self.program.param_source
        sets = [self.program.params] if source is None else source.resolve(workload.namespace, context.facts)
        if isinstance(sets, Skipped | Unevaluable):
            return sets
        findings: list[Finding] = []
        for index, given in enumerate(sets):  # a paramRef.selector may select several: each is judged
            judged = self._judge(_state(self.program, workload, context, index, given), workload, context)
            if isinstance(judged, Skipped | Unevaluable):
                return judged
            findings += judged
        return iter(findings)

    def _judge(self, state: _State, workload: Workload, context: Context) -> list[Finding] | Skipped | Unevaluable:
        if (refusal := state.applies()) is not None:
            return refusal
        findings: list[Finding] = []
        for template, where, extra in self._subjects(workload):
            if context.deadline is not None and time.monotonic() > context.deadline:
                return Unevaluable("the evaluation passed its deadline")
            key = (id(template), where)
            verdict, error = state.evaluate(self.expression, key, extra)
            if error is not None:
                return Unevaluable(error)
            if verdict is not True:
                if verdict is not False:
                    return Unevaluable(f"the expression gave {verdict!r}, not a bool")
                findings.append(Finding(self._path(workload, template, where), self._message(state, key, extra),
                                        self._detail(workload, template, where, extra.get("container"))))
        return findings

    def _subjects(self, workload: Workload) -> Iterator[tuple[PodTemplate | None, tuple[str, int] | None,
                                                               dict[str, Any]]]:
        if self.for_each == "object":
            yield None, None, {}
            return
        for template in workload.templates:
            view = template_view(template)
            if self.for_each == "template":
                yield template, None, {"template": view}
                continue
            for key, index, container in template.containers():
                yield template, (key, index), {"template": view, "container": container}

    def _path(self, workload: Workload, template: PodTemplate | None, where: tuple[str, int] | None) -> str:
        tokens = self.field_path
        if template is None:  # the object's metadata names it, so a finding about all of it points there
            return pointer.join("", *tokens) if tokens else "/metadata"
        if where is not None:
            return template.path(*where, *tokens)
        if tokens and tokens[0] == "metadata":
            return pointer.join(template.meta_pointer, *tokens[1:])
        return template.path(*tokens[1:]) if tokens and tokens[0] == "spec" else template.path(*tokens)

    def _message(self, state: _State, key: Hashable, extra: dict[str, Any]) -> str:
        if self.message_expression is not None:
            text, error = state.evaluate(self.message_expression, key, extra)
            if error is None and isinstance(text, str) and text.strip():
                return text.strip()  # as VAP: an empty or failing messageExpression falls back to message
        return self.message or f"failed expression: {self.expression.text}"

    @staticmethod
    def _detail(workload: Workload, template: PodTemplate | None, where: tuple[str, int] | None,
                container: dict[str, Any] | None) -> str:
        if template is None:
            return f"{workload.kind} {workload.name!r}"
        pods = "the pod" if template.role == "pod" else f"{template.role} pods"
        return pods if where is None or container is None else f"{container_label(where[0], container)} of {pods}"


def parse_field_path(text: str) -> tuple[str | int, ...] | None:
    """`.spec.containers[0]['a.b']` as tokens; None if it is not a field path."""
    tokens: list[str | int] = []
    at = 0
    while at < len(text):
        step = _FIELD_STEP.match(text, at)
        if step is None or step.end() == at:
            return None
        name, quoted, index = step.groups()
        tokens.append(int(index) if index is not None else quoted.replace("\\'", "'") if quoted is not None else name)
        at = step.end()
    return tuple(tokens)


class _State:
    """One policy's CEL work on one workload: its activations, its variables' values, its matchConditions."""

    def __init__(self, program: CelProgram, workload: Workload, context: Context,
                 params: Mapping[str, Any] | EllipsisType | None = ...) -> None:
        # weakly: the state lives in workload.memo, and a cycle would keep the activations' C++ arenas alive until
        # the garbage collector's next full pass instead of freeing them with the workload
        self.program, self.workload, self.context = program, weakref.ref(workload), context
        self.params = program.params if params is ... else params  # `...`: the policy's own spec.params
        self.base: dict[str, Any] | None = None
        self.values: dict[str, Any] | None = None  # every variable's value, once the first is needed
        self.errors: dict[str, str] = {}
        self.activations: dict[tuple[Hashable, bool], Any] = {}
        self.verdict: Skipped | Unevaluable | Literal[False] | None = False  # False: not yet worked out

    def applies(self) -> Skipped | Unevaluable | None:
        if self.verdict is False:
            self.verdict = None
            for name, condition in self.program.conditions:
                value, error = self.evaluate(condition)
                if error is not None:
                    self.verdict = Unevaluable(f"matchCondition {name}: {error}")
                    break
                if value is not True:
                    self.verdict = Skipped(f"matchCondition {name} is false")
                    break
        return self.verdict

    def evaluate(self, expression: Expression, key: Hashable = None,
                 extra: dict[str, Any] | None = None) -> tuple[Any, str | None]:
        """The expression's value over the object, or over one template or container (`key` names it)."""
        extra = extra or {}
        for root in ("template", "container"):
            if root in expression.roots and root not in extra:
                return None, f"{root} is set only in validations with forEach: {root}"
        if expression.variables:
            self._variables()
            for name in expression.variables:
                if name in self.errors:
                    return None, f"variable {name}: {self.errors[name]}"
        return env.run(expression.program, self._activation(key, bool(expression.variables), extra))

    def _activation(self, key: Hashable, with_variables: bool, extra: dict[str, Any] | None = None) -> Any:
        slot = (key, with_variables)
        if slot not in self.activations:
            data = {**self._base(), **(extra or {})}
            if with_variables:
                data["variables"] = self.values
            self.activations[slot] = env.activation(data)
        return self.activations[slot]

    def _variables(self) -> None:
        """Every variable, in order, each once: one that errs fails only the expressions that name it."""
        if self.values is not None:
            return
        self.values = {}
        plain = self._activation(None, False)  # the object-scope one, which expressions without variables share
        for name, expression in self.program.variables.items():
            failed = next((n for n in expression.variables if n in self.errors), None)
            if failed is not None:
                self.errors[name] = f"variable {failed}: {self.errors[failed]}"
                continue
            bound = env.activation({**self._base(), "variables": dict(self.values)}) if expression.variables else plain
            value, error = env.run(expression.program, bound)
            if error is not None:
                self.errors[name] = error
            else:
                self.values[name] = value

    def _base(self) -> dict[str, Any]:
        if self.base is None:
            workload, context = self.workload(), self.context
            assert workload is not None, "a workload's CEL state outlived it"
            old = workload.old_obj
            self.base = {
                "object": served(workload.obj),
                "oldObject": None if old is None else served(old),
                "request": request_view(workload, context.operation),
                "namespaceObject": namespace_object(workload.namespace, context.facts),
                "params": self.params,
            }
            if self.program.workload_view:
                self.base["workload"] = workload_view(workload, context.gpus)
        return self.base


def fresh_state(program: CelProgram, workload: Workload, context: Context) -> _State:
    """A state no other expression shares: for a mutation, which must see the object as the last one left it."""
    return _State(program, workload, context)


def _state(program: CelProgram, workload: Workload, context: Context, index: int = 0,
           params: Mapping[str, Any] | EllipsisType | None = ...) -> _State:
    """The policy's state for this workload (and its `index`th params object), made by its first validation and
    shared by the rest."""
    key = program.key if index == 0 else f"{program.key}:{index}"
    state = workload.memo.get(key)
    if not isinstance(state, _State) or state.context.gpus is not context.gpus or (
            params is not ... and state.params is not params):
        state = workload.memo[key] = _State(program, workload, context, params)
    return state
