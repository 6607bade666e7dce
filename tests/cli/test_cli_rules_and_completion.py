"""`mlgate rules NAME` describes every parameter of a rule; `mlgate completion SHELL` prints a script that the
shell's completion then drives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.rules.registry import catalog

MLGATE = Path(sys.executable).with_name("mlgate")


@pytest.mark.parametrize("rule_id", sorted(catalog()))
def test_every_parameter_of_every_rule_is_described(rule_id: str):
    properties = catalog()[rule_id].params.model_json_schema(by_alias=True).get("properties", {})
    assert [name for name, schema in properties.items() if not schema.get("description")] == []


def test_rules_with_a_name_shows_that_rule_and_each_parameter_with_its_default():
    result = CliRunner().invoke(cli, ["rules", "defaults.shm"])
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "defaults.shm (mutation): memory-backed /dev/shm for multi-GPU NCCL jobs",
        "  sizeLimit: the /dev/shm emptyDir's sizeLimit (null: none) (default \"8Gi\")",
        "  minGpusPerPod: pods with at least this many GPUs get /dev/shm (default 2)",
        "  docs: docs/rules.md#defaults.shm",
    ]


def test_rules_with_a_name_no_rule_has_is_a_usage_error():
    result = CliRunner().invoke(cli, ["rules", "gpu.maximum"])
    assert result.exit_code == 2 and "no rule 'gpu.maximum'" in result.output


def test_the_bash_completion_script_completes_commands_through_click(tmp_path: Path):
    script = CliRunner().invoke(cli, ["completion", "bash"]).output
    assert "_MLGATE_COMPLETE=bash_complete" in script and "complete -o nosort -F _mlgate_completion mlgate" in script
    env = {**os.environ, "COMP_WORDS": "mlgate val", "COMP_CWORD": "1", "_MLGATE_COMPLETE": "bash_complete"}
    done = subprocess.run([str(MLGATE)], env=env, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.stdout.split() == ["plain,validate"]
