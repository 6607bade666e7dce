"""Kubernetes manifests from files, directories and stdin, one document at a time.

Streams are split on `---` lines before parsing, so one broken document never hides the
others, and memory stays bounded by the largest document, not the largest file.
Parsing uses libyaml (CSafeLoader) when present. JSON files go through `json`, so that they parse
exactly as JSON; libyaml then composes them too (JSON is YAML flow syntax), for line numbers only.
"""

from __future__ import annotations

import codecs
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from mlgate.loading.linemap import NotFinite, SafeDumper, compose_node, line_at, load_with_node

MAX_DOCUMENT_BYTES = 3 * 1024 * 1024  # the API server refuses objects well below this
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_SEPARATOR = re.compile(rb"^---(\s|$)")
_END = re.compile(rb"^\.\.\.\s*$")
_MARKERS = (b"---", b"...")  # a line that starts otherwise is content: no regex for it


@dataclass
class Document:
    source: str
    index: int  # position in its stream, from 0
    line: int  # line where the document starts, from 1
    text: str = ""
    data: dict[str, Any] | None = None
    error: str | None = None
    error_line: int | None = None  # the line `error` is about, which reports point at
    node: yaml.Node | None = field(default=None, repr=False)  # kept for line numbers

    def line_of(self, ptr: str) -> int:
        """The source line of a field (or of its nearest ancestor present in the source)."""
        return line_at(self.node, ptr, self.line) if self.node is not None else self.line

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


class InputError(Exception):
    """A path that cannot be read at all (missing, unreadable): `path: problem`, both kept as data."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def expand(paths: Iterable[str]) -> Iterator[str]:
    """Files as given; directories walked recursively for manifest files, in sorted order,
    skipping hidden files and directories."""
    for raw in paths:
        if raw == "-":
            yield raw
            continue
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                # hidden entries hold copies: a ConfigMap mount keeps its files in `..<timestamp>/`
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(MANIFEST_SUFFIXES) and not name.startswith("."):
                        yield os.path.join(root, name)
        elif path.exists():
            yield raw
        else:
            raise InputError(raw, "no such file or directory")


def read_documents(paths: Iterable[str]) -> Iterator[Document]:
    for source in expand(paths):
        if source == "-":
            yield from parse_stream(sys.stdin.buffer, "<stdin>")
            continue
        try:
            with open(source, "rb") as handle:
                yield from parse_stream(handle, source)
        except OSError as exc:
            raise InputError(source, str(exc.strerror or exc)) from exc


def parse_stream(handle: IO[bytes], source: str) -> Iterator[Document]:
    for index, (line, raw, oversize) in enumerate(document_chunks(handle)):
        if oversize:
            yield Document(source, index, line, error=(
                f"document is larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB; "
                "the API server would refuse it"))
            continue
        document = parse_document(raw, source, index, line, json_only=source.endswith(".json"))
        if document is not None:
            yield document


def parse_document(raw: bytes, source: str, index: int, line: int, json_only: bool = False) -> Document | None:
    """One document; None for an empty one (only comments or whitespace)."""
    doc = Document(source, index, line)
    try:
        doc.text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = line + raw[: exc.start].count(b"\n")
        doc.error_line, doc.error = bad_line, f"line {bad_line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        return doc
    try:
        if json_only:
            data = json.loads(doc.text, parse_constant=_not_finite, parse_float=_finite)
            doc.node = compose_node(doc.text)
        else:
            data, doc.node = load_with_node(doc.text, line)
    except json.JSONDecodeError as exc:
        doc.error_line = line + exc.lineno - 1
        doc.error = f"column {exc.colno}: invalid JSON: {exc.msg}"
        return doc
    except NotFiniteJson as exc:
        doc.error_line, doc.error = line, str(exc)
        return doc
    except yaml.YAMLError as exc:
        doc.error_line, doc.error = _yaml_error(exc, line)
        return doc
    if data is None:
        return None
    if not isinstance(data, dict):
        doc.error_line, doc.error = line, f"document is a {type(data).__name__}, not a Kubernetes object"
    elif not data.get("kind") or not data.get("apiVersion"):
        missing = "kind" if not data.get("kind") else "apiVersion"
        doc.error_line, doc.error = line, f"document has no {missing}"
    else:
        doc.data = data
    return doc


class NotFiniteJson(ValueError):
    """A JSON number the API server refuses (NaN, Infinity, or too large for a float)."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFiniteJson(f"{text} is not a finite number, which the API server refuses")
    return value


def _not_finite(text: str) -> float:
    raise NotFiniteJson(f"{text} is not a finite number, which the API server refuses")


def _yaml_error(exc: yaml.YAMLError, first_line: int) -> tuple[int, str]:
    """(the line, the message) of a YAML error."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    line = first_line + mark.line if mark else first_line
    # the line is the caller's, printed as `file:line` beside the message; the message adds only the column
    where = f"column {mark.column + 1}: " if mark else ""
    detail = f"{context}, {problem}" if context else problem
    return line, f"{where}{detail}" if isinstance(exc, NotFinite) else f"{where}invalid YAML: {detail}"


def document_chunks(handle: IO[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """(first line, raw bytes, oversize) per document, reading line by line.

    A separator with content after it (`--- !!map`, `--- {a: 1}`) stays in its document, whole, so
    that the parser sees every line and column where the file has it; a comment after it is dropped.
    """
    buffer: list[bytes] = []
    size = 0
    oversize = False
    start = 1
    for number, text in enumerate(_without_bom(handle), start=1):
        if text[:3] in _MARKERS and (_SEPARATOR.match(text) or _END.match(text)):
            if buffer or oversize:
                yield start, b"".join(buffer), oversize
            buffer, size, oversize = [], 0, False
            start = number + 1
            rest = text[3:].lstrip() if text.startswith(b"---") else b""
            if rest and not rest.startswith(b"#"):
                buffer, size, start = [text], len(text), number
            continue
        size += len(text)
        if size > MAX_DOCUMENT_BYTES:
            oversize, buffer = True, []
        elif not oversize:
            buffer.append(text)
    if buffer or oversize:
        yield start, b"".join(buffer), oversize


def _without_bom(handle: IO[bytes]) -> Iterator[bytes]:
    """The lines of `handle`, the first without a UTF-8 byte order mark: `json` refuses one."""
    lines = iter(handle)
    first = next(lines, None)
    return lines if first is None else itertools.chain((first.removeprefix(codecs.BOM_UTF8),), lines)


def dump_yaml(documents: Iterable[dict[str, Any]], out: IO[str]) -> None:
    yaml.dump_all(list(documents), out, Dumper=SafeDumper, sort_keys=False, default_flow_style=False,
                  explicit_start=True)
