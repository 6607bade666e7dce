"""How big the PolicyReports of one namespace get; prints figures, asserts nothing.

    .venv/bin/python bench/report_size_bench.py [--counts 100,1000,5000]

Every job is examples/pytorchjob-privileged.yaml under its own name, judged by the shipped policies with the real
engine: each has one `fail` (pod-security.baseline) and several `warn` findings (pod-security.restricted), each a
result of its own with its field path and fix. For each count it prints the namespace's reports as the API server
stores them (JSON): how many, the largest, the total, the results listed; beside it the size one unsplit report
would have, which is what etcd's 1.5 MiB object limit would meet. Then the time to build and to compare.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate.reports import Judged, build_reports, dumps, settle

ROOT = Path(__file__).resolve().parents[1]
ETCD_LIMIT = int(1.5 * 1024 * 1024)
NOW = datetime(2025, 1, 1, tzinfo=UTC)


def judged_jobs(count: int) -> list[Judged]:
    template = yaml.safe_load((ROOT / "examples" / "pytorchjob-privileged.yaml").read_text())
    policies = load_policy_paths([default_policy_dir()])
    out = []
    for index in range(count):
        job: dict[str, Any] = copy.deepcopy(template)
        job["metadata"] = {"name": f"resnet-ddp-{index:05d}", "namespace": "research",
                           "uid": f"00000000-0000-4000-8000-{index:012d}"}
        out.append(Judged.of(job, evaluate(job, policies)))
    return out


def kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="100,1000,5000")
    counts = [int(c) for c in parser.parse_args().counts.split(",")]
    jobs = judged_jobs(max(counts))
    print(f"etcd object limit {kib(ETCD_LIMIT)}; budget per report 256 KiB")
    for count in counts:
        start = time.perf_counter()
        reports = build_reports(jobs[:count], now=NOW)
        built = time.perf_counter() - start
        sizes = [len(dumps(r).encode()) for r in reports]
        listed = sum(len(r["results"]) for r in reports)
        whole = build_reports(jobs[:count], now=NOW, budget=sys.maxsize)
        unsplit = len(dumps(whole[0]).encode())
        start = time.perf_counter()
        for report in reports:
            settle(report, report)
        compared = time.perf_counter() - start
        print(f"{count:>6,} jobs: {len(reports):>3} reports, largest {kib(max(sizes))} "
              f"({max(sizes) / ETCD_LIMIT:.0%} of the limit), total {kib(sum(sizes))}, {listed:,} results; "
              f"unsplit {kib(unsplit)} ({unsplit / ETCD_LIMIT:.0%}); build {built * 1e3:.0f} ms, "
              f"unchanged check {compared * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
