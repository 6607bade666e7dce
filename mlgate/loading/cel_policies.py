"""A policy's CEL parts (matchConditions, variables, params, validations) compiled into bindings, with errors at
file, line and field, and the CEL column in the message (docs/authoring.md).

Each expression is parsed and type-checked once, here. A validation names only variables declared before it is
used (as VAP's: a variable may name only those above it), and `template` and `container` only where its
`forEach` sets them. Where cel-expr-python is not installed nothing is compiled: the validations load, and each
says, when it runs, that it could not be checked.
"""

from __future__ import annotations

from collections.abc import Callable

from mlgate.engine.policyset import Binding
from mlgate.model import pointer
from mlgate.model.policy import PolicySpec
from mlgate.rules.cel.env import CompileError
from mlgate.rules.cel.validation import CelProgram, CelValidation, Expression, parse_field_path
from mlgate.rules.registry import NoParams, RuleSpec

__all__ = ["compile_cel", "validation_ids"]

ErrorFn = Callable[[str, str], object]
_FOREACH_ROOTS = {"object": frozenset(), "template": frozenset({"template"}),
                  "container": frozenset({"template", "container"})}


def validation_ids(spec: PolicySpec) -> list[str]:
    """Each validation's id: its name, else `validations[<index>]`."""
    return [v.name or f"validations[{i}]" for i, v in enumerate(spec.validations)]


def compile_cel(spec: PolicySpec, err: ErrorFn) -> list[Binding]:
    """The validations as bindings; each problem is passed to `err(pointer, message)`."""
    if not spec.validations and not spec.matchConditions and not spec.variables:
        return []

    def compiled(ptr: str, text: str, returns: tuple[str, ...], allowed: frozenset[str],
                 known: set[str]) -> Expression | None:
        try:
            expression = Expression.compile(text, returns)
        except CompileError as exc:
            err(ptr, str(exc))
            return None
        for root in sorted(expression.roots & {"template", "container"} - allowed):
            err(ptr, f"{root} is set only in validations with forEach: {root}")
            return None
        for name in expression.variables:
            if name not in known:
                err(ptr, f"no variable {name!r} is declared before this; declared: {', '.join(known) or 'none'}")
                return None
        return expression

    declared: set[str] = set()
    variables: dict[str, Expression] = {}
    for i, variable in enumerate(spec.variables):
        ptr = pointer.join("/spec/variables", i)
        if variable.name in declared:
            err(ptr + "/name", f"variable {variable.name!r} is declared twice")
        found = compiled(ptr + "/expression", variable.expression, (), frozenset(), declared)
        declared.add(variable.name)
        if found is not None:
            variables[variable.name] = found
    conditions = []
    for i, condition in enumerate(spec.matchConditions):
        found = compiled(pointer.join("/spec/matchConditions", i, "expression"), condition.expression, ("BOOL",),
                         frozenset(), declared)
        if found is not None:
            conditions.append((condition.name, found))
    program = CelProgram(tuple(conditions), variables, dict(spec.params))
    bindings: list[Binding] = []
    ids = validation_ids(spec)
    for i, (validation, vid) in enumerate(zip(spec.validations, ids, strict=True)):
        base = pointer.join("/spec/validations", i)
        if ids.index(vid) != i:
            err(base + "/name", f"validation {vid!r} is named twice")
        allowed = _FOREACH_ROOTS[validation.forEach]
        expression = compiled(base + "/expression", validation.expression, ("BOOL",), allowed, declared)
        message = None
        if validation.messageExpression is not None:
            message = compiled(base + "/messageExpression", validation.messageExpression, ("STRING",), allowed,
                               declared)
        path = parse_field_path(validation.fieldPath) if validation.fieldPath else ()
        if path is None:
            err(base + "/fieldPath", f"{validation.fieldPath!r} is not a field path such as .image or "
                                     ".resources.limits['nvidia.com/gpu']")
        if expression is None or path is None or (validation.messageExpression is not None and message is None):
            continue
        check = CelValidation(vid, program, expression, validation.message, message, validation.forEach, path)
        rule = RuleSpec(vid, validation.message or validation.expression, NoParams, check=check.check)
        bindings.append(Binding(rule, NoParams(), validation.action))
    return bindings
