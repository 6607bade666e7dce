"""Install size and import time of `mlgate`, `mlgate[server]` and `mlgate[reconciler]`.

Each is installed into a fresh venv, at the versions requirements-dev.lock pins (`-c`), and measured:
the size of site-packages, the part of it the install added (a bare venv already holds pip, and setuptools
before Python 3.12), how many distributions it brought, and the best of five wall and CPU times of importing
what its command imports first.

    .venv/bin/python bench/install_bench.py        (needs the package index; a few minutes)
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {  # what to install: the module its command needs first
    "mlgate": ("mlgate.cli.main", "."),
    "mlgate[server]": ("mlgate_webhook.server", ".[server]"),
    "mlgate[reconciler]": ("mlgate_reconciler.controller", ".[reconciler]"),
}


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def distributions(site: Path) -> int:
    return len(list(site.glob("*.dist-info")))


def import_ms(python: Path, module: str) -> tuple[float, float]:
    """Best of five: the wall time, and the CPU time (user + system) of the importing process, which a busy
    machine inflates far less than the wall time."""
    wall = cpu = float("inf")
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([str(python), "-c", f"import {module}"], check=True, cwd=tempfile.gettempdir())
        wall = min(wall, time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def pins(tmp: Path) -> Path:
    """requirements-dev.lock without its hashes: pip takes no hashes in a constraints file."""
    lines = [line.split(" ")[0] for line in (ROOT / "requirements-dev.lock").read_text().splitlines()
             if "==" in line and not line.startswith(" ")]
    path = tmp / "pins.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    print(f"{'install':<22}{'site-packages':>15}{'added':>12}{'distributions':>15}{'import wall':>14}{'import CPU':>13}"
          "  (best of 5)")
    for name, (module, spec) in TARGETS.items():
        with tempfile.TemporaryDirectory() as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            python = venv / "bin" / "python"
            site = next((venv / "lib").glob("python3*/site-packages"))
            bare, bare_count = size_mb(site), distributions(site)
            # run from tmp, as a user installs from anywhere
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c", str(pins(Path(tmp))),
                            f"{ROOT}{spec[1:]}"], check=True, stderr=subprocess.DEVNULL, cwd=tmp)
            total = size_mb(site)
            wall, cpu = import_ms(python, module)
            print(f"{name:<22}{total:>12.1f} MB{total - bare:>9.1f} MB{distributions(site) - bare_count:>15}"
                  f"{wall:>11.0f} ms{cpu:>10.0f} ms")


if __name__ == "__main__":
    main()
