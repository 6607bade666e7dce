"""YAML with line numbers: the parsed value plus a map from JSON pointer to source line."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from mlgate.model import pointer

try:
    from yaml import CSafeLoader as BaseLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as BaseLoader  # type: ignore[assignment]

_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MERGE, _TIMESTAMP = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:timestamp"
MAX_EXPANDED_NODES = 1_000_000  # a 3 MiB document of real objects holds far fewer values
# Implicit scalars whose constructors are plain functions of one node (no state, no generator).
_PLAIN = frozenset({"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                    "tag:yaml.org,2002:float"})
_TAG_CACHE_MAX = 65_536
_TAG_CACHE_VALUE = 64  # long scalars are rarely repeated; they are not kept
_resolve: Callable[[Any, type, Any, tuple[bool, bool]], str] = BaseLoader.resolve


class SafeLoader(BaseLoader):
    """The safe loader with a memo for implicit scalar tags, and timestamps left as text.

    Without path resolvers (the safe loader has none) the tag of a plain scalar depends on its
    text alone, and manifests repeat the same keys and values on every document.
    Kubernetes (sigs.k8s.io/yaml) reads an unquoted `2024-01-01` as a string, and a date object
    would not survive JSON output, so no scalar resolves to a timestamp.
    """

    first_line = 1  # where the document starts in its file: duplicate-key messages quote absolute lines
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


def _as_text(loader: SafeLoader, node: ScalarNode) -> str:
    return str(node.value)


SafeLoader.yaml_implicit_resolvers = {  # a copy: PyYAML's own loaders keep their timestamps
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in BaseLoader.yaml_implicit_resolvers.items()
}
SafeLoader.add_constructor(_TIMESTAMP, _as_text)  # an explicit `!!timestamp` stays text too
# YAML 1.1 wants a dot in a float; the API server's YAML (go-yaml, `yamlStyleFloat`) reads `1e3` as 1000 and
# refuses `1e400`, so such a scalar is a float here too, not text
EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$")
SafeLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))


class SafeDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting the strings go-yaml would read as numbers (`"3e-5"`): what mlgate writes,
    kubectl reads back with the same types."""


SafeDumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789"))


class NotFinite(ConstructorError):
    """A number the API server refuses: `.inf`, `.nan`, one too large for a float (`1e400`) or an integer past
    64 bits."""


_construct_float = BaseLoader.yaml_constructors["tag:yaml.org,2002:float"]


def _finite_float(loader: SafeLoader, node: ScalarNode) -> float:
    value = _construct_float(loader, node)
    if not math.isfinite(value):
        raise NotFinite(None, None, f"{node.value} is not a finite number, which the API server refuses",
                        node.start_mark)
    return float(value)


SafeLoader.add_constructor("tag:yaml.org,2002:float", _finite_float)
_construct_int = BaseLoader.yaml_constructors["tag:yaml.org,2002:int"]
INT64 = 2**63


def _int64(loader: SafeLoader, node: ScalarNode) -> int:
    value = int(_construct_int(loader, node))
    if not -INT64 <= value < INT64:  # no Kubernetes integer field holds it; JSON would read it back as a float
        raise NotFinite(None, None, f"{node.value} is out of the range of a 64-bit integer, which the API server "
                        "refuses", node.start_mark)
    return value


SafeLoader.add_constructor("tag:yaml.org,2002:int", _int64)


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
            # from the end: JSON keeps the last of repeated keys, and merged keys come before the own ones
            for key_node, value_node in reversed(node.value):
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


