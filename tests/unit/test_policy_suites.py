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
        (suite,) = [d for d in _documents(path) if d.get("kind") == "PolicyTest"]
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
    patched = lines.index(f"FAIL {suite}: defaults/defaults.security-context Pod/allow-privilege-escalation-unset: "
                          "expected pass, got pass")
    assert lines[patched + 1].strip().startswith("patched resource differs from not-patched.yaml: ")
    assert lines[-1] == "1 passed, 2 failed"


def test_a_suite_with_an_unknown_field_is_refused_before_anything_runs() -> None:
    result = run_mlgate("test", f"{BROKEN}/unknown-field")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"mlgate: {BROKEN}/unknown-field/suite.yaml: spec.results[0].resutl: unknown field")
    assert "Traceback" not in result.stderr


def test_a_suite_with_a_missing_policy_file_is_refused_with_the_path() -> None:
    result = run_mlgate("test", f"{BROKEN}/missing-policy")
    suite = f"{BROKEN}/missing-policy"
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"mlgate: {suite}/suite.yaml: policies: {suite}/no-such-policies.yaml: no such file or directory\n"
    )
