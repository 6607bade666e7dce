"""Counts the calls of one warm review per budgeted object and endpoint, and prints them as JSON.

    python tests/limits/review_count.py        (run by test_review_budget.py with PYTHONHASHSEED=0)

Run in a process of its own with a fixed hash seed: the order in which sets of strings iterate depends on the seed,
and a rule that stops at the first match in such a set makes a few more or fewer calls (up to 1% was seen), and a
process that has run other tests first has warmed caches a fresh webhook would not have. A fresh process with one
seed gives the same count on every run and every machine."""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOP = 15


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


def top_functions(stats: pstats.Stats) -> str:
    rows = sorted(stats.stats.items(), key=lambda item: item[1][1], reverse=True)[:TOP]  # type: ignore[attr-defined]
    return "\n".join(f"  {calls:>6}  {Path(file).name}:{line} {name}"
                     for (file, line, name), (_, calls, *_rest) in rows)


def counts() -> dict[str, dict[str, Any]]:
    from mlgate.loading.policies import default_policy_dir, load_policy_paths
    from mlgate.model.facts import NO_FACTS
    from mlgate_webhook.review import admit, parse_review
    from tests.limits.review_objects import OBJECTS

    shipped = load_policy_paths([default_policy_dir()])
    measured = {}
    for name, build in OBJECTS.items():
        for endpoint in ("validate", "mutate"):
            body = review_body(build())
            # the first review fills what is cached once per process (compiled patterns, the kind table's lookups),
            # which a webhook pays once, not per review
            admit(parse_review(body, "application/json"), shipped, NO_FACTS, endpoint)  # type: ignore[arg-type]
            profile = cProfile.Profile()
            profile.enable()
            admission = admit(parse_review(body, "application/json"), shipped, NO_FACTS, endpoint)  # type: ignore[arg-type]
            profile.disable()
            stats = pstats.Stats(profile)
            measured[f"{name} /{endpoint}"] = {"calls": stats.total_calls,  # type: ignore[attr-defined]
                                               "judged": "uid" in admission.response, "top": top_functions(stats)}
    return measured


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    json.dump(counts(), sys.stdout)
