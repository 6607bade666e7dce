"""A policy's CEL parts (matchConditions, variables, params, validations, mutations) compiled into bindings,
with errors at file, line and field, and the CEL column in the message (docs/authoring.md).

Each expression is parsed and type-checked once, here. A validation names only variables declared before it is
used (as VAP's: a variable may name only those above it), and `template` and `container` only where its
`forEach` sets them. Where cel-expr-python is not installed nothing is compiled: the validations load, and each
says, when it runs, that it could not be checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from mlgate.engine.policyset import Binding
from mlgate.model import pointer
from mlgate.model.policy import PolicySpec
from mlgate.model.results import Action
from mlgate.rules.cel.env import CompileError
from mlgate.rules.cel.mutation import ORDER, CelMutation
from mlgate.rules.cel.structs import rewrite
from mlgate.rules.cel.validation import CelProgram, CelValidation, Expression, parse_field_path
from mlgate.rules.registry import NoParams, RuleSpec

__all__ = ["compile_cel", "mutation_ids", "validation_ids"]

ErrorFn = Callable[[str, str], object]
_FOREACH_ROOTS = {"object": frozenset(), "template": frozenset({"template"}),
                  "container": frozenset({"template", "container"})}


def validation_ids(spec: PolicySpec) -> list[str]:
    """Each validation's id: its name, else `validations[<index>]`."""
    return [v.name or f"validations[{i}]" for i, v in enumerate(spec.validations)]


def mutation_ids(spec: PolicySpec) -> list[str]:
    """Each mutation's id: its name, else `mutations[<index>]`."""
    return [m.name or f"mutations[{i}]" for i, m in enumerate(spec.mutations)]


def compile_cel(spec: PolicySpec, err: ErrorFn) -> list[Binding]:
    """The validations and mutations as bindings; each problem is passed to `err(pointer, message)`."""
    if not spec.validations and not spec.mutations and not spec.matchConditions and not spec.variables:
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
    bindings += _mutations(spec, program, declared, ids, err)
    return bindings


def _mutations(spec: PolicySpec, program: CelProgram, declared: set[str], ids: list[str],
               err: ErrorFn) -> list[Binding]:
    """Each mutation as a binding of a mutation rule that runs after the built-in ones (rules/cel/mutation.py)."""
    bindings: list[Binding] = []
    for i, (mutation, mid) in enumerate(zip(spec.mutations, mutation_ids(spec), strict=True)):
        base = pointer.join("/spec/mutations", i)
        if mid in ids or mutation_ids(spec).index(mid) != i:
            err(base + "/name", f"{mid!r} names another validation or mutation of this policy")
        if mutation.action is not None:
            err(base + "/action", "a mutation takes no action (deny, warn and audit are for checks and "
                                  "validations); remove it")
            continue
        field = "jsonPatch" if mutation.patchType == "JSONPatch" else "applyConfiguration"
        ptr = f"{base}/{field}/expression"
        written = mutation.expression
        made = rewrite(written)  # JSONPatch{...} and Object{...} as the maps they stand for (rules/cel/structs.py)
        try:
            patch = Expression.compile(made.text)
        except CompileError as exc:
            line, column = made.position(exc.line, exc.column, written)
            err(ptr, str(CompileError(line, column, exc.problem)))
            continue
        # a root named only inside a string (a path such as '/spec/template/spec') is not read
        patch = replace(patch, roots=frozenset(r for r in patch.roots if re.search(rf"\b{r}\b", made.code)))
        problem = _mutation_problem(patch, mutation.patchType, frozenset({"template"}) if mutation.forEach ==
                                    "template" else frozenset(), declared)
        if problem is not None:
            err(ptr, problem)
            continue
        change = CelMutation(mid, program, patch, mutation.patchType, mutation.forEach)
        summary = f"CEL {mutation.patchType} mutation" + (" of each pod template" if mutation.forEach ==
                                                           "template" else "")
        bindings.append(Binding(RuleSpec(mid, summary, NoParams, mutate=change.mutate, order=ORDER,
                                         reports_changes=True),
                                NoParams(), Action.DENY))
    return bindings


def _mutation_problem(expression: Expression, patch_type: str, allowed: frozenset[str],
                      known: set[str]) -> str | None:
    if "container" in expression.roots or expression.roots & {"template"} - allowed:
        return "template is set only in mutations with forEach: template; container in none"
    if missing := [n for n in expression.variables if n not in known]:
        return f"no variable {missing[0]!r} is declared; declared: {', '.join(sorted(known)) or 'none'}"
    if expression.program is None:  # cel-expr-python is not installed: it says so when it runs
        return None
    kind = expression.program.return_type().name()
    wanted = "LIST" if patch_type == "JSONPatch" else "MAP"
    if kind != "DYN" and not kind.startswith(wanted):
        shape = "a list of JSONPatch{op, path, value}" if wanted == "LIST" else "an Object{...}"
        return f"CEL 1:1: the expression's type is {kind.lower()}, not {shape}"
    return None

