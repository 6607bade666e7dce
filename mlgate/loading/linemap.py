"""YAML with line numbers: the parsed value plus a map from JSON pointer to source line."""

from __future__ import annotations

from typing import Any

import yaml

from mlgate.model import pointer

try:
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader  # type: ignore[assignment]


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
        return (None, None) if node is None else (loader.construct_document(node), node)
    finally:
        loader.dispose()


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
