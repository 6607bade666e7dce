"""The rule catalog through `mlgate test`: versioned PolicyTest suites, run as CI runs them.

tests/policy-suites/<family>/ holds one suite per rule family (and one against the shipped policies); each
resource there is a minimal valid object with one change. tests/policy-suites-broken/ holds suites that must
fail or be refused, kept apart so that `mlgate test tests/policy-suites` stays green.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    from yaml import CSafeLoader as Loader
except ImportError:  # pragma: no cover - libyaml ships in the PyYAML wheels
    from yaml import SafeLoader as Loader  # type: ignore[assignment]

from mlgate.rules.registry import catalog

ROOT = Path(__file__).resolve().parents[2]
SUITES = "tests/policy-suites"
BROKEN = "tests/policy-suites-broken"


def run_mlgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mlgate", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False)


@cache
def _documents(path: Path) -> tuple[dict[str, Any], ...]:
    loaded = yaml.load_all(path.read_text(encoding="utf-8"), Loader=Loader)
    return tuple(d for d in loaded if isinstance(d, dict))


def suite_files(directory: str = SUITES) -> list[Path]:
    files = sorted((ROOT / directory).rglob("*.yaml"))
    return [f for f in files if any(d.get("kind") == "PolicyTest" for d in _documents(f))]


@cache
def expectations(directory: str = SUITES) -> tuple[tuple[Path, dict[str, Any]], ...]:
    """(suite file, expectation) for every expectation of every suite under `directory`."""
    found = []
    for path in suite_files(directory):
        for suite in [d for d in _documents(path) if d.get("kind") == "PolicyTest"]:
            found += [(path, expectation) for expectation in suite["spec"]["results"]]
    return tuple(found)


def uncovered_rules() -> dict[str, list[str]]:
    """Rule id -> what its expectations still lack, across every suite."""
    seen: dict[str, set[str]] = defaultdict(set)
    for _, expectation in expectations():
        patched = "+patched" if expectation.get("patchedResource") else ""
        seen[expectation["rule"]].add(expectation["result"] + patched)
    missing: dict[str, list[str]] = {}
    for rule_id, spec in sorted(catalog().items()):
        results = seen[rule_id]
        if spec.is_mutation:
            wanted = {"pass with patchedResource": "pass+patched" in results, "skip": "skip" in results}
        else:
            failing = bool({"fail", "warn"} & results)
            wanted = {"pass": bool({"pass", "pass+patched"} & results), "fail or warn": failing}
        lacking = [name for name, present in wanted.items() if not present]
        if lacking:
            missing[rule_id] = lacking
    return missing


def test_every_policy_suite_passes_with_one_outcome_per_expected_resource() -> None:
    pytest.importorskip("cel_expr_python", reason="the suites hold CEL policies, which need mlgate[cel]")
    result = run_mlgate("test", SUITES)
    expected = sum(len(e["resources"]) for _, e in expectations())
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{expected} passed, 0 failed"


def test_every_rule_in_the_catalog_has_passing_and_failing_expectations() -> None:
    uncovered = uncovered_rules()
    assert not uncovered, f"rules whose suites lack expectations: {uncovered}"


def test_every_suite_resource_and_patched_file_is_named_by_an_expectation() -> None:
    orphans = []
    for directory in sorted({p.parent for p in suite_files()}):
        named = {name for path, e in expectations() if path.parent == directory for name in e["resources"]}
        patched = {e.get("patchedResource") for path, e in expectations() if path.parent == directory}
        for document in _documents(directory / "resources.yaml"):
            key = f"{document['kind']}/{document['metadata']['name']}"
            if key not in named and document["metadata"]["name"] not in named:
                orphans.append(f"{directory.name}: {key}")
        orphans += [f"{directory.name}: {f.name}" for f in directory.glob("patched-*.yaml") if f.name not in patched]
    assert orphans == []


def test_a_wrong_expectation_fails_and_prints_what_the_rule_said() -> None:
    result = run_mlgate("test", f"{BROKEN}/wrong-expectation")
    suite = f"{BROKEN}/wrong-expectation/suite.yaml"
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert f"PASS {suite}: pss-baseline/pod-security.baseline Pod/restricted: expected pass, got pass" in lines
    failed = lines.index(f"FAIL {suite}: pss-baseline/pod-security.baseline Pod/privileged: expected pass, got fail")
    assert lines[failed + 1].strip().startswith(
        "[pss-baseline/pod-security.baseline] privileged: /spec/containers/0/securityContext/privileged: "
        'container "trainer" must not set securityContext.privileged=true'
    )
    (patched,) = [line for line in lines if "Pod/allow-privilege-escalation-unset" in line]
    assert patched.startswith(f"FAIL {suite}: defaults/defaults.security-context Pod/allow-privilege-escalation-unset: "
                              "pass as expected, but the patched resource differs from not-patched.yaml: ")
    assert lines[-1] == "1 passed, 2 failed"


def test_a_suite_with_an_unknown_field_is_refused_at_its_line_before_anything_runs() -> None:
    result = run_mlgate("test", f"{BROKEN}/unknown-field")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"mlgate: {BROKEN}/unknown-field/suite.yaml:13: spec.results[0].resutl: unknown field\n"
        f"mlgate: {BROKEN}/unknown-field/suite.yaml:10: spec.results[0].result: required field is missing")
    assert "Traceback" not in result.stderr


def test_a_suite_with_a_missing_policy_file_is_refused_with_the_path() -> None:
    result = run_mlgate("test", f"{BROKEN}/missing-policy")
    suite = f"{BROKEN}/missing-policy"
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"mlgate: {suite}/suite.yaml: policies: {suite}/no-such-policies.yaml: no such file or directory\n"
    )


# One minimal valid suite (a policy allowing one GPU per container, a pod asking for two), and one change per test.
POLICY = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: gpu}
spec:
  rules:
    - rule: gpu.max
      params: {perContainer: 1}
"""
RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  containers:
    - name: main
      image: registry.example/train:1.0
      resources: {limits: {nvidia.com/gpu: 2}}
