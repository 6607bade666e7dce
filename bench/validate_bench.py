"""Benchmark `mlgate validate` on 10,000 mixed ML manifests; prints figures, asserts nothing.

    make bench            # or: .venv/bin/python bench/validate_bench.py [--count N]

Figures and their targets:
- wall time of `mlgate validate -o json DIR` (target: 10 s or less on 2 cores)
- that time over the time of merely parsing the same files with libyaml's CSafeLoader in one
  process (target: 1.5x or less). libyaml is the fastest loader that reads manifests as
  Kubernetes does: YAML 1.1, where unquoted `on`, `yes` and `no` are booleans
  (kubernetes/kubernetes#34146). yaml-rs (Rust, YAML 1.2, installed by `make bench`) is faster
  still and is timed too, for reference; it reads those values as strings and keeps no line
  numbers, so it cannot stand in for the loader mlgate needs.
- peak memory of the whole process tree (target: 150 MB or less)
- `mlgate --version` start time, median of 15 runs (target: 150 ms or less)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from corpus import write_corpus

MLGATE = [sys.executable, "-m", "mlgate"]


def parse_only(files: list[Path]) -> float:
    start = time.perf_counter()
    for path in files:
        with open(path, "rb") as handle:
            for _ in yaml.load_all(handle, Loader=yaml.CSafeLoader):
                pass
    return time.perf_counter() - start


def parse_only_yaml_rs(files: list[Path]) -> float | None:
    try:
        import yaml_rs  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    start = time.perf_counter()
    for path in files:
        yaml_rs.load(path.read_bytes())
    return time.perf_counter() - start


def tree_rss_kb(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, StopIteration):
            continue
    return total


def run_validate(directory: Path, jobs: int | None) -> tuple[float, int, int]:
    args = [*MLGATE, "validate", "-o", "json", str(directory)] + (["-j", str(jobs)] if jobs else [])
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while process.poll() is None:
            peak = max(peak, tree_rss_kb(process.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    code = process.wait()
    elapsed = time.perf_counter() - start
    sampler.join()
    return elapsed, peak // 1024, code


def startup() -> float:
    runs = []
    for _ in range(15):
        start = time.perf_counter()
        subprocess.run([*MLGATE, "--version"], check=True, capture_output=True)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlgate-bench-") as tmp:
        files = write_corpus(Path(tmp), args.count)
        size_mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"corpus: {args.count} manifests in {len(files)} files, {size_mb:.1f} MB")
        parse = min(parse_only(files) for _ in range(2))
        print(f"parse only (libyaml CSafeLoader, YAML 1.1 as Kubernetes reads it, 1 process): {parse:.2f} s")
        rust = parse_only_yaml_rs(files)
        if rust is not None:
            print(f"parse only (yaml-rs, YAML 1.2, no line numbers; reference only, 1 process): {rust:.2f} s")
        for jobs in (1, None):
            elapsed, peak_mb, code = run_validate(Path(tmp), jobs)
            label = "1 process" if jobs == 1 else "default workers"
            versus_rust = f", {elapsed / rust:.1f}x yaml-rs" if rust else ""
            print(f"mlgate validate -o json ({label}): {elapsed:.2f} s, exit {code}, "
                  f"{elapsed / parse:.2f}x libyaml parse{versus_rust}, peak RSS {peak_mb} MB")
            if jobs is None:
                print(f"  target wall <= 10 s: {verdict(elapsed <= 10)}; ratio <= 1.5x: "
                      f"{verdict(elapsed / parse <= 1.5)}; peak <= 150 MB: {verdict(peak_mb <= 150)}")
    start_s = startup()
    print(f"mlgate --version start (median of 15): {start_s * 1000:.0f} ms; target <= 150 ms: "
          f"{verdict(start_s <= 0.15)}")


if __name__ == "__main__":
    main()
