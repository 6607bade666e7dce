"""RFC 6901 JSON pointers: the one way field paths are written in mlgate."""

from __future__ import annotations

from typing import Any


def escape(token: str | int) -> str:
    """Escape one reference token (`~` first, then `/`)."""
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def join(base: str, *tokens: str | int) -> str:
    """Append reference tokens to a pointer: join("/spec", "a/b") == "/spec/a~1b"."""
    return base + "".join("/" + escape(t) for t in tokens)


def split(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    return [unescape(t) for t in pointer[1:].split("/")]


def resolve(doc: Any, pointer: str) -> Any:
    """The value at pointer, or None where any step is missing."""
    node = doc
    for token in split(pointer):
        if isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
