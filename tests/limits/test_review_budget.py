"""Each review stays within its budget of work: the calls of one warm `parse_review` + `admit` (the webhook's hot
path, engine included) with the shipped policies, counted by cProfile, per object and endpoint.

A call count is exact and machine-independent, unlike time, so a budget can sit at the measured figure and never
flake. It is counted in a fresh process with a fixed hash seed (review_count.py says why). Over budget, the failure
says by how much and lists the functions that were called most. Under it by more than the slack, the run says so
(a warning in the summary) with the number to write instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.limits.review_objects import OBJECTS

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
BUDGETS: dict[str, dict[str, int]] = tomllib.loads((HERE / "review_budget.toml").read_text(encoding="utf-8"))
SLACK = 0.05  # a budget more than 5 % above the count is worth lowering
MEASURED: dict[str, int] = {}  # printed at the end of the run by tests/conftest.py
CASES = [(name, endpoint) for name in OBJECTS for endpoint in ("validate", "mutate")]


def count_in_a_fresh_process(seed: str = "0") -> dict[str, dict[str, Any]]:
    done = subprocess.run([sys.executable, str(HERE / "review_count.py")], cwd=ROOT, capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONHASHSEED": seed})
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def counted() -> dict[str, dict[str, Any]]:
    return count_in_a_fresh_process()


def test_every_budgeted_object_has_a_budget_and_every_budget_an_object():
    assert set(BUDGETS) == set(OBJECTS)
    assert all(set(budget) == {"validate", "mutate"} for budget in BUDGETS.values()), BUDGETS


@pytest.mark.parametrize(("name", "endpoint"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_a_review_stays_within_its_call_budget(counted: dict[str, dict[str, Any]], name: str, endpoint: str):
    budget = BUDGETS[name][endpoint]
    case = counted[f"{name} /{endpoint}"]
    calls = case["calls"]
    MEASURED[f"{name} /{endpoint}"] = calls
    assert case["judged"]  # it was judged, not refused as a malformed review
    assert calls <= budget, (
        f"one /{endpoint} review of {name} made {calls} calls, {calls - budget} ({(calls - budget) / budget:.1%}) "
        f"over its budget of {budget} in tests/limits/review_budget.toml; the most called:\n{case['top']}")
    if calls < budget * (1 - SLACK):
        warnings.warn(f"review budget of {name} /{endpoint} can be lowered: {budget} -> {calls} "
                      "(tests/limits/review_budget.toml)", stacklevel=1)


def test_the_count_is_the_same_in_every_fresh_process(counted: dict[str, dict[str, Any]]):
    again = count_in_a_fresh_process()
    assert {k: v["calls"] for k, v in again.items()} == {k: v["calls"] for k, v in counted.items()}
