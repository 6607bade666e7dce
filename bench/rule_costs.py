"""CPU per rule on the webhook benchmark's 2 KB PyTorchJob, in process; prints figures, asserts nothing.

    .venv/bin/python bench/rule_costs.py [--rounds 3000]

Shows where `evaluate` spends its time on one admission: the whole validate-only evaluation, the extraction,
and each check binding of the shipped policies run alone (`_run_check`, so the result bookkeeping counts too).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from webhook_bench import pytorchjob  # noqa: E402

from mlgate.engine import evaluate  # noqa: E402
from mlgate.engine.evaluate import _run_check  # noqa: E402
from mlgate.loading.policies import load_policy_paths  # noqa: E402
from mlgate.model.facts import NO_FACTS  # noqa: E402
from mlgate.rules.registry import Context  # noqa: E402
from mlgate.workloads.extract import extract  # noqa: E402


def micros(call: Callable[[], object], rounds: int) -> float:
    start = time.process_time()
    for _ in range(rounds):
        call()
    return (time.process_time() - start) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    rounds = parser.parse_args().rounds
    policies = load_policy_paths([REPO / "policies"])
    obj = pytorchjob()
    obj["metadata"]["namespace"] = "ml"
    print(f"evaluate, validate only   {micros(lambda: evaluate(obj, policies, mutate=False), rounds):7.1f} us")
    print(f"evaluate, with mutations  {micros(lambda: evaluate(obj, policies), rounds):7.1f} us")
    print(f"extract                   {micros(lambda: extract(obj, None), rounds):7.1f} us")
    workload, context = extract(obj, None), Context(facts=NO_FACTS, operation="CREATE")
    for policy in policies.policies:
        for binding in policy.bindings:
            if binding.rule.check is not None:
                cost = micros(lambda p=policy, b=binding: _run_check(p, b, workload, context), rounds)
                print(f"  {binding.rule.id:<34} {cost:7.1f} us")


if __name__ == "__main__":
    main()
