"""A refusal by a CRD's schema or CEL rules, as schemas.py and cel_rules.py both report it: apart from both, so
that the catalog (schemas.py) can run the CEL rules without cel_rules.py importing the catalog back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Violation:
    """One refusal: `check` is "schema" or "cel"; `reason` the API server's error type, lower case."""

    check: str
    path: str
    reason: str
    detail: str
    fix: str = ""
