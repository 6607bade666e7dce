"""The command line keeps its own rules: input errors go to stderr with exit 2, and a cluster-scoped kind the
kind table describes is not reported in the `-n` namespace."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from mlgate.cli.main import cli

RUNTIME = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch}
spec: {template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {containers: [
  {name: node, image: "registry.example/train:1.0"}]}}}}}]}}}
"""


def test_mig_lint_of_a_missing_file_says_so_on_stderr_and_exits_2() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", "/no/such/config.yaml"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("mlgate: /no/such/config.yaml: cannot read:")


def test_a_cluster_scoped_kind_from_the_kind_table_gets_no_namespace(tmp_path: Path) -> None:
    manifest = tmp_path / "runtime.yaml"
    manifest.write_text(RUNTIME)
    result = CliRunner().invoke(cli, ["validate", "-n", "team-a", str(manifest)])
    assert "ClusterTrainingRuntime torch:" in result.stdout and "team-a/" not in result.stdout, result.stdout
    json_result = CliRunner().invoke(cli, ["validate", "-o", "json", "-n", "team-a", str(manifest)])
    assert '"namespace":null' in json_result.stdout.replace(" ", "")
