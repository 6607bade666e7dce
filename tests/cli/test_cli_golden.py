"""The CLI as CI runs it: a real process, stdout and exit code pinned by golden files."""

import io
import subprocess
import sys
from pathlib import Path

import pytest
from golden import check_golden, orphans

from mlgate.cli.main import cli
from mlgate.cli.text import use_colour

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "cli"
INPUTS = "tests/cli/inputs"
BAD_POLICIES = "tests/cli/policies"
LISTS = "tests/cli/lists"
NAMESPACES = "tests/cli/namespaces"
SKIPS = "tests/cli/skips"
LEVELS = ["-p", "tests/cli/levels/policies.yaml", "tests/cli/levels/pod.yaml"]
EMPTY = "tests/cli/empty"
MLGATE = [sys.executable, "-m", "mlgate"]

CASES = {
    "validate-allowed": ["validate", f"{INPUTS}/ok-pod.yaml"],
    "validate-denied": ["validate", f"{INPUTS}/too-many-gpus.yaml"],
    "validate-mutated": ["validate", f"{INPUTS}/needs-defaults.yaml"],
    "validate-bad-documents": ["validate", f"{INPUTS}/multi-with-bad-doc.yaml"],
    "validate-binary-garbage": ["validate", f"{INPUTS}/garbage.yaml"],
    "validate-directory-json": ["validate", "-o", "json", INPUTS],
    "validate-junit": ["validate", "-o", "junit", f"{INPUTS}/too-many-gpus.yaml", f"{INPUTS}/ok-pod.yaml",
                       f"{INPUTS}/needs-defaults.yaml", f"{SKIPS}/shared-claim.yaml"],
    "validate-sarif": ["validate", "-o", "sarif", f"{INPUTS}/too-many-gpus.yaml"],
    "validate-sarif-levels": ["validate", "-o", "sarif", *LEVELS, f"{SKIPS}/shared-claim.yaml",
                              f"{INPUTS}/multi-with-bad-doc.yaml"],
    "validate-levels": ["validate", *LEVELS],
    "validate-levels-json": ["validate", "-o", "json", *LEVELS],
    "validate-levels-quiet": ["validate", "-q", *LEVELS, f"{INPUTS}/multi-with-bad-doc.yaml"],
    "validate-warnings-json": ["validate", "-o", "json", f"{INPUTS}/needs-defaults.yaml"],
    "validate-warn-exit-code": ["validate", "--warn-exit-code", "3", f"{INPUTS}/needs-defaults.yaml"],
    "validate-unchecked": ["validate", f"{SKIPS}/shared-claim.yaml"],
    "validate-unchecked-json": ["validate", "-o", "json", f"{SKIPS}/shared-claim.yaml"],
    "validate-no-manifests": ["validate", EMPTY],
    "validate-no-manifests-allowed": ["validate", "--allow-empty", f"{EMPTY}/comments-only.yaml"],
    "mutate-bad-documents": ["mutate", f"{INPUTS}/multi-with-bad-doc.yaml"],
    "validate-missing-file": ["validate", f"{INPUTS}/does-not-exist.yaml"],
    "policy-unknown-field": ["validate", "-p", f"{BAD_POLICIES}/unknown-field.yaml", f"{INPUTS}/ok-pod.yaml"],
    "policy-wrong-param-type": ["validate", "-p", f"{BAD_POLICIES}/wrong-param-type.yaml", f"{INPUTS}/ok-pod.yaml"],
    "policy-broken-yaml": ["validate", "-p", f"{BAD_POLICIES}/broken-yaml.yaml", f"{INPUTS}/ok-pod.yaml"],
    "mutate-defaults": ["mutate", f"{INPUTS}/needs-defaults.yaml"],
    "usage-error": ["validate", "-o", "xml", f"{INPUTS}/ok-pod.yaml"],
    "validate-list-items": ["validate", f"{LISTS}/pods.yaml"],
    "validate-list-items-json": ["validate", "-o", "json", f"{LISTS}/pods.yaml"],
    "validate-no-namespace-is-default": ["validate", "-p", f"{NAMESPACES}/policies.yaml",
                                         f"{NAMESPACES}/no-namespace.yaml"],
    "validate-namespace-flag": ["validate", "-p", f"{NAMESPACES}/policies.yaml", "-n", "research",
                                f"{NAMESPACES}/no-namespace.yaml"],
    "mutate-no-namespace-stays-unwritten": ["mutate", "-p", f"{NAMESPACES}/policies.yaml",
                                            f"{NAMESPACES}/no-namespace.yaml"],
    "policy-empty-dir": ["validate", "-p", "tests/cli/policies-empty", f"{INPUTS}/ok-pod.yaml"],
    "validate-crd-refusals": ["validate", "-q", "tests/cli/crds/trainingjobs.yaml"],
    "validate-builtin-refusals": ["validate", "-q", "tests/cli/builtins/malformed.yaml"],
    "validate-policy-documents": ["validate", "tests/cli/policy-documents"],
}
EXPECTED_EXIT = {
    "validate-allowed": 0, "validate-denied": 1, "validate-mutated": 0, "validate-bad-documents": 2,
    "validate-binary-garbage": 2, "validate-directory-json": 2, "validate-junit": 1, "validate-sarif": 1,
    "validate-missing-file": 2, "policy-unknown-field": 2, "policy-wrong-param-type": 2,
    "policy-broken-yaml": 2, "mutate-defaults": 0, "usage-error": 2, "validate-list-items": 1,
    "validate-list-items-json": 1, "validate-no-namespace-is-default": 1, "validate-namespace-flag": 0,
    "mutate-no-namespace-stays-unwritten": 1, "policy-empty-dir": 2, "validate-sarif-levels": 2,
    "validate-levels": 1, "validate-levels-json": 1, "validate-levels-quiet": 2, "validate-warnings-json": 0,
    "validate-warn-exit-code": 3, "validate-unchecked": 0, "validate-unchecked-json": 0, "validate-no-manifests": 2,
    "validate-no-manifests-allowed": 0, "mutate-bad-documents": 2, "validate-crd-refusals": 1,
    "validate-builtin-refusals": 1, "validate-policy-documents": 1,
}
# The text report as a terminal shows it: `--color always` stands in for a TTY, and click's own `color=True`
# (an embedder's choice) does too.
COLOUR_CASES = {
    "colour-levels": ["validate", "--color", "always", *LEVELS, f"{SKIPS}/shared-claim.yaml",
                      f"{INPUTS}/multi-with-bad-doc.yaml"],
    "colour-mutate": ["mutate", "--color", "always", f"{INPUTS}/multi-with-bad-doc.yaml"],
}


