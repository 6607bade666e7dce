"""Install size and import time of `mlgate`, `mlgate[server]` and `mlgate[reconciler]`.

Each is installed into a fresh venv, at the versions requirements-dev.lock pins (`-c`), and measured:
the size of site-packages, and the best of five wall times of importing what its command imports first.

    .venv/bin/python bench/install_bench.py        (needs the package index; about a minute)
"""

from __future__ import annotations

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


def import_ms(python: Path, module: str) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([str(python), "-c", f"import {module}"], check=True, cwd=tempfile.gettempdir())
        best = min(best, time.perf_counter() - start)
    return best * 1000


def pins(tmp: Path) -> Path:
    """requirements-dev.lock without its hashes: pip takes no hashes in a constraints file."""
    lines = [line.split(" ")[0] for line in (ROOT / "requirements-dev.lock").read_text().splitlines()
             if "==" in line and not line.startswith(" ")]
    path = tmp / "pins.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    print(f"{'install':<22}{'site-packages':>15}{'import (best of 5)':>22}")
    for name, (module, spec) in TARGETS.items():
        with tempfile.TemporaryDirectory() as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            python = venv / "bin" / "python"
            # run from tmp: the checkout's operator/ would shadow the standard library's operator
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c", str(pins(Path(tmp))),
                            f"{ROOT}{spec[1:]}"], check=True, stderr=subprocess.DEVNULL, cwd=tmp)
            site = next((venv / "lib").glob("python3*/site-packages"))
            print(f"{name:<22}{size_mb(site):>12.1f} MB{import_ms(python, module):>19.0f} ms")


if __name__ == "__main__":
    main()
