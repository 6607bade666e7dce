"""MutatingAdmissionPolicy's object syntax, read as plain CEL maps.

A MAP mutation builds its result with typed object construction: `JSONPatch{op: "add", path: "/x", value: 1}`
and `Object{metadata: Object.metadata{labels: {"a": "b"}}}` (k8s.io/apiserver
pkg/admission/plugin/policy/mutating/patch, json_patch.go and smd.go; kubernetes.io/docs/reference/
access-authn-authz/mutating-admission-policy). cel-expr-python declares no such types, so before compiling,
each `JSONPatch{...}` and `Object[.field...]{...}` is rewritten into the map literal it stands for (`{'op': "add",
...}`), and `jsonpatch.escapeKey(k)` into `(k).replace('~', '~0').replace('/', '~1')` (RFC 6901 escaping, as
the Kubernetes function does). String literals are never touched. `origin` maps each character of the result back
to the expression as written, so a compile error is reported at the author's own column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TYPE_NAMES = ("JSONPatch", "Object")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONSTRUCTION = re.compile(r"(?:\.[A-Za-z_][A-Za-z0-9_]*)*\s*\{")
_FIELD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*:")
_ESCAPE_KEY = re.compile(r"\s*\.\s*escapeKey\s*\(")
_STRING = re.compile(r"[rRbB]{0,2}('''|\"\"\"|'|\")")


@dataclass(frozen=True)
class Rewritten:
    text: str
    origin: tuple[int, ...]  # for each character of `text`, its index in the expression as written
    code: str  # `text` with the bodies of string literals blanked: where names are read

    def position(self, line: int, column: int, written: str) -> tuple[int, int]:
        """(line, column), both 1-based, in the expression as written, of a position in `text`."""
        starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]
        at = starts[min(line, len(starts)) - 1] + column - 1
        source = self.origin[min(max(at, 0), len(self.origin) - 1)] if self.origin else 0
        before = written[:source]
        return before.count("\n") + 1, source - (before.rfind("\n") + 1) + 1


class _Out:
    """The rewritten text as it grows, with each character's origin and the text with string bodies blanked."""

    def __init__(self, text: str) -> None:
        self.text, self.out, self.origin, self.code = text, list[str](), list[int](), list[str]()

    def emit(self, chunk: str, at: int) -> None:
        self.out.extend(chunk)
        self.code.extend(chunk)
        self.origin.extend([at] * len(chunk))

    def copy(self, start: int, end: int, *, literal: bool = False) -> None:
        self.out.extend(self.text[start:end])
        self.code.extend(" " * (end - start) if literal else self.text[start:end])
        self.origin.extend(range(start, end))

    def done(self) -> Rewritten:
        return Rewritten("".join(self.out), tuple(self.origin), "".join(self.code))


def rewrite(text: str) -> Rewritten:
    out = _Out(text)
    stack: list[str] = []  # "struct", "escape" or "other", one per open bracket
    expect_field = False  # just after a struct's `{` or `,`
    i = 0
    while i < len(text):
        if expect_field and (field := _FIELD.match(text, i)):
            out.copy(i, field.start(1))
            out.emit(f"'{field.group(1)}'", field.start(1))
            out.copy(field.end(1), field.end())
            i, expect_field = field.end(), False
            continue
        expect_field = False
        if (string := _STRING.match(text, i)) and (string.start(1) == i or not _word_before(text, i)):
            end = _string_end(text, string.end(), string.group(1), raw="r" in string.group(0)[:2].lower())
            out.copy(i, end, literal=True)
            i = end
        elif (ident := _IDENT.match(text, i)) and not _word_before(text, i):
            i, opened = _identifier(text, ident, out)
            if opened:
                stack.append(opened)
                expect_field = opened == "struct"
        else:
            char = text[i]
            if char in "([{":
                stack.append("other")
            elif char in ")]}" and stack and stack.pop() == "escape":
                out.emit(")" + ".replace('~', '~0').replace('/', '~1')", i)
                i += 1
                continue
            elif char == "," and stack and stack[-1] == "struct":
                expect_field = True
            out.copy(i, i + 1)
            i += 1
    return out.done()


def _identifier(text: str, ident: re.Match[str], out: _Out) -> tuple[int, str]:
    """Copy or rewrite one identifier: (where the scan goes on, the bracket it opened, if any)."""
    name, after = ident.group(0), ident.end()
    if _previous(text, ident.start()) != ".":
        if name in TYPE_NAMES and (made := _CONSTRUCTION.match(text, after)):
            out.emit("{", made.end() - 1)
            return made.end(), "struct"
        if name == "jsonpatch" and (call := _ESCAPE_KEY.match(text, after)):
            out.emit("(", call.end() - 1)
            return call.end(), "escape"
    out.copy(ident.start(), after)
    return after, ""


def _word_before(text: str, at: int) -> bool:
    return at > 0 and (text[at - 1].isalnum() or text[at - 1] == "_")


def _previous(text: str, at: int) -> str:
    before = text[:at].rstrip()
    return before[-1] if before else ""


def _string_end(text: str, start: int, quote: str, *, raw: bool) -> int:
    """The index just past the literal whose body starts at `start`; the end of the text if it never closes
    (the parser then reports it)."""
    i = start
    while i < len(text):
        if not raw and text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        i += 1
    return len(text)
