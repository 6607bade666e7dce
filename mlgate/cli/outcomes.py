"""One expectation of a PolicyTest suite, judged: what `mlgate test` runs (testsuite.py) and every format renders
(testsuite.py for text and JSON, ci.py for JUnit). Kept apart so that neither of those imports the other's
module for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaseOutcome:
    suite: str
    policy: str
    rule: str
    resource: str
    expected: str
    actual: str
    passed: bool
    detail: str = ""
    file: str = ""  # the suite file, and the line of the expectation in it
    line: int = 0
