"""The CEL rules of a CRD schema (`x-kubernetes-validations`), evaluated with cel-python as the API server
evaluates them on CREATE.

Each rule runs where its node's value is present, with `self` bound to that value after defaulting. Rules
that read `oldSelf` are transition rules: a create has no old object, so they do not run (one with
`optionalOldSelf` would, and is reported as not checked). A false rule is refused at the node, or at its
`fieldPath`, with its `messageExpression`, its `message` or `failed rule: <rule>`, and its `reason`
(FieldValueInvalid when unset). A rule that reads a field which is not there is refused too, as the API
server refuses it ("no such key").

cel-python implements standard CEL. Kubernetes adds libraries (strings, lists, regex, quantities, URLs, IPs);
the simple list and string functions are in FUNCTIONS below; a rule that needs another one, or that
cel-python cannot compile, is reported as not checked, never as passed or refused.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import orjson

from mlgate.loading.violations import Violation
from mlgate.model import pointer

# the CEL `reason` of a rule, as the API server's error types (apiextensions `ValidationRule.reason`)
REASONS = {"FieldValueInvalid": "invalid value", "FieldValueForbidden": "forbidden",
           "FieldValueRequired": "required value", "FieldValueDuplicate": "duplicate value"}
_OLD_SELF = re.compile(r"\boldSelf\b")
# one step of a rule's fieldPath: `.name` or `['name']`
_FIELD_STEP = re.compile(r"\.([A-Za-z_$][A-Za-z0-9_$-]*)|\['((?:[^'\\]|\\.)*)'\]")
_NOT_THERE = ("no such member", "no such key")
_SELF = re.compile(r"\bself\b")
_SELF_FIELD = re.compile(r"\bself\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")  # `self.name`, not `self.all(`
_HAS_FIELD = re.compile(r"\bhas\(\s*self\.([A-Za-z_][A-Za-z0-9_]*)\s*\)")
MEMO_MAX = 20_000


def has_rules(node: dict[str, Any]) -> bool:
    """Whether the schema node, or any node under it, has CEL rules."""
    if node.get("x-kubernetes-validations"):
        return True
    children = [*(node.get("properties") or {}).values(), node.get("items"), node.get("additionalProperties")]
    return any(has_rules(child) for child in children if isinstance(child, dict))


class Rules:
    """Compiled rules, cached by their text: the same CRD judges every object of its kind."""

    def __init__(self) -> None:
        import celpy

        self.celpy: Any = celpy  # typed only in part
        self.env = celpy.Environment()
        self.programs: dict[str, Any] = {}  # rule text: a program, or the reason it could not be compiled
        # (rule text, value as canonical JSON): the outcome. cel-python interprets its parse tree at some 300 µs a
        # rule, and manifests repeat the same resources, scheduling and checkpoint blocks
        self.outcomes: dict[tuple[str, bytes], tuple[bool | str | None, str | None]] = {}

    def check(self, schema: dict[str, Any], value: Any, found: list[Violation],
              unchecked: list[tuple[str, str]]) -> None:
        self._walk(schema, value, "", found, unchecked)

    def _walk(self, node: dict[str, Any], value: Any, path: str, found: list[Violation],
              unchecked: list[tuple[str, str]]) -> None:
        if value is None:
            return
        for rule in node.get("x-kubernetes-validations") or ():
            self._one(rule, value, path, found, unchecked)
        if isinstance(value, dict):
            properties = node.get("properties") or {}
            extra = node.get("additionalProperties")
            for key, item in value.items():
                child = properties.get(key) or (extra if isinstance(extra, dict) else None)
                if child is not None:
                    self._walk(child, item, pointer.join(path, key), found, unchecked)
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for index, item in enumerate(value):
                self._walk(node["items"], item, pointer.join(path, index), found, unchecked)

    def _one(self, rule: dict[str, Any], value: Any, path: str, found: list[Violation],
             unchecked: list[tuple[str, str]]) -> None:
        text = str(rule.get("rule", ""))
        if _OLD_SELF.search(text):
            if rule.get("optionalOldSelf"):
                _once(unchecked, f"{_field(path)}: the rule `{text}` reads an optional oldSelf, which cel-python "
                                 "does not implement")
            return  # a transition rule: nothing to compare with on create
        where = path + _pointer(str(rule.get("fieldPath", "")))
        outcome, problem = self._evaluate(text, _read_by(text, value))
        if problem is not None:
            _once(unchecked, f"{_field(path)}: the rule `{text}` {problem}")
            return
        reason = REASONS.get(str(rule.get("reason") or "FieldValueInvalid"), "invalid value")
        if isinstance(outcome, str):  # a runtime error the API server refuses too
            found.append(Violation("cel", where, reason, f"{outcome} evaluating rule: {text}"))
        elif outcome is False:
            found.append(Violation("cel", where, reason, self._message(rule, value, text)))

    def _evaluate(self, text: str, value: Any) -> tuple[bool | str | None, str | None]:
        """(True or False, or the text of a CEL runtime error; None) or (None, why it could not be evaluated)."""
        try:
            key = (text, orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        except TypeError:  # an integer past 64 bits: evaluated every time
            return self._run(text, value)
        outcome = self.outcomes.get(key)
        if outcome is None:
            if len(self.outcomes) >= MEMO_MAX:
                self.outcomes.clear()
            outcome = self.outcomes[key] = self._run(text, value)
        return outcome

    def _run(self, text: str, value: Any) -> tuple[bool | str | None, str | None]:
        program = self._program(text)
        if isinstance(program, str):
            return None, program
        try:
            result = program.evaluate({"self": self.celpy.json_to_cel(value)})
        except self.celpy.CELEvalError as exc:
            result = exc
        except Exception as exc:  # cel-python's own failure on a rule the API server compiled
            return None, f"could not be evaluated here ({type(exc).__name__})"
        if isinstance(result, self.celpy.CELEvalError):
            message = str(result.args[0]) if result.args else str(result)
            if message.startswith(_NOT_THERE):
                return message, None
            missing = result.args[2][0] if len(result.args) > 2 and result.args[2] else None
            if message.startswith("undeclared reference") and missing:
                return None, f"needs the CEL function {missing}(), which cel-python does not have"
            return None, f"could not be evaluated here ({message.splitlines()[0][:100]})"
        if not isinstance(result, self.celpy.celtypes.BoolType):
            return None, f"gave {type(result).__name__}, not a bool"
        return bool(result), None

    def _program(self, text: str) -> Any:
        if text not in self.programs:
            try:
                self.programs[text] = self.env.program(self.env.compile(text), functions=FUNCTIONS)
            except Exception as exc:  # cel-python's grammar lacks some of CEL's newer syntax
                self.programs[text] = f"could not be compiled here ({type(exc).__name__})"
        return self.programs[text]

    def _message(self, rule: dict[str, Any], value: Any, text: str) -> str:
        expression = rule.get("messageExpression")
        if expression:
            program = self._program(str(expression))
            if not isinstance(program, str):
                try:
                    said = program.evaluate({"self": self.celpy.json_to_cel(value)})
                except Exception:  # the API server falls back to message too
                    said = None
                if isinstance(said, str) and said.strip():
                    return str(said)
        return str(rule.get("message") or f"failed rule: {text}")


def _read_by(text: str, value: Any) -> Any:
    """The part of `value` a rule reads, so that its outcomes are reused across objects that differ elsewhere:
    when it reads `self` only as `self.name`, those fields alone; a field it only tests with `has()`, as present."""
    if not isinstance(value, dict):
        return value
    fields = _SELF_FIELD.findall(text)
    if len(fields) != len(_SELF.findall(text)) or any("__" in f for f in fields):  # `__dash__` escapes a name
        return value
    tested = _HAS_FIELD.findall(text)
    return {name: True if tested.count(name) == fields.count(name) else value[name]
            for name in set(fields) if name in value}


def _once(unchecked: list[tuple[str, str]], reason: str) -> None:
    if ("cel", reason) not in unchecked:
        unchecked.append(("cel", reason))


def _field(path: str) -> str:
    return path or "/"


def _pointer(field_path: str) -> str:
    """A rule's fieldPath (`.spec.name`, `.labels['app.kubernetes.io/name']`) as a JSON pointer suffix."""
    tokens = [m.group(1) if m.group(1) is not None else m.group(2).replace("\\'", "'")
              for m in _FIELD_STEP.finditer(field_path)]
    return pointer.join("", *tokens)


def _sorted(items: Any) -> Any:
    from celpy import celtypes

    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def _text(function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        from celpy import celtypes

        result = function(*args)
        return celtypes.StringType(result) if isinstance(result, str) else result

    return wrapped


# Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library, cel-go ext strings): the simple ones
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "lowerAscii": _text(lambda s: s.lower()),
    "upperAscii": _text(lambda s: s.upper()),
    "trim": _text(lambda s: s.strip()),
    "isSorted": _sorted,
    "sum": lambda items: sum(items[1:], items[0]) if items else 0,
    "min": min,
    "max": max,
}
