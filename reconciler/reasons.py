"""The status vocabulary the passes share: why a condition (or an Event) says what it says.

Pure (no client): desired_inference.py, whose desired state imports no Kubernetes client, refuses with it too.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ConditionState", "Reason"]


class Reason(NamedTuple):
    """A condition's (or an Event's) reason, CamelCase and stable, and its message, for people."""

    reason: str
    message: str


class ConditionState(NamedTuple):
    """A condition's status ("True", "False") with its reason and message."""

    status: str
    reason: str
    message: str