def run_cli(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*MLGATE, *args], cwd=ROOT, input=stdin, capture_output=True, check=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_output_matches_golden(name):
    result = run_cli(CASES[name])
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert "Traceback" not in stderr
    check_golden(GOLDEN / f"{name}.out", f"exit: {result.returncode}\n--- stdout\n{stdout}--- stderr\n{stderr}")
    assert result.returncode == EXPECTED_EXIT[name]


@pytest.mark.parametrize("name", sorted(COLOUR_CASES))
def test_the_text_report_on_a_terminal_matches_its_coloured_golden(name):
    result = run_cli(COLOUR_CASES[name])
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    assert "\x1b[" in stdout + stderr
    check_golden(GOLDEN / f"{name}.out", f"exit: {result.returncode}\n--- stdout\n{stdout}--- stderr\n{stderr}")


def test_an_embedder_asking_click_for_colour_gets_the_coloured_report(capsys):
    args = [a for a in COLOUR_CASES["colour-levels"] if a not in ("--color", "always")]
    with pytest.raises(SystemExit):
        cli.main(args, color=True)
    golden = (GOLDEN / "colour-levels.out").read_text()
    assert golden.split("--- stdout\n")[1].startswith(capsys.readouterr().out)


def test_a_pipe_gets_the_plain_report():
    assert "\x1b[" not in run_cli(["validate", *LEVELS]).stdout.decode()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_colour_unless_no_color_is_set(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(None, Terminal()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour(None, Terminal()) is False
    assert use_colour(True, Terminal()) is True  # asked for outright


def test_every_golden_file_belongs_to_a_case():
    assert orphans(GOLDEN, {f"{name}.out" for name in [*CASES, *COLOUR_CASES]}) == []


def test_stdin_is_read_with_a_dash():
    body = (ROOT / INPUTS / "too-many-gpus.yaml").read_bytes()
    result = run_cli(["validate", "-o", "json", "-"], stdin=body)
    assert result.returncode == 1
    assert b'"source":"<stdin>"' in result.stdout


def test_one_bad_document_does_not_hide_the_verdicts_on_the_others():
    result = run_cli(["validate", f"{INPUTS}/multi-with-bad-doc.yaml"])
    out = result.stdout.decode()
    assert "Pod ml/fractional: DENIED" in out
    assert "ConfigMap default/not-ml: skipped (no pod template to judge: v1/ConfigMap)" in out
    assert result.returncode == 2


def test_version_prints_the_package_version():
    from mlgate import __version__

    result = run_cli(["--version"])
    assert result.stdout.decode().strip() == f"mlgate, version {__version__}"


def test_a_document_over_the_size_limit_is_refused_with_a_clear_message_and_the_rest_still_judged(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("w") as handle:
        handle.write("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n")
        line = "  k{}: " + "x" * 1000 + "\n"
        for index in range(3300):  # a little over 3 MiB
            handle.write(line.format(index))
        handle.write("---\n")
        handle.write((ROOT / INPUTS / "too-many-gpus.yaml").read_text())
    result = run_cli(["validate", str(big)])
    out = result.stdout.decode()
    assert result.returncode == 2
    assert "[doc 0] ERROR document is larger than 3 MiB; the API server would refuse it" in " ".join(out.split())
    assert "Pod ml/greedy: DENIED" in out
