"""Crash-safety benchmark: the crash test's rounds, as many as wanted, against a private control plane.

    .venv/bin/python bench/crash_bench.py [--rounds 100] [--seed N] [--verbose]

It starts its own etcd + kube-apiserver (the binaries `make control-plane` caches) and runs the harness of
tests/e2e/reconciler/test_e2e_crash_safety.py: each round SIGKILLs `python -m mlgate_reconciler --once` at a
random point of creating a 16-replica TrainingJob (every third round: of deleting it), restarts it, runs passes
until one writes nothing and checks the result. It prints the rounds, what the kills interrupted, the passes needed to
converge, the pods kills left stranded Terminating (the finalizer pass deletes them again), the rounds with problems
(each with the seed and round to replay) and the time. It asserts nothing and exits 0 once the control plane
has started.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "e2e" / "reconciler"))

import test_e2e_crash_safety as crash  # noqa: E402 - the harness lives with the test it serves
from control_plane import ControlPlane, HarnessError, find_binaries  # noqa: E402


def run(rounds: int, seed: int, verbose: bool) -> list[crash.Round]:
    with tempfile.TemporaryDirectory(prefix="mlgate-crash-bench-") as directory:
        plane = ControlPlane(find_binaries(), Path(directory))
        try:
            plane.start()
            harness = crash.make_harness(plane, "crash-bench")
            calibration = crash.calibrate(harness)
            print(f"calibration: start-up {calibration.startup:.2f} s, creation pass {calibration.create_pass:.2f} s, "
                  f"deletion pass {calibration.delete_pass:.2f} s (first to last write)", flush=True)
            return [one_round(harness, calibration, seed, index, verbose) for index in range(rounds)]
        finally:
            plane.stop()


def one_round(harness: crash.Harness, calibration: crash.Calibration, seed: int, index: int,
              verbose: bool) -> crash.Round:
    try:
        result = crash.crash_round(harness, calibration, seed, index)
    except Exception as exc:  # a broken round is a figure too; the next round has its own namespace
        result = crash.Round(seed, index, index % crash.DELETION_EVERY == crash.DELETION_EVERY - 1)
        result.problems.append(f"{type(exc).__name__}: {exc}")
    if verbose or result.problems:
        print(f"round {index}: {result.stages}, {result.passes} passes, {result.seconds:.1f} s"
              + (f", PROBLEMS: {result.describe()}" if result.problems else ""), flush=True)
    elif (index + 1) % 10 == 0:
        print(f"{index + 1} rounds done", flush=True)
    return result


def report(results: list[crash.Round], seed: int, seconds: float, load: float) -> None:
    deletion = sum(r.deletion for r in results)
    failed = [r for r in results if r.problems]
    stages = crash.summary(results)
    passes = Counter(r.passes for r in results)
    stranded = [name for r in results for name in r.stranded]
    print(f"\nseed {seed} (replay: --seed {seed}, or {crash.SEED_VARIABLE}={seed} for the test)")
    print(f"rounds: {len(results)} ({len(results) - deletion} creation, {deletion} deletion), "
          f"{len(failed)} with problems")
    print(f"kills: {sum(stages.values())}, {sum(n for s, n in stages.items() if s in crash.MID_PASS)} mid-pass")
    for name, count in sorted(stages.items(), key=lambda item: -item[1]):
        print(f"  {name:<45} {count:>4}")
    print(f"passes to converge (the restart included): max {max(passes, default=0)}, {dict(sorted(passes.items()))}")
    print(f"stranded by a kill (deleted again by the pass): {len(stranded)} pods in "
          f"{sum(1 for r in results if r.stranded)} rounds")
    spent = sum(r.seconds for r in results)
    print(f"time: {seconds:.1f} s in all, rounds {spent:.1f} s, {spent / max(1, len(results)):.2f} s a round "
          f"(load average {load:.1f} at start)")
    for result in failed:
        print(f"  {result.describe()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="rounds to run (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--verbose", action="store_true", help="one line per round")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    load = os.getloadavg()[0]
    started = time.monotonic()
    try:
        results = run(args.rounds, seed, args.verbose)
    except (HarnessError, AssertionError, OSError) as exc:
        print(f"the control plane or the calibration failed: {exc}", file=sys.stderr)
        return 2
    report(results, seed, time.monotonic() - started, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
