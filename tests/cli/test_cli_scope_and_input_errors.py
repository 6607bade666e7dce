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


POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: main
    image: registry.example/train:1.0
    resources:
      limits: {nvidia.com/gpu: VALUE}
"""


def test_a_number_the_api_server_refuses_is_an_input_error_at_its_line(tmp_path: Path) -> None:
    for value in ("1.0e+400", ".inf", "-.Inf", ".nan"):
        manifest = tmp_path / "pod.yaml"
        manifest.write_text(POD.replace("VALUE", value))
        result = CliRunner().invoke(cli, ["validate", str(manifest)])
        assert result.exit_code == 2, (value, result.stdout)
        assert f"ERROR column 32: {value} is not a finite number, which the API server refuses" \
            in " ".join(result.stdout.split()), result.stdout  # long lines are wrapped
        assert "Traceback" not in result.stdout + result.stderr


def test_a_json_number_the_api_server_refuses_is_an_input_error_too(tmp_path: Path) -> None:
    for value in ("1e400", "NaN", "-Infinity"):
        manifest = tmp_path / "job.json"
        manifest.write_text('{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},\n'
                            f' "spec": {{"parallelism": {value}}}}}')
        result = CliRunner().invoke(cli, ["validate", str(manifest)])
        assert result.exit_code == 2 and f"{value} is not a finite number" in " ".join(result.stdout.split()), \
            result.stdout


def test_a_policy_parameter_that_is_no_finite_number_is_a_load_error_at_its_line(tmp_path: Path) -> None:
    policy = tmp_path / "gpu.yaml"
    policy.write_text("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata: {name: gpu}\n"
                      "spec:\n  rules:\n  - rule: gpu.max\n    params: {perJob: .inf}\n")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD.replace("VALUE", "1"))
    result = CliRunner().invoke(cli, ["validate", "-p", str(policy), str(manifest)])
    assert result.exit_code == 2
    assert f"{policy}:7" in result.stderr and ".inf is not a finite number" in result.stderr, result.stderr


def test_a_kubeconfig_that_is_not_yaml_or_not_a_mapping_is_one_clear_error_with_its_line(tmp_path: Path) -> None:
    garbage, listed = tmp_path / "garbage", tmp_path / "listed"
    garbage.write_text("apiVersion: v1\nclusters: [\n")
    listed.write_text("- a\n- b\n")
    for command in (["validate", "--cluster"], ["facts", "dump"]):
        result = CliRunner().invoke(cli, [*command, "--kubeconfig", str(garbage)])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"mlgate: kubeconfig {garbage}:3: invalid YAML:"), result.stderr
        result = CliRunner().invoke(cli, [*command, "--kubeconfig", str(listed)])
        assert result.exit_code == 2, result.output
        assert result.stderr == f"mlgate: kubeconfig {listed}: must be a mapping (apiVersion, clusters, contexts, " \
                                "users), not a list\n"
