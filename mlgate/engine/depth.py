"""Objects nested deeper than the engine can walk are refused with a finding, never a RecursionError.

Copies of an object are made with `marshal` (its own depth bound, about 2,000 levels) and the engine's
comparisons recurse in C; Python's recursion limit stops those somewhere below 1,000 levels. Kubernetes
manifests are a few dozen levels deep, so only a free-form field written to break things gets here: it is
refused, naming the deepest path, rather than crashing a rule or being silently left unmutated.
"""

from __future__ import annotations

from typing import Any

from mlgate.model import pointer
from mlgate.model.results import Action, Finding, Outcome, RuleResult

POLICY, RULE = "mlgate", "input.depth"
SHOWN_TOKENS = 12  # of the deepest path: enough to find the field, short enough for a message


def deepest(obj: Any) -> tuple[int, list[str]]:
    """The nesting depth of `obj` and the path to its deepest value, walked without recursion. Each node keeps
    only a link to its parent's step, so a path is spelled out once, for the deepest node, not at every level."""
    steps: list[tuple[int, str]] = [(-1, "")]  # (parent step, key) of every container visited
    deepest_step, best = 0, 0
    stack: list[tuple[Any, int, int]] = [(obj, 0, 0)]  # (node, depth, its step)
    while stack:
        node, depth, step = stack.pop()
        if depth > best:
            best, deepest_step = depth, step
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            steps.append((step, str(key)))
            stack.append((value, depth + 1, len(steps) - 1))
    path: list[str] = []
    while deepest_step > 0:
        deepest_step, key = steps[deepest_step]
        path.append(key)
    return best, path[::-1]


def too_deep(obj: Any) -> RuleResult:
    depth, path = deepest(obj)
    shown = pointer.join("", *path[:SHOWN_TOKENS]) + ("/…" if len(path) > SHOWN_TOKENS else "")
    finding = Finding(shown, "object nested too deep", f"the object is nested {depth} levels deep, more than "
                      "mlgate can judge", "flatten the field, or store it as a string")
    return RuleResult(POLICY, RULE, Action.DENY, Outcome.FAIL, (finding,))
