"""YAML with line numbers: the parsed value plus a map from JSON pointer to source line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from mlgate.model import pointer

try:
    from yaml import CSafeLoader as BaseLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as BaseLoader  # type: ignore[assignment]

_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
# Implicit scalars whose constructors are plain functions of one node (no state, no generator).
_PLAIN = frozenset({"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                    "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"})
_TAG_CACHE_MAX = 65_536
_TAG_CACHE_VALUE = 64  # long scalars are rarely repeated; they are not kept
_resolve: Callable[[Any, type, Any, tuple[bool, bool]], str] = BaseLoader.resolve


class SafeLoader(BaseLoader):
    """The safe loader with a memo for implicit scalar tags.

    Without path resolvers (the safe loader has none) the tag of a plain scalar depends on its
    text alone, and manifests repeat the same keys and values on every document.
    """

    _tags: ClassVar[dict[str, str]] = {}

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0]:
            tag = self._tags.get(value)
            if tag is None:
                tag = _resolve(self, kind, value, implicit)
                if len(value) <= _TAG_CACHE_VALUE and len(self._tags) < _TAG_CACHE_MAX:
                    self._tags[value] = tag
            return tag
        return _resolve(self, kind, value, implicit)


class _Unusual(Exception):
    """A node the fast constructor leaves to PyYAML's: aliases, merge keys, explicit or complex tags."""


def lines_of(node: yaml.Node, base: str = "", first_line: int = 1) -> dict[str, int]:
    """Pointer -> 1-based line for every node under `node` (keys point at their key's line)."""
    found = {base: node.start_mark.line + first_line}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = pointer.join(base, str(key_node.value))
            found.update(lines_of(value_node, child, first_line))
            found[child] = key_node.start_mark.line + first_line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.update(lines_of(item, pointer.join(base, index), first_line))
    return found


def line_at(node: yaml.Node, ptr: str, first_line: int = 1) -> int:
    """The line of `ptr`, or of its deepest ancestor present, walking only that path."""
    line = node.start_mark.line + first_line
    for token in pointer.split(ptr):
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if str(key_node.value) == token:
                    line, child = key_node.start_mark.line + first_line, value_node
                    break
        elif isinstance(node, yaml.SequenceNode) and token.isdigit() and int(token) < len(node.value):
            child = node.value[int(token)]
            line = child.start_mark.line + first_line
        if child is None:
            return line
        node = child
    return line


def load_with_node(text: str | bytes) -> tuple[Any, yaml.Node | None]:
    """Parse one document once, keeping the node tree: line numbers later cost a walk, not a second parse."""
    loader = SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        if ("&" not in text) if isinstance(text, str) else (b"&" not in text):
            try:  # no anchor, so no alias: every node is built once, as PyYAML would build it
                return _build(node, loader), node
            except (_Unusual, RecursionError):
                pass
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def _build(node: yaml.Node, loader: Any) -> Any:
    """PyYAML's SafeConstructor result for plain documents, without its per-node bookkeeping."""
    kind = type(node)
    tag = node.tag
    if kind is ScalarNode:
        if tag == _STR:
            return node.value
        if tag in _PLAIN:
            return loader.yaml_constructors[tag](loader, node)
        raise _Unusual
    if kind is MappingNode and tag == _MAP:
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if type(key_node) is not ScalarNode:
                raise _Unusual  # a complex key: PyYAML raises or builds it, let it
            key_tag = key_node.tag
            if key_tag == _STR:
                key = key_node.value
            elif key_tag in _PLAIN:
                key = loader.yaml_constructors[key_tag](loader, key_node)
            else:
                raise _Unusual  # merge (`<<`) and value (`=`) keys rewrite the mapping
            mapping[key] = _build(value_node, loader)
        return mapping
    if kind is SequenceNode and tag == _SEQ:
        return [_build(item, loader) for item in node.value]
    raise _Unusual


def compose_with_lines(text: str, first_line: int = 1) -> tuple[Any, dict[str, int]]:
    value, node = load_with_node(text)
    return value, lines_of(node, "", first_line) if node is not None else {}


def line_for(lines: dict[str, int], ptr: str) -> int | None:
    """The line of `ptr`, or of its nearest ancestor that exists in the source."""
    while True:
        if ptr in lines:
            return lines[ptr]
        if not ptr:
            return None
        ptr = ptr.rsplit("/", 1)[0]
