"""The supported Pythons and platforms are said once and tested where they are said: pyproject.toml's classifiers,
the GitHub workflow's matrix (.github/workflows/platforms.yml) and `make pythons` in .ci/run agree, and the light
tests' argument file names what exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "platforms.yml"


def workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(WORKFLOW.read_text(encoding="utf-8")))


def classified_pythons() -> list[str]:
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["classifiers"]
    return [m.group(1) for c in classifiers if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c))]


def test_the_classifiers_start_at_the_python_the_project_requires():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == f">={classified_pythons()[0]}"
    assert classified_pythons() == sorted(classified_pythons(), key=lambda v: tuple(map(int, v.split("."))))


def test_the_workflow_tests_every_classified_python_on_linux_macos_windows_and_alpine():
    jobs = workflow()["jobs"]
    for name in ("light-tests", "alpine"):
        assert jobs[name]["strategy"]["matrix"]["python"] == classified_pythons(), name
    systems = jobs["light-tests"]["strategy"]["matrix"]["os"]
    assert {"ubuntu-latest", "macos-latest", "macos-15-intel", "windows-latest"} <= set(systems)
    assert set(jobs["action"]["strategy"]["matrix"]["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}


def test_every_test_job_runs_the_light_tests_argument_file():
    jobs = workflow()["jobs"]
    for name in ("light-tests", "alpine"):
        scripts = " ".join(step.get("run", "") for step in jobs[name]["steps"])
        assert "pytest -q -p no:cacheprovider @tests/light.args" in scripts, name
    assert "@tests/light.args" in (ROOT / "tools" / "light-pythons.sh").read_text(encoding="utf-8")


def test_the_action_job_runs_this_checkouts_action_yml():
    steps = workflow()["jobs"]["action"]["steps"]
    assert [s["uses"] for s in steps if s.get("uses", "").startswith("./")] == ["./", "./"]


def test_every_path_in_the_light_tests_argument_file_exists():
    for line in (ROOT / "tests" / "light.args").read_text(encoding="utf-8").splitlines():
        path = line.removeprefix("--ignore=")
        assert line == line.strip() and (ROOT / path).exists(), line


def test_ci_runs_the_light_tests_on_every_stock_python():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\nmake pythons\n" in script
    assert script.index("\nmake stock-pythons\n") < script.index("\nmake pythons\n") < script.index("75m make test")
