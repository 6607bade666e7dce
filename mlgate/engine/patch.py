"""The RFC 6902 patch between two JSON documents.

`jsonpatch.make_patch` compares whole documents, which is slow on large manifests where a
mutation touched a few fields. Equal subtrees are skipped here at C speed; only mappings are
walked by hand, and each differing list or scalar is handed to jsonpatch with its prefix.
"""

from __future__ import annotations

import marshal
import math
import pickle
from typing import Any

import jsonpatch

from mlgate.model import pointer

MAX_COPY_DEPTH = 2000  # marshal's own bound (MAX_MARSHAL_STACK_DEPTH), about what it walks


def snapshot(value: Any) -> bytes:
    """A frozen copy of a document, several times faster than copy.deepcopy. marshal, not pickle: it walks
    about 2,000 levels deep where pickle stops at Python's recursion limit, and version 2 writes no back
    references, so equal documents give equal bytes. Raises RecursionError for anything deeper."""
    try:
        return b"m" + marshal.dumps(value, 2)
    except ValueError as exc:  # marshal's own depth bound, or a value it cannot hold (pickle can)
        if "deeply nested" in str(exc):
            raise RecursionError(str(exc)) from exc
        return b"p" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def restore(frozen: bytes) -> Any:
    return marshal.loads(frozen[1:]) if frozen[:1] == b"m" else pickle.loads(frozen[1:])


def diff(before: Any, after: Any, prefix: str = "") -> list[dict[str, Any]]:
    if not _differ(before, after):
        return []
    return _diff(before, after, prefix)


def _differ(before: Any, after: Any) -> bool:
    """`before != after`; for values nested past Python's recursion limit, compared as marshalled bytes."""
    try:
        return bool(before != after)
    except RecursionError:
        return snapshot(before) != snapshot(after)


def _diff(before: Any, after: Any, prefix: str) -> list[dict[str, Any]]:
    """The patch between two values already known to differ (each subtree is compared once per level)."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        if isinstance(before, list) and isinstance(after, list):
            return _diff_lists(before, after, prefix)
        if isinstance(before, float) and isinstance(after, float) and math.isnan(before) and math.isnan(after):
            return []  # a NaN (YAML .nan) and its copy: the same value, though NaN != NaN
        return [{"op": "replace", "path": prefix, "value": after}]
    ops: list[dict[str, Any]] = []
    for key, old in before.items():
        if key not in after:
            ops.append({"op": "remove", "path": pointer.join(prefix, key)})
        elif _differ(old, new := after[key]):  # most subtrees are equal: no pointer
            ops.extend(_diff(old, new, pointer.join(prefix, key)))
    ops.extend({"op": "add", "path": pointer.join(prefix, k), "value": v} for k, v in after.items() if k not in before)
    return ops


def _prefixed(op: dict[str, Any], prefix: str) -> dict[str, Any]:
    op = dict(op)
    op["path"] = prefix + op["path"]
    if "from" in op:
        op["from"] = prefix + op["from"]
    return op


def _diff_lists(before: list[Any], after: list[Any], prefix: str) -> list[dict[str, Any]]:
    """Element by element where the list kept its length or only grew at the end."""
    common = len(before)
    if len(after) < common or (len(after) != common and before != after[:common]):
        return [_prefixed(op, prefix) for op in jsonpatch.make_patch(before, after).patch]
    ops: list[dict[str, Any]] = []
    for index in range(common):
        if _differ(before[index], after[index]):
            ops.extend(_diff(before[index], after[index], pointer.join(prefix, index)))
    ops.extend({"op": "add", "path": pointer.join(prefix, i), "value": after[i]} for i in range(common, len(after)))
    return ops
