"""RFC 6901 JSON pointers: the one way field paths are written in mlgate."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


def escape(token: str | int) -> str:
    """Escape one reference token (`~` first, then `/`)."""
    text = str(token)
    if "~" in text or "/" in text:
        return text.replace("~", "~0").replace("/", "~1")
    return text


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~") if "~" in token else token


def join(base: str, *tokens: str | int) -> str:
    """Append reference tokens to a pointer: join("/spec", "a/b") == "/spec/a~1b"."""
    for token in tokens:  # escape(), inlined: every finding's path and every patch is built here
        text = str(token)
        base += "/" + (text.replace("~", "~0").replace("/", "~1") if "~" in text or "/" in text else text)
    return base


def split(pointer: str) -> list[str]:
    return list(_tokens(pointer))


@lru_cache(maxsize=4096)
def _tokens(pointer: str) -> tuple[str, ...]:
    # rules and extraction split the same few pointers for every object
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must start with '/': {pointer!r}")
    return tuple(unescape(t) for t in pointer[1:].split("/"))


def resolve(doc: Any, pointer: str) -> Any:
    """The value at pointer, or None where any step is missing."""
    node = doc
    for token in _tokens(pointer):
        if isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
