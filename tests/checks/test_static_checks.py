"""ruff, mypy and import-linter run as part of the test suite."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    executable = BIN / tool if (BIN / tool).exists() else shutil.which(tool)
    if executable is None:
        pytest.fail(f"{tool} is not installed; run `make setup`")
    return subprocess.run([str(executable), *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_finds_nothing():
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_are_kept():
    result = run("lint-imports")
    assert result.returncode == 0, result.stdout + result.stderr
