"""The pre-commit hook (.pre-commit-hooks.yaml) and the GitHub Action (action.yml) run the real CLI: each file parses,
and its commands, run here as pre-commit and the runner would run them, judge a good and a bad manifest."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import change

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # where `mlgate` is installed, as the hook's or the action's venv would have it
# the keys pre-commit reads from a hook definition (https://pre-commit.com/#creating-new-hooks)
HOOK_KEYS = {"id", "name", "entry", "language", "files", "exclude", "types", "types_or", "exclude_types",
             "always_run", "fail_fast", "verbose", "pass_filenames", "require_serial", "description",
             "language_version", "minimum_pre_commit_version", "args", "stages"}
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """good.yaml (the shipped example the default policies admit) and bad.yaml (the same with 12 GPUs)."""
    good = yaml.safe_load((ROOT / "examples" / "trainingjob-ok.yaml").read_text(encoding="utf-8"))
    # JSON, which is YAML: PyYAML would write "3e-5" unquoted, which go-yaml (and so mlgate) reads as a number
    (tmp_path / "good.yaml").write_text(json.dumps(good, indent=1), encoding="utf-8")
    (tmp_path / "bad.yaml").write_text(json.dumps(change(good, "/spec/resources/gpu", 12), indent=1), encoding="utf-8")
    return tmp_path


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


# --- pre-commit -----------------------------------------------------------------------------------------------


def hook() -> dict[str, Any]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert isinstance(hooks, list) and [h["id"] for h in hooks] == ["mlgate-validate"]
    return dict(hooks[0])


def test_the_pre_commit_hook_is_a_python_hook_of_known_keys_on_yaml_files():
    definition = hook()
    assert set(definition) <= HOOK_KEYS, set(definition) - HOOK_KEYS
    assert definition["language"] == "python" and shlex.split(definition["entry"]) == ["mlgate", "validate"]
    files = re.compile(definition["files"])  # pre-commit matches with re.search
    assert [p for p in ("deploy/job.yaml", "a.yml", "job.json", "yaml.txt", "Chart.lock") if files.search(p)] == [
        "deploy/job.yaml", "a.yml"]


@pytest.mark.parametrize(("name", "code", "verdict"), [("good.yaml", 0, "ALLOWED"), ("bad.yaml", 1, "DENIED")])
def test_the_pre_commit_hook_entry_judges_the_staged_file(manifests: Path, name: str, code: int, verdict: str):
    # pre-commit appends the staged file names to the entry and its args
    done = subprocess.run([*shlex.split(hook()["entry"]), name], cwd=manifests, env=environment(),
                          capture_output=True, text=True, check=False)
    assert done.returncode == code, done.stdout + done.stderr
    assert f"{name}:1 [doc 0] TrainingJob default/llm-finetune: {verdict}" in done.stdout, done.stdout


# --- GitHub Action --------------------------------------------------------------------------------------------


def action() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8")))


def step(steps: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [s for s in steps if s.get("name") == name]
    return found


def test_the_action_is_composite_and_every_expression_names_a_declared_input_or_step():
    definition = action()
    steps = definition["runs"]["steps"]
    assert definition["runs"]["using"] == "composite"
    ids = {s["id"] for s in steps if "id" in s}
    for expression in EXPRESSION.findall((ROOT / "action.yml").read_text(encoding="utf-8")):
        for name in re.findall(r"inputs\.([\w-]+)", expression):
            assert name in definition["inputs"], expression
        for name in re.findall(r"steps\.([\w-]+)\.", expression):
            assert name in ids, expression
    upload = step(steps, "Upload SARIF")
    assert upload["uses"] == "github/codeql-action/upload-sarif@v4"
    assert upload["with"]["sarif_file"] == "${{ steps.validate.outputs.sarif-file }}"
    assert all(s.get("shell", "bash") == "bash" for s in steps if "run" in s)


def test_the_action_installs_its_own_checkout_without_extras():
    install = step(action()["runs"]["steps"], "Install mlgate")
    assert install["env"]["MLGATE_SOURCE"] == "${{ github.action_path }}"  # the repository at the action's ref
    assert 'pip install --quiet "$MLGATE_SOURCE"\n' in install["run"]  # no [server] or [reconciler]


def run_validate_step(workdir: Path, **inputs: str) -> tuple[int, dict[str, str]]:
    """The validate step's script, with its env resolved from `inputs` (else the defaults), run as the runner runs
    a `shell: bash` step; the exit code and what it wrote to $GITHUB_OUTPUT."""
    definition = action()
    values = {name: spec.get("default", "") for name, spec in definition["inputs"].items()} | inputs
    validate = step(definition["runs"]["steps"], "mlgate validate")

    def resolve(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1).removeprefix("inputs.")
            assert name in values, f"only inputs are resolved here, not {match.group(1)}"
            return values[name]
        return EXPRESSION.sub(one, text)

    outputs = workdir / "github_output"
    outputs.write_text("")
    env = environment(GITHUB_OUTPUT=str(outputs), **{k: resolve(v) for k, v in validate["env"].items()})
    script = workdir / "step.sh"
    script.write_text(validate["run"])
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workdir, env=env,
                          capture_output=True, text=True, check=False)
    return done.returncode, dict(line.split("=", 1) for line in outputs.read_text().splitlines())


def sarif_results(path: Path, level: str = "error") -> list[tuple[str, str, int]]:
    log = json.loads(path.read_text(encoding="utf-8"))
    found = [r for run in log["runs"] for r in run["results"] if r["level"] == level]
    return [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
             r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in found]


def test_the_actions_validate_step_writes_a_sarif_result_for_the_bad_manifest_and_reports_exit_1(manifests: Path):
    code, outputs = run_validate_step(manifests, paths="good.yaml\nbad.yaml")
    assert code == 0  # the step itself passes: the upload runs, then the last step fails the job
    assert outputs == {"exit-code": "1", "sarif-file": "mlgate.sarif"}
    gpu_line = next(i for i, line in enumerate((manifests / "bad.yaml").read_text().splitlines(), 1)
                    if line.strip() == '"gpu": 12,')
    results = sarif_results(manifests / "mlgate.sarif")
    assert ("gpu.max", "bad.yaml", gpu_line) in results  # 12 GPUs is also more than torchrun's 1 process uses
    assert sorted(r[:2] for r in results) == [("gpu.max", "bad.yaml"), ("launch.torchrun", "bad.yaml")]


def test_the_actions_policies_input_replaces_the_shipped_set(manifests: Path):
    policies = manifests / "team policies"  # one per line: a space stays in the path
    policies.mkdir()
    (policies / "gpu.yaml").write_text(yaml.safe_dump({
        "apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "tight"},
        "spec": {"rules": [{"rule": "gpu.max", "action": "deny", "params": {"perContainer": 0}}]}}))
    code, outputs = run_validate_step(manifests, paths="good.yaml", policies="team policies\n",
                                      **{"sarif-file": "out.sarif"})
    assert code == 0 and outputs == {"exit-code": "1", "sarif-file": "out.sarif"}, outputs
    assert [r[:2] for r in sarif_results(manifests / "out.sarif")] == [("gpu.max", "good.yaml")]


def test_the_actions_last_step_fails_the_job_with_mlgates_exit_code():
    last = action()["runs"]["steps"][-1]
    assert last["if"] == "${{ steps.validate.outputs.exit-code != '0' }}"
    done = subprocess.run(["bash", "-c", last["run"]], env={"MLGATE_EXIT": "1"}, check=False)
    assert done.returncode == 1


def documented_snippet(first_line: str) -> dict[str, Any]:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return dict(yaml.safe_load(block))


def test_the_documented_snippets_name_the_hook_and_only_inputs_the_action_declares():
    (repo,) = documented_snippet("# .pre-commit-config.yaml")["repos"]
    assert [h["id"] for h in repo["hooks"]] == [hook()["id"]]
    assert re.compile(repo["hooks"][0]["files"]).search("deploy/train.yaml")
    steps = documented_snippet("# .github/workflows/mlgate.yml")["jobs"]["mlgate"]["steps"]
    (ours,) = [s for s in steps if s["uses"].split("@")[0].endswith("/mlgate")]
    assert set(ours["with"]) <= set(action()["inputs"])
