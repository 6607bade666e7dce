"""The CEL environment of MLPolicy validations: one, built once, shared by every policy.

The runtime is cel-expr-python (Google's cel-cpp, chosen in bench/cel_bench.py), with the standard macros, the
strings extension (cel-spec `ext/strings`: charAt, indexOf, lastIndexOf, lowerAscii, upperAscii, replace, split,
substring, trim, join, format, quote; its reverse is refused, see WITHHELD) and optional types (`obj.?field`,
`orValue`, `optional.of`), which Kubernetes' environment also has (k8s.io/apiserver/pkg/cel/environment/base.go).
The Kubernetes libraries cel-cpp lacks are added in `library.py`. Every variable is `dyn`, as an unstructured
object is to the API server, so the type checker refuses wrong overloads and unknown functions at load time, and
field names at run time.

cel-expr-python is the `cel` extra: where it is missing, policies still load and every validation is said to be
unchecked, never passed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from mlgate.rules.cel import library

# The names an expression may use; all `dyn`. `template` and `container` are set only for forEach.
ROOTS = ("object", "oldObject", "request", "namespaceObject", "variables", "params", "workload", "template",
         "container")
MAX_EXPRESSION_LENGTH = 5000  # characters, as VAP's validation expression limit (maxLength 5000 in its schema)
INSTALL_HINT = "cel-expr-python is not installed (pip install 'mlgate[cel]')"
# Kubernetes CEL functions that mlgate does not offer: named in the load error instead of "undeclared reference"
UNSUPPORTED = {
    "semver": "semver", "isSemver": "semver", "authorizer": "the authorizer", "named": "format.named",
    "jsonpatch": "jsonpatch outside a mutation", "escapeKey": "jsonpatch outside a mutation", "sets": "sets",
    "validate": "format.named",
    "sign": "Quantity.sign (kube-apiserver v1.35 refuses it in admission policies too)",
}
# cel-cpp functions Kubernetes' CEL does not have, refused with why
WITHHELD = {"reverse": "not in Kubernetes' strings library (kube-apiserver v1.35 has no reverse either)"}
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"')
_ERROR = re.compile(r"<input>:(\d+):(\d+): (.*)")
_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")

try:
    from cel_expr_python import cel as _cel
    from cel_expr_python.ext import ext_optional, ext_strings
except ImportError:  # the `cel` extra is not installed
    _cel = None


def available() -> bool:
    return _cel is not None


@dataclass(frozen=True)
class CompileError(Exception):
    """An expression the parser or the type checker refused, at its line and column within the expression."""

    line: int
    column: int
    problem: str

    def __str__(self) -> str:
        return f"CEL {self.line}:{self.column}: {self.problem}"


@functools.cache
def environment() -> Any:
    assert _cel is not None, INSTALL_HINT
    return _cel.NewEnv(
        variables={name: _cel.Type.DYN for name in ROOTS},
        extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional()],
        functions=library.declarations(_cel),
    )


def activation(data: dict[str, Any]) -> Any:
    """The variables of evaluations that share them: cel-cpp converts each value once per activation, when an
    expression first reads it (about 130 µs for a 2 KB PyTorchJob), so expressions over one activation pay it
    once (bench/cel_bench.py --engine)."""
    return environment().Activation(data)


def compile_expression(text: str, returns: tuple[str, ...] = ()) -> Any:
    """The checked program of `text`; CompileError for a syntax or type error, or a result of another type than
    `returns` (names of cel types, `dyn` always allowed)."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CompileError(1, 1, f"the expression is {len(text):,} characters long, the limit is "
                                 f"{MAX_EXPRESSION_LENGTH:,}")
    env = environment()
    try:
        program = env.compile(text)
    except RuntimeError as exc:
        raise _compile_error(str(exc)) from None
    _refuse_withheld(text)
    kind = program.return_type().name()
    if returns and kind not in (*returns, "DYN"):
        raise CompileError(1, 1, f"the expression's type is {kind.lower()}, not {' or '.join(returns).lower()}")
    return program


def _refuse_withheld(text: str) -> None:
    """cel-cpp's strings extension has functions that Kubernetes' (strings version 2, k8s.io/apiserver
    pkg/cel/environment/base.go) has not: kube-apiserver v1.35 errs on `'abc'.reverse()` (tests/e2e/vap_cases)."""
    code = _STRING_LITERAL.sub("''", text)
    for name, found in ((n, re.search(rf"\.\s*{n}\s*\(", code)) for n in WITHHELD):
        if found is not None:
            line = code.count("\n", 0, found.start()) + 1
            column = found.start() - (code.rfind("\n", 0, found.start()) + 1) + 2
            raise CompileError(line, column, f"{name}: {WITHHELD[name]}")


def _compile_error(text: str) -> CompileError:
    found = _ERROR.search(text)
    if found is None:
        return CompileError(1, 1, text.strip().splitlines()[0] if text.strip() else "does not compile")
    line, column, problem = int(found.group(1)), int(found.group(2)), found.group(3).strip()
    problem = problem.removesuffix("[INVALID_ARGUMENT]").strip()
    undeclared = _UNDECLARED.search(problem)
    if undeclared and (name := undeclared.group(1).rsplit(".", 1)[-1]) in UNSUPPORTED:
        problem = f"{name}: {UNSUPPORTED[name]} is a Kubernetes CEL library mlgate does not support " \
                  "(docs/authoring.md lists what it does)"
    return CompileError(line, column, problem)


def run(program: Any, bound: Any) -> tuple[Any, str | None]:
    """(the plain value, None), or (None, why it could not be evaluated): a runtime error is a value of type
    error in cel-cpp, or a RuntimeError (the comprehension iteration budget, 10,000 per comprehension)."""
    try:
        value = program.eval(bound)
    except RuntimeError as exc:
        return None, str(exc).removesuffix("[INTERNAL]").strip()
    if value.type().name() == "ERROR":
        return None, str(value.value())
    return value.plain_value(), None
