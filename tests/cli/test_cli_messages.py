"""Messages a newcomer reads right the first time (issue 33, item 6): each says what happened on its own line,
names the file, line and column once, the extra that is missing by its module, and never prints "serving" or a
verdict it does not mean."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import mlgate.cli.main as cli_main
from mlgate.cli.main import EXTRAS, cli

ROOT = Path(__file__).resolve().parents[2]
INPUTS = ROOT / "tests" / "cli" / "inputs"
MIG_CONFIGS = ROOT / "tests" / "fixtures" / "mig-configs"
PRIVILEGED = (INPUTS / "ok-pod.yaml").read_text(encoding="utf-8").replace(
    "allowPrivilegeEscalation: false", "privileged: true").replace("name: ok", "name: root")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mlgate", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=120, check=False)


# --- mlgate test ---------------------------------------------------------------------------------------------------

def test_a_suite_whose_patch_differs_says_so_on_the_fail_line_instead_of_expected_pass_got_pass() -> None:
    result = run("test", "tests/policy-suites-broken/wrong-expectation")
    (line,) = [line for line in result.stdout.splitlines() if "Pod/allow-privilege-escalation-unset" in line]
    assert line.startswith("FAIL ") and "expected pass, got pass" not in line
    assert ": pass as expected, but the patched resource differs from not-patched.yaml: add /spec/" in line


# --- mlgate mutate -------------------------------------------------------------------------------------------------

def test_mutate_marks_a_denied_object_with_a_comment_keeps_stdout_yaml_and_exits_1(tmp_path: Path) -> None:
    manifest = tmp_path / "two.yaml"
    first = (INPUTS / "ok-pod.yaml").read_text(encoding="utf-8")
    manifest.write_text(first + "---\n" + PRIVILEGED)
    starts = len(first.splitlines()) + 2  # the line after the separator
    result = run("mutate", str(manifest))
    assert result.returncode == 1
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout)] == ["ok", "root"]
    lines = result.stdout.splitlines()
    (marked,) = [i for i, line in enumerate(lines) if line.startswith("# mlgate: DENIED")]
    assert lines[marked] == (f"# mlgate: DENIED Pod ml/root ({manifest}:{starts}): admission would refuse it; "
                             "why is on stderr")
    assert lines[marked + 1] == "---" and lines[marked + 2:marked + 4] == ["apiVersion: v1", "kind: Pod"]
    assert "mlgate: 1 denied object(s) printed on stdout after a `# mlgate: DENIED` line" in result.stderr


def test_mutate_prints_no_mark_when_nothing_is_denied() -> None:
    result = run("mutate", str(INPUTS / "ok-pod.yaml"))
    assert result.returncode == 0 and "DENIED" not in result.stdout + result.stderr


# --- a light install -----------------------------------------------------------------------------------------------

@pytest.fixture
def light_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pip install mlgate`: no module of the server, reconciler or schema extras can be found."""
    missing = {m for modules in EXTRAS.values() for m in modules}
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name.split(".", maxsplit=1)[0] in missing else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_validate_crds_without_the_schema_extra_is_one_error_naming_the_extra(light_install: None) -> None:
    result = CliRunner().invoke(cli, ["validate", "--crds", str(ROOT / "tests" / "cli" / "crds"),
                                      str(INPUTS / "ok-pod.yaml")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("mlgate: error: --crds needs jsonschema, which comes with mlgate[schema]: "
                             "pip install 'mlgate[schema]'\n")


@pytest.mark.parametrize(("args", "module"), [(["certs"], "cryptography"),
                                              (["webhook", "uninstall"], "kubernetes"),
                                              (["serve"], "fastapi")])
def test_a_command_without_its_extra_names_the_module_it_needs(light_install: None, args: list[str],
                                                               module: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert f"`mlgate {args[0]}` needs {module}, which comes with mlgate[server]" in result.stderr


def test_certs_and_webhook_work_without_fastapi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(EXTRAS, "server", ("no_such_module_for_mlgate", *EXTRAS["server"]))
    result = CliRunner().invoke(cli, ["certs", "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "tls.crt").exists()
    assert "uninstall" in CliRunner().invoke(cli, ["webhook", "--help"]).stdout
    assert cli_main.TransportGroup.NEEDS.keys() <= cli_main.TransportGroup.TRANSPORTS.keys()


# --- mig-lint ------------------------------------------------------------------------------------------------------

def test_mig_lint_walks_a_directory_and_prints_a_summary_on_stderr() -> None:
    result = run("mig-lint", str(MIG_CONFIGS))
    linted = sorted(p for p in MIG_CONFIGS.glob("*.yaml"))
    assert result.returncode == 1, result.stderr
    assert "Is a directory" not in result.stderr
    assert {line.split(":")[0] for line in result.stdout.splitlines()} <= {str(p) for p in linted}
    errors = sum(": warning: " not in line for line in result.stdout.splitlines())
    assert result.stderr.splitlines()[-1] == (f"mlgate: mig-lint: {len(linted)} files checked: {errors} errors, "
                                              "1 warning")


def test_mig_lint_reads_stdin_for_a_dash() -> None:
    result = run("mig-lint", "-", stdin=(MIG_CONFIGS / "bad-profile-known-gpu.yaml").read_text(encoding="utf-8"))
    assert result.returncode == 1
    assert result.stdout.startswith("<stdin>:9: /mig-configs/") and "3g.40gb is not a profile" in result.stdout
    assert result.stderr == "mlgate: mig-lint: 1 file checked: 1 error\n"


def test_mig_lint_of_a_clean_file_says_so_in_one_line() -> None:
    result = run("mig-lint", str(MIG_CONFIGS / "config-default.yaml"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "mlgate: mig-lint: 1 file checked: "
                                                                        "no problems\n")


def test_mig_lint_of_a_directory_without_yaml_says_so(tmp_path: Path) -> None:
    result = run("mig-lint", str(tmp_path))
    assert result.returncode == 2
    assert f"mlgate: {tmp_path}: a directory without .yaml, .yml or .json files" in result.stderr


# --- serve ---------------------------------------------------------------------------------------------------------

def test_serve_on_a_busy_port_says_so_in_one_line_with_exit_2_and_never_says_serving(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--port", str(port), "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert "serving" not in result.stderr and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mlgate: ")]
    assert errors == [f"mlgate: cannot start: --port {port} on 127.0.0.1: Address already in use"]


# --- locations -----------------------------------------------------------------------------------------------------

def test_a_parse_error_names_its_line_once_and_its_column_in_the_message(tmp_path: Path) -> None:
    broken = tmp_path / "syntax.yaml"
    broken.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels: {a: b\nspec: {}\n")
    result = run("validate", str(broken))
    assert result.returncode == 2
    assert (f"mlgate: {broken}:6: column 5: invalid YAML: while parsing a flow mapping, did not find expected ',' "
            "or '}'") in result.stderr.splitlines()
    assert "line 6" not in result.stdout + result.stderr


# --- inputs that were silently half-used ---------------------------------------------------------------------------

def test_facts_that_hold_no_facts_kinds_are_refused_naming_the_file() -> None:
    result = run("validate", "--facts", "examples", str(INPUTS / "ok-pod.yaml"))
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("mlgate: facts: examples/") and ": no cluster facts in it (Namespace," in line


def test_facts_with_a_namespace_are_taken(tmp_path: Path) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}))
    assert run("validate", "--facts", str(facts), str(INPUTS / "ok-pod.yaml")).returncode == 0


def test_admission_review_refuses_a_file_of_three_documents_with_the_count(tmp_path: Path) -> None:
    three = tmp_path / "three.yaml"
    pod = (INPUTS / "ok-pod.yaml").read_text(encoding="utf-8")
    three.write_text("---\n".join([pod, pod.replace("name: ok", "name: b"), pod.replace("name: ok", "name: c")]))
    result = run("admission-review", str(three))
    assert result.returncode == 2 and result.stdout == ""
    assert f"{three}: 3 documents; an AdmissionReview holds one object, give a file with one" in result.stderr
    assert run("admission-review", str(INPUTS / "ok-pod.yaml")).returncode == 0
