"""Pod Security conformance: the fixtures of k8s.io/pod-security-admission, fetched by the control-plane tooling.

Without the module the tests skip and name the script that fetches it; in CI (CI=true) they fail instead.
The session ends with one line: how many upstream fixtures mlgate judged as upstream does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from psa_fixtures import CI, FETCH_COMMAND, MODULE, NEWEST_MINOR, TALLY, testdata


@pytest.fixture(scope="session")
def upstream_testdata() -> Path:
    folder = testdata()
    if not folder.is_dir():
        why = f"{MODULE} is not fetched ({folder} is missing): run {FETCH_COMMAND}"
        TALLY.skipped = why
        if CI:
            pytest.fail(f"CI=true and Pod Security conformance is mandatory: {why}", pytrace=False)
        pytest.skip(why)
    return folder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.skipped:
        terminalreporter.write_line(f"pod-security conformance: not run: {TALLY.skipped}", yellow=True)
    elif TALLY.judged:
        agreed = TALLY.judged - len(TALLY.mismatches)
        terminalreporter.write_line(
            f"pod-security conformance: {agreed} of {TALLY.judged} upstream fixtures judged as upstream does "
            f"({MODULE}, versions v1.0-v1.{NEWEST_MINOR}, baseline and restricted)",
            green=not TALLY.mismatches, red=bool(TALLY.mismatches))