"""
SUITE = """\
apiVersion: mlgate.dev/v1alpha1
kind: PolicyTest
metadata: {name: gpu}
spec:
  policies: [policy.yaml]
  resources: [resources.yaml]
  results:
    - {policy: gpu, rule: gpu.max, resources: [Pod/two], result: fail}
"""


def suite_dir(directory: Path, suite: str = SUITE, policy: str = POLICY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(policy)
    (directory / "resources.yaml").write_text(RESOURCES)
    (directory / "suite.yaml").write_text(suite)
    return directory / "suite.yaml"


def test_the_minimal_suite_passes(tmp_path: Path) -> None:
    result = run_mlgate("test", str(suite_dir(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_a_suite_between_leading_and_trailing_separators_still_runs(tmp_path: Path) -> None:
    result = run_mlgate("test", str(suite_dir(tmp_path, "---\n" + SUITE + "---\n")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "1 passed, 0 failed"


def test_every_policytest_in_one_file_runs_and_is_named_by_its_line(tmp_path: Path) -> None:
    failing = SUITE.replace("result: fail", "result: pass")
    suite = suite_dir(tmp_path, SUITE + "---\n" + failing)
    result = run_mlgate("test", str(tmp_path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"PASS {suite}:1: gpu/gpu.max Pod/two: expected fail, got fail"
    assert lines[1] == f"FAIL {suite}:10: gpu/gpu.max Pod/two: expected pass, got fail"
    assert lines[-1] == "1 passed, 1 failed"


def test_a_suite_file_that_does_not_parse_is_an_error_with_its_file_and_line(tmp_path: Path) -> None:
    suite = suite_dir(tmp_path, SUITE.replace("result: fail}", "result: fail"))
    result = run_mlgate("test", str(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"mlgate: {suite}:9: column 1: invalid YAML: ")


def test_a_broken_file_beside_a_passing_suite_fails_the_run(tmp_path: Path) -> None:
    suite_dir(tmp_path / "good")
    broken = suite_dir(tmp_path / "broken", SUITE.replace("{name: gpu}", "{name: gpu"))
    result = run_mlgate("test", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith(f"mlgate: {broken}:4: column ")


def test_an_expectation_naming_a_rule_its_policy_lacks_fails(tmp_path: Path) -> None:
    suite = suite_dir(tmp_path, SUITE.replace("rule: gpu.max, resources: [Pod/two], result: fail",
                                              "rule: gpu.nope, resources: [Pod/two], result: skip"))
    result = run_mlgate("test", str(suite))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"FAIL {suite}: gpu/gpu.nope Pod/two: expected skip, got missing",
        "     policy 'gpu' has no rule 'gpu.nope'",
        "0 passed, 1 failed",
    ]


def test_a_suite_whose_policy_files_hold_no_policy_is_refused(tmp_path: Path) -> None:
    suite = suite_dir(tmp_path, policy="# nothing yet\n")
    result = run_mlgate("test", str(suite))
    assert result.returncode == 2
    assert result.stderr == f"mlgate: {suite}: policies: no MLPolicy or ClusterMLPolicy documents\n"


def test_a_resource_without_a_namespace_is_judged_in_default(tmp_path: Path) -> None:
    in_default = POLICY.replace("metadata: {name: gpu}", "metadata: {name: gpu, namespace: default}").replace(
        "ClusterMLPolicy", "MLPolicy")
    suite = suite_dir(tmp_path, SUITE.replace("policy: gpu,", "policy: default/gpu,"), policy=in_default)
    result = run_mlgate("test", str(suite))
    assert result.returncode == 0, result.stdout + result.stderr
