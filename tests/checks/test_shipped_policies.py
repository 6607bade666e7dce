"""An installed mlgate finds the shipped policies with no -p: pyproject.toml puts `policies/` in the wheel."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from mlgate.loading import policies

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_puts_every_shipped_policy_file_in_the_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["mlgate.shipped_policies"] == "policies"
    assert "mlgate.shipped_policies" in config["packages"]
    assert config["package-data"]["mlgate.shipped_policies"] == ["*.yaml"]
    assert {p.suffix for p in (ROOT / "policies").iterdir()} == {".yaml"}  # nothing the pattern would leave out


def test_the_packaged_copy_wins_over_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    packaged = tmp_path / "site-packages" / "mlgate" / "shipped_policies"
    shutil.copytree(ROOT / "policies", packaged)
    monkeypatch.setattr(policies, "PACKAGED_POLICY_DIR", packaged)
    assert policies.default_policy_dir() == packaged
    shipped = sorted((ROOT / "policies").glob("*.yaml"))  # one policy a file
    assert len(policies.load_policy_paths([policies.default_policy_dir()]).policies) == len(shipped) == 7


def test_a_checkout_uses_its_policies_folder():
    assert not policies.PACKAGED_POLICY_DIR.exists()
    assert policies.default_policy_dir() == ROOT / "policies"