def load_with_node(text: str | bytes, first_line: int = 1) -> tuple[Any, yaml.Node | None]:
    """Parse one document once, keeping the node tree: line numbers later cost a walk, not a second parse.

    A key repeated in one mapping raises ConstructorError, as kubectl refuses it (go-yaml: "already set
    in map"); `first_line` makes the line of the first occurrence in its message absolute.
    """
    loader = SafeLoader(text)
    loader.first_line = first_line
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        if ("&" not in text) if isinstance(text, str) else (b"&" not in text):
            try:  # no anchor, so no alias: every node is built once, as PyYAML would build it
                return _build(node, loader), node
            except (_Unusual, RecursionError):
                pass
        _check_expansion(node)  # before anything walks the aliases as copies
        _check_every_mapping(node, loader)  # PyYAML's constructor keeps the last of repeated keys
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def compose_node(text: str) -> yaml.Node | None:
    """The node tree alone, for the line numbers of a document whose value is parsed elsewhere (JSON).

    None when YAML cannot read the text: valid JSON it refuses is rare (a tab before the first brace,
    a control character in a string), and costs line numbers, not the document.
    """
    loader = SafeLoader(text)
    try:
        return loader.get_single_node()
    except yaml.YAMLError:
        pass
    finally:
        loader.dispose()
    try:  # libyaml refuses JSON's surrogate-pair escapes ("\ud83d\ude00"); PyYAML's own scanner reads them
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


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
        if len(mapping) != len(node.value):
            _check_unique(node, loader)
        return mapping
    if kind is SequenceNode and tag == _SEQ:
        return [_build(item, loader) for item in node.value]
    raise _Unusual


def _check_unique(node: yaml.Node, loader: SafeLoader) -> None:
    """ConstructorError at the second of two equal keys of `node`; merge keys (`<<`) may repeat."""
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if type(key_node) is not ScalarNode or key_node.tag == _MERGE:
            continue  # complex keys are PyYAML's to build or refuse
        first = seen.setdefault(_key(key_node, loader), key_node)
        if first is not key_node:
            line = first.start_mark.line + loader.first_line
            raise ConstructorError(None, None, f"duplicate key {key_node.value!r} (first on line {line})",
                                   key_node.start_mark)


def _key(node: ScalarNode, loader: SafeLoader) -> Any:
    """A scalar key as the mapping will hold it; explicitly tagged keys compare by tag and text."""
    if node.tag == _STR:
        return node.value
    if node.tag in _PLAIN:
        return loader.yaml_constructors[node.tag](loader, node)
    return node.tag, node.value


def _check_every_mapping(root: yaml.Node, loader: SafeLoader) -> None:
    """`_check_unique` on each mapping once, in document order, without recursion (aliases may loop)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            _check_unique(node, loader)
            stack.extend(child for pair in reversed(node.value) for child in reversed(pair))
        elif isinstance(node, SequenceNode):
            stack.extend(reversed(node.value))


def _check_expansion(root: yaml.Node) -> None:
    """ConstructorError for aliases that expand the document past MAX_EXPANDED_NODES, or into itself.

    PyYAML shares an aliased value, but JSON, the API server and every walk over the object copy it:
    nine levels of nine aliases are 387 million strings ("billion laughs"). go-yaml, under kubectl,
    refuses such documents too ("excessive aliasing").
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, MappingNode) else (
            node.value if isinstance(node, SequenceNode) else [])
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_EXPANDED_NODES:
                raise ConstructorError(None, None, f"excessive aliasing: the document expands to more than "
                                       f"{MAX_EXPANDED_NODES:,} values", root.start_mark)
            continue
        if key in open_nodes:
            raise ConstructorError(None, None, "an alias refers to a value that contains it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def compose_with_lines(text: str, first_line: int = 1) -> tuple[Any, dict[str, int]]:
    value, node = load_with_node(text, first_line)
    return value, lines_of(node, "", first_line) if node is not None else {}


def line_for(lines: dict[str, int], ptr: str) -> int | None:
    """The line of `ptr`, or of its nearest ancestor that exists in the source."""
    while True:
        if ptr in lines:
            return lines[ptr]
        if not ptr:
            return None
        ptr = ptr.rsplit("/", 1)[0]
