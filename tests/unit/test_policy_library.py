"""examples/library: ready CEL policies for ML platform teams, each in its own file with a header comment that
says why, and its own PolicyTest suite under examples/library/tests, run here as CI runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "examples" / "library"
POLICIES = sorted(LIBRARY.glob("*.yaml"))


def test_the_library_suites_pass_with_one_outcome_per_expected_resource():
    pytest.importorskip("cel_expr_python", reason="the library is CEL policies, which need mlgate[cel]")
    result = subprocess.run([sys.executable, "-m", "mlgate", "test", str(LIBRARY.relative_to(ROOT))], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    expected = sum(len(e["resources"]) for p in (LIBRARY / "tests").glob("*.yaml")
                   for d in yaml.safe_load_all(p.read_text(encoding="utf-8")) if d and d["kind"] == "PolicyTest"
                   for e in d["spec"]["results"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == f"{expected} passed, 0 failed"


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.stem)
def test_each_library_policy_opens_with_why_and_has_a_suite_that_passes_and_fails_or_mutates_it(path: Path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# {path.stem}: "), "a header comment naming the rule and why"
    (policy,) = yaml.safe_load_all(text)
    assert policy["metadata"]["name"] == path.stem
    suite = yaml.safe_load((LIBRARY / "tests" / path.name).read_text(encoding="utf-8"))
    results = {e["result"] for e in suite["spec"]["results"]}
    assert suite["spec"]["policies"] == [f"../{path.name}"]
    if policy["spec"].get("mutations"):  # a mutation changes an object (with the whole result kept) or skips it
        assert {"pass", "skip"} <= results
        assert any(e.get("patchedResource") for e in suite["spec"]["results"] if e["result"] == "pass")
    else:
        assert "pass" in results and results & {"fail", "warn"}


def test_the_library_has_a_line_in_the_docs_for_each_policy():
    docs = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    assert [p.stem for p in POLICIES if f"[{p.stem}](../examples/library/{p.name})" not in docs] == []
