"""The sdist and the wheel, built as a release would build them (`python -m build`, with build isolation: the
backend pinned in pyproject.toml's build-system), pass `twine check` (the README renders on PyPI), and the wheel
carries every package and the data files the installed CLI reads: the shipped policies, the CRDs, the webhook
configurations, kinds.yaml, runtimes.yaml and py.typed. One build for the module: it takes seconds."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def wheel_names(dist: Path) -> set[str]:
    (wheel,) = dist.glob("mlgate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def package_dir(package: str) -> Path:
    """The checkout folder a package is built from, through [tool.setuptools.package-dir]."""
    mapped = CONFIG.get("package-dir", {})
    for prefix in sorted(mapped, key=len, reverse=True):
        if package == prefix or package.startswith(prefix + "."):
            return ROOT / mapped[prefix] / package[len(prefix) + 1:].replace(".", "/")
    return ROOT / package.replace(".", "/")


def test_twine_check_passes_for_the_sdist_and_the_wheel(dist: Path) -> None:
    built = sorted(str(p) for p in dist.iterdir())
    assert sorted(Path(p).suffix for p in built) == [".gz", ".whl"], built
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *built], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_wheel_holds_every_module_of_every_listed_package(dist: Path) -> None:
    names = wheel_names(dist)
    missing = []
    for package in CONFIG["packages"]:
        prefix = package.replace(".", "/")
        modules = [p.name for p in package_dir(package).glob("*.py")]
        missing += [f"{prefix}/{m}" for m in modules if f"{prefix}/{m}" not in names]
        assert modules or any(n.startswith(prefix + "/") for n in names), f"{package}: nothing in the wheel"
    assert not missing, missing


@pytest.mark.parametrize(("package", "pattern"), [
    (package, pattern) for package, patterns in CONFIG["package-data"].items() for pattern in patterns])
def test_the_wheel_holds_the_package_data_the_cli_reads(dist: Path, package: str, pattern: str) -> None:
    names = wheel_names(dist)
    prefix = package.replace(".", "/")
    files = sorted(p.name for p in package_dir(package).glob(pattern))
    assert files, f"{package}: no file matches {pattern} in the checkout"
    assert [f for f in files if f"{prefix}/{f}" not in names] == []


def test_the_wheel_holds_the_data_files_by_name(dist: Path) -> None:
    names = wheel_names(dist)
    wanted = {"mlgate/workloads/kinds.yaml", "mlgate_reconciler/runtimes.yaml", "mlgate/py.typed",
              "mlgate/shipped_webhooks/webhooks.yaml", "mlgate/shipped_crds/mlgate.dev_trainingjobs.yaml",
              "mlgate/shipped_policies/gpu.yaml"}
    assert wanted <= names, wanted - names


def test_the_sdist_builds_the_same_wheel_contents(dist: Path) -> None:
    (sdist,) = dist.glob("mlgate-*.tar.gz")
    with tarfile.open(sdist) as archive:
        top = {Path(n).parts[1] for n in archive.getnames() if len(Path(n).parts) > 1}
    assert {"pyproject.toml", "README.md", "mlgate", "policies", "webhook", "reconciler", "certs",
            "audit"} <= top, top
