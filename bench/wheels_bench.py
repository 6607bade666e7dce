"""Does `pip install mlgate` find a wheel for every dependency on every platform? Prints a table, asserts nothing.

For each platform (macOS arm64 and x86_64, Windows, glibc and musl Linux on x86_64 and aarch64) and each supported
Python, pip resolves the light install's dependencies (pyproject.toml's `dependencies`, at the versions
requirements-dev.lock pins), then those of each extra that adds checks to the CLI (`schema`, `cel`), with
`--only-binary=:all:` for that platform and without installing anything (`--dry-run --report`: PyPI serves the
wheels' metadata on its own, PEP 658). A cell says which compiled wheels were found, or why there is none. Where a
compiled dependency has no wheel, the install falls back on its source distribution: PyYAML's builds as pure
Python without libyaml (mlgate then loads with yaml.SafeLoader), while orjson and pydantic-core need a Rust
toolchain; a missing cell for those two is a platform the CLI does not install on without one. Without the
`schema` extra the CLI runs and says on stderr that CRD schemas were not checked.

    .venv/bin/python bench/wheels_bench.py        (needs the package index; a minute or two)
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.11", "3.12", "3.13")
# extras that add checks to the CLI, which runs without them and says what it did not check
OPTIONAL_CHECKS = ("schema", "cel")
# pip takes several --platform tags and does not widen manylinux or musllinux ones to older glibc or musl versions
PLATFORMS = {
    "macOS arm64": ("macosx_14_0_arm64",),
    "macOS x86_64": ("macosx_14_0_x86_64",),
    "Windows x86_64": ("win_amd64",),
    "Linux glibc x86_64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "Linux glibc aarch64": ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"),
    "Linux musl x86_64": ("musllinux_1_2_x86_64", "musllinux_1_1_x86_64"),
    "Linux musl aarch64": ("musllinux_1_2_aarch64", "musllinux_1_1_aarch64"),
}


def pins(directory: Path) -> Path:
    """requirements-dev.lock's pins without hashes (a constraints file takes none)."""
    lines = [line.split(" ")[0] for line in (ROOT / "requirements-dev.lock").read_text().splitlines()
             if "==" in line and not line.startswith(" ")]
    path = directory / "pins.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def resolve(platform: tuple[str, ...], python: str, constraints: Path, directory: Path,
            requirements: list[str]) -> str:
    """The compiled wheels pip chose, or the first line of why it could not."""
    report = directory / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--target", str(directory / "target"), "--report", str(report), "-c", str(constraints)]
    command += [arg for tag in platform for arg in ("--platform", tag)]
    result = subprocess.run([*command, *requirements], capture_output=True, text=True, check=False)
    if result.returncode:
        lines = (result.stdout + result.stderr).splitlines()  # pip explains a conflict on stdout
        # the packages with no wheel: the indented lines after this one
        marker = next((i for i, line in enumerate(lines) if "no matching distributions available" in line), None)
        if marker is not None:
            missing = list(itertools.takewhile(lambda line: line.startswith("    "), lines[marker + 1:]))
            return f"NO WHEEL for {', '.join(m.strip() for m in missing)}"
        errors = [line for line in lines if line.startswith("ERROR")]
        return f"NO WHEEL: {(errors or lines or ['?'])[0]}"
    wheels = [item["download_info"]["url"].rsplit("/", 1)[-1] for item in json.loads(report.read_text())["install"]]
    compiled = sorted(w.split("-")[0] for w in wheels if not w.endswith("-none-any.whl"))
    return f"ok, {len(wheels)} wheels; compiled: {', '.join(compiled)}"


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the light install, then the CEL and JSON Schema checks: without mlgate[schema] the CLI still runs and says
    # on stderr that CRD schemas were not checked
    extras = project["optional-dependencies"]
    sets = {"the light install (dependencies)": project["dependencies"]}
    sets |= {f"mlgate[{name}] (its extra alone)": extras[name] for name in OPTIONAL_CHECKS if name in extras}
    with tempfile.TemporaryDirectory() as tmp:
        constraints = pins(Path(tmp))
        for title, requirements in sets.items():
            print(f"{'platform':<22}{'Python':<8}wheels for {title}, at the lock's versions")
            for name, platform in PLATFORMS.items():
                for python in PYTHONS:
                    cell = resolve(platform, python, constraints, Path(tmp), requirements)
                    print(f"{name:<22}{python:<8}{cell}", flush=True)
            print()


if __name__ == "__main__":
    main()
