"""The documented .pre-commit-config.yaml snippet (docs/cli.md), run with the real pre-commit (from PyPI, in the
dev extra): its `rev` is a commit of this repository (there are no tags yet), and the hook it names installs there
and judges a good and a bad manifest, through `pre-commit try-repo` and through the snippet itself with this
checkout as the repository. pre-commit builds the hook's environment as a user's would: a virtualenv with this
repository pip-installed at `rev` (its dependencies from the package index), kept in a PRE_COMMIT_HOME of the module."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import change

ROOT = Path(__file__).resolve().parents[2]
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]
TIMEOUT = 600  # the first run builds the hook's virtualenv


def snippet() -> dict[str, Any]:
    """The `.pre-commit-config.yaml` block of docs/cli.md, parsed."""
    blocks = re.findall(r"```yaml\n(# \.pre-commit-config\.yaml\n.*?)```", (ROOT / "docs" / "cli.md").read_text(), re.S)
    assert len(blocks) == 1, "docs/cli.md has one .pre-commit-config.yaml snippet"
    config = yaml.safe_load(blocks[0])
    assert isinstance(config, dict)
    return config


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's repository: deploy/good.yaml (a shipped example the shipped policies admit), deploy/bad.yaml (the
    same with 12 GPUs) and policies/ (the shipped set), committed, as the snippet's `files` and `args` expect."""
    if shutil.which("git") is None:
        pytest.fail("git is not on PATH", pytrace=False)
    path = tmp_path_factory.mktemp("user-repo")
    good = yaml.safe_load((ROOT / "examples" / "trainingjob-ok.yaml").read_text(encoding="utf-8"))
    (path / "deploy").mkdir()
    # JSON, which is YAML: PyYAML would write "3e-5" unquoted, which mlgate reads as a number
    (path / "deploy" / "good.yaml").write_text(json.dumps(good, indent=1), encoding="utf-8")
    (path / "deploy" / "bad.yaml").write_text(json.dumps(change(good, "/spec/resources/gpu", 12), indent=1),
                                              encoding="utf-8")
    shutil.copytree(ROOT / "policies", path / "policies")
    git(path, "init", "-q")
    git(path, "add", ".")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "manifests")
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def pre_commit(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run([*PRE_COMMIT, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, env=env)


def test_the_snippets_rev_is_a_commit_of_this_repository_that_offers_the_hook() -> None:
    (repo,) = snippet()["repos"]
    assert re.fullmatch(r"[0-9a-f]{40}", repo["rev"]), f"rev {repo['rev']!r} is not a full commit hash"
    hooks = yaml.safe_load(git(ROOT, "show", f"{repo['rev']}:.pre-commit-hooks.yaml"))
    assert [h["id"] for h in repo["hooks"]] == ["mlgate-validate"]
    assert "mlgate-validate" in {h["id"] for h in hooks}


@pytest.mark.parametrize(("name", "code", "verdict"), [("good.yaml", 0, "ALLOWED"), ("bad.yaml", 1, "DENIED")])
def test_pre_commit_try_repo_at_the_snippets_rev_judges_a_manifest(project: Path, home: Path, name: str, code: int,
                                                                  verdict: str) -> None:
    (repo,) = snippet()["repos"]
    done = pre_commit(project, home, "try-repo", str(ROOT), "mlgate-validate", "--ref", repo["rev"],
                      "--files", f"deploy/{name}", "--verbose")
    assert done.returncode == code, done.stdout + done.stderr
    assert verdict in done.stdout, done.stdout


def test_the_snippet_itself_runs_its_args_on_its_files(project: Path, home: Path) -> None:
    config = snippet()
    config["repos"][0]["repo"] = str(ROOT)  # this checkout stands in for the hosted repository
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    done = pre_commit(project, home, "run", "--all-files", "--verbose", "--config", ".pre-commit-config.yaml")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "deploy/bad.yaml" in done.stdout and "DENIED" in done.stdout, done.stdout
    assert "policies/gpu.yaml" not in done.stdout  # `files` keeps the policies out of the hook's arguments
