"""What judging every kind costs, in process; prints figures, asserts nothing.

    .venv/bin/python bench/kinds_bench.py [--rounds 2000]      (part of `make bench`)

Figures and their targets:
- the unknown-kind search on a 2 KB object that holds no pod spec (target: under 10 us): every object of a
  kind no description knows pays it;
- the webhook's in-process evaluate of its benchmark PyTorchJob, validate only and with mutations (target: no
  growth over the same figures before kinds became data: 107 us and 274 us on this machine's kind, measured
  with this script's method on the commit before);
- evaluate with the shipped policies on one real upstream manifest per kind (tests/fixtures/real).
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from webhook_bench import pytorchjob  # noqa: E402

from mlgate.engine import evaluate  # noqa: E402
from mlgate.loading.documents import read_documents  # noqa: E402
from mlgate.loading.policies import load_policy_paths  # noqa: E402
from mlgate.workloads.catalog import SHIPPED  # noqa: E402
from mlgate.workloads.extract import extract  # noqa: E402

REAL = REPO / "tests" / "fixtures" / "real"


def micros(call: Callable[[], object], rounds: int) -> float:
    """The best of five runs of `rounds` calls, per call."""
    return min(timeit.repeat(call, number=rounds, repeat=5)) / rounds * 1e6


def no_pod_spec(size: int = 2048) -> dict[str, Any]:
    """A feature-store object of about `size` bytes of JSON with no pod spec in it."""
    obj: dict[str, Any] = {"apiVersion": "feast.example.com/v1", "kind": "FeatureView",
                           "metadata": {"name": "clicks", "namespace": "ml", "labels": {"team": "ranking"}},
                           "spec": {"source": {"table": "proj.ds.clicks"}, "ttl": "86400s", "features": []}}
    while len(json.dumps(obj)) < size:
        i = len(obj["spec"]["features"])
        obj["spec"]["features"].append({"name": f"feature_{i}", "dtype": "float32", "tags": {"owner": "ranking"}})
    return obj


def one_per_kind() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(REAL.glob("*.yaml")):
        for document in read_documents([str(path)]):
            obj = document.data
            if isinstance(obj, dict) and SHIPPED.find(str(obj.get("apiVersion")), str(obj.get("kind"))):
                found.setdefault(f"{obj['apiVersion']} {obj['kind']}", obj)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rounds = parser.add_argument("--rounds", type=int, default=2000) and parser.parse_args().rounds
    plain = no_pod_spec()
    cost = micros(lambda: extract(plain), rounds * 10)
    print(f"unknown-kind search, {len(json.dumps(plain))} B object without pod specs: {cost:.1f} us "
          f"(target < 10 us: {'ok' if cost < 10 else 'MISSED'})")
    policies = load_policy_paths([REPO / "policies"])
    job = pytorchjob()
    job["metadata"]["namespace"] = "ml"
    print(f"PyTorchJob evaluate, validate only: {micros(lambda: evaluate(job, policies, mutate=False), rounds):.1f} us"
          " (before kinds became data: 107 us)")
    print(f"PyTorchJob evaluate, with mutations: {micros(lambda: evaluate(job, policies), rounds):.1f} us"
          " (before: 274 us)")
    print("evaluate with the shipped policies, one real upstream manifest per kind:")
    for name, obj in one_per_kind().items():
        print(f"  {name:<58} {micros(lambda o=obj: evaluate(o, policies), max(rounds // 10, 50)):8.1f} us")


if __name__ == "__main__":
    main()
