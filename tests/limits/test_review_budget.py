"""Each review stays within its budget of work: the calls of one warm `parse_review` + `admit` (the webhook's hot
path, engine included) with the shipped policies, counted by cProfile, per object and endpoint.

A call count is exact and machine-independent, unlike time, so a budget can sit close to the measured figure and
still never flake. Over budget, the failure says by how much and lists the functions that were called most. Under
it by more than the slack, the run says so (a warning in the summary) with the number to write instead.
"""

from __future__ import annotations

import cProfile
import gc
import json
import pstats
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest

from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.model.facts import NO_FACTS
from mlgate_webhook.review import Endpoint, admit, parse_review
from tests.limits.review_objects import OBJECTS

BUDGETS: dict[str, dict[str, int]] = tomllib.loads(
    (Path(__file__).with_name("review_budget.toml")).read_text(encoding="utf-8"))
SHIPPED = load_policy_paths([default_policy_dir()])
SLACK = 0.05  # a budget more than 5 % above the count is worth lowering
TOP = 15
MEASURED: dict[str, int] = {}  # printed at the end of the run by tests/conftest.py


def review_body(obj: dict[str, Any]) -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    resource = {"group": group, "version": version, "resource": obj["kind"].lower() + "s"}
    namespace = obj["metadata"].get("namespace", "ml")
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "budget-0000", "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": obj["metadata"]["name"], "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False}}).encode()


def counted_review(body: bytes, endpoint: Endpoint) -> tuple[int, pstats.Stats, dict[str, Any]]:
    """The calls of the second review: the first fills what is cached once per process (compiled patterns,
    the kind table's lookups), which a webhook pays once, not per review."""
    admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, endpoint)
    # no garbage collection inside the count: the finalizers a collection runs belong to earlier work, and whether
    # one falls inside depends on what the process allocated before (the whole file counted +4..+10 per review)
    gc.collect()
    gc.disable()
    profile = cProfile.Profile()
    try:
        profile.enable()
        admission = admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, endpoint)
        profile.disable()
    finally:
        gc.enable()
    stats = pstats.Stats(profile)
    return stats.total_calls, stats, admission.response  # type: ignore[attr-defined]


def top_functions(stats: pstats.Stats) -> str:
    rows = sorted(stats.stats.items(), key=lambda item: item[1][1], reverse=True)[:TOP]  # type: ignore[attr-defined]
    return "\n".join(f"  {calls:>6}  {Path(file).name}:{line} {name}"
                     for (file, line, name), (_, calls, *_rest) in rows)


CASES = [(name, endpoint) for name in OBJECTS for endpoint in ("validate", "mutate")]


def test_every_budgeted_object_has_a_budget_and_every_budget_an_object():
    assert set(BUDGETS) == set(OBJECTS)
    assert all(set(budget) == {"validate", "mutate"} for budget in BUDGETS.values()), BUDGETS


@pytest.mark.parametrize(("name", "endpoint"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_a_review_stays_within_its_call_budget(name: str, endpoint: Endpoint):
    budget = BUDGETS[name][endpoint]
    calls, stats, response = counted_review(review_body(OBJECTS[name]()), endpoint)
    MEASURED[f"{name} /{endpoint}"] = calls
    assert "uid" in response  # it was judged, not refused as a malformed review
    assert calls <= budget, (
        f"one /{endpoint} review of {name} made {calls} calls, {calls - budget} ({(calls - budget) / budget:.1%}) "
        f"over its budget of {budget} in tests/limits/review_budget.toml; the most called:\n{top_functions(stats)}")
    if calls < budget * (1 - SLACK):
        warnings.warn(f"review budget of {name} /{endpoint} can be lowered: {budget} -> {calls} "
                      "(tests/limits/review_budget.toml)", stacklevel=1)


def test_the_count_does_not_depend_on_the_run():
    body = review_body(OBJECTS["pytorchjob"]())
    assert counted_review(body, "validate")[0] == counted_review(body, "validate")[0]
