"""Install size and import time of `mlgate`, `mlgate[server]` and `mlgate[reconciler]`.

Each is installed into a fresh venv, at the versions requirements-dev.lock pins (`-c`), and measured:
the size of site-packages, the part of it the install added (a bare venv already holds pip, and setuptools
before Python 3.12), how many distributions it brought, and the best of five wall and CPU times of importing
what its command imports first.

Then the light install again on every local Python tools/find-pythons.sh finds (Debian's /usr/bin/python3 and each
pyenv Python from 3.11), each venv made by that Python.

    .venv/bin/python bench/install_bench.py               (needs the package index; a few minutes)
    .venv/bin/python bench/install_bench.py --light-only  (the second table alone)
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


def measure(base_python: str, spec: str, module: str) -> str:
    """One row: site-packages, what the install added, distributions, import wall and CPU time."""
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        site = next((venv / "lib").glob("python3*/site-packages"))
        bare, bare_count = size_mb(site), distributions(site)
        # run from tmp, as a user installs from anywhere
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c", str(pins(Path(tmp))),
                        f"{ROOT}{spec[1:]}"], check=True, stderr=subprocess.DEVNULL, cwd=tmp)
        total = size_mb(site)
        wall, cpu = import_ms(python, module)
        return f"{total:>12.1f} MB{total - bare:>9.1f} MB{distributions(site) - bare_count:>15}" \
               f"{wall:>11.0f} ms{cpu:>10.0f} ms"


def local_pythons() -> list[str]:
    found = subprocess.run([str(ROOT / "tools" / "find-pythons.sh")], check=True, capture_output=True, text=True)
    return found.stdout.split()


def main() -> None:
    header = f"{'site-packages':>15}{'added':>12}{'distributions':>15}{'import wall':>14}{'import CPU':>13}" \
             "  (best of 5)"
    if "--light-only" not in sys.argv:
        print(f"{'install':<22}{header}")
        for name, (module, spec) in TARGETS.items():
            print(f"{name:<22}{measure(sys.executable, spec, module)}", flush=True)
        print()
    module, spec = TARGETS["mlgate"]
    print(f"{'mlgate on Python':<22}{header}")
    for python in local_pythons():
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        print(f"{version:<22}{measure(python, spec, module)}", flush=True)


if __name__ == "__main__":
    main()
