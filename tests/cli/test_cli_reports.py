"""Every report format, in-process: one minimal valid pod, one change per test.

Where a test needs a rule result real rules make only with large or cluster-bound input (thousands of findings, a
claim it could not look up), the engine's answer for the pod named "odd" is replaced, so these tests keep
checking the reports' own handling.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner, Result

import mlgate.cli.namespaces as namespaces
from mlgate.cli.ci import CRD_CHECKS, DOCS_URL, RULES_DOC, artifact_uri
from mlgate.cli.main import cli
from mlgate.model.results import Action, Decision, Finding, Outcome, RuleResult
from mlgate.rules.registry import catalog

ROOT = Path(__file__).resolve().parents[2]
POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
spec:
  containers:
    - name: main
      image: registry.example/train:1.0
      resources:
        limits: {{nvidia.com/gpu: {gpus}}}
"""
POLICY = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: gpu}
spec:
  rules:
    - rule: gpu.max
      action: ACTION
      params: {perContainer: 1}
"""


def pod(name: str = "fine", gpus: int = 1) -> str:
    return POD.format(name=name, gpus=gpus)


def write(tmp_path: Path, text: str, name: str = "in.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def policy(tmp_path: Path, action: str = "deny") -> str:
    return write(tmp_path, POLICY.replace("ACTION", action), "policy.yaml")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def engine_answers(monkeypatch: pytest.MonkeyPatch, *results: RuleResult) -> None:
    """The engine's decision on the pod named "odd" is these results; other objects get the real engine."""
    real = namespaces.evaluate

    def fake(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Decision:
        if obj["metadata"]["name"] != "odd":
            return real(obj, *args, **kwargs)
        return Decision(allowed=not any(r.blocks for r in results), results=list(results))

    monkeypatch.setattr(namespaces, "evaluate", fake)


# --- 1. a parse error is reported at its own line ---------------------------------------------------------------

BROKEN = pod().replace("      resources:", "\tresources:")  # a tab where YAML wants spaces, on line 10 of the pod


def test_a_parse_error_is_reported_at_its_line_in_text_json_sarif_and_junit(tmp_path: Path) -> None:
    source = write(tmp_path, BROKEN)
    text = run("validate", source)
    assert " ".join(text.stdout.split()).startswith(f"{source}:10 [doc 0] ERROR column ")
    assert text.stderr.startswith(f"mlgate: {source}:10: column 1: ")
    (record,) = json.loads(run("validate", "-o", "json", source).stdout)["results"]
    assert record["line"] == 10
    (found,) = json.loads(run("validate", "-o", "sarif", source).stdout)["runs"][0]["results"]
    assert found["locations"][0]["physicalLocation"]["region"]["startLine"] == 10
    case = ET.fromstring(run("validate", "-o", "junit", source).stdout).find("testcase")
    assert case is not None and case.get("line") == "10"


def test_a_parse_error_in_a_later_document_is_reported_at_its_line_not_the_documents_start(tmp_path: Path) -> None:
    source = write(tmp_path, pod() + "---\n" + BROKEN)
    (_, broken) = json.loads(run("validate", "-o", "json", source).stdout)["results"]
    assert (broken["document"], broken["line"]) == (1, 22)  # the pod's 11 lines and a separator before it


def test_a_typo_in_a_suite_resource_is_an_error_at_the_typo_line(tmp_path: Path) -> None:
    write(tmp_path, POLICY.replace("ACTION", "deny"), "policy.yaml")
    write(tmp_path, pod() + "---\n" + BROKEN, "resources.yaml")
    suite = write(tmp_path, "apiVersion: mlgate.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: t}\nspec:\n"
                  "  policies: [policy.yaml]\n  resources: [resources.yaml]\n"
                  "  results: [{policy: gpu, rule: gpu.max, resources: [fine], result: pass}]\n", "suite.yaml")
    result = run("test", suite)
    assert result.exit_code == 2
    assert "resources.yaml:22: column " in result.stderr, result.stderr


# --- 2. json keeps blocking, warning and audit findings apart --------------------------------------------------


def test_an_allowed_document_with_a_warning_has_no_violations_in_json(tmp_path: Path) -> None:
    result = run("validate", "-p", policy(tmp_path, "warn"), "-o", "json", write(tmp_path, pod(gpus=2)))
    report = json.loads(result.stdout)
    (record,) = report["results"]
    assert result.exit_code == 0 and record["allowed"] is True
    assert record["violations"] == [] and record["audit"] == []
    (warning,) = record["warnings"]
    assert {k: warning[k] for k in ("policy", "rule", "action", "path", "reason", "line")} == {
        "policy": "gpu", "rule": "gpu.max", "action": "warn", "reason": "too many gpus per container",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "line": 11}
    assert warning["detail"] == 'container "main" asks for 2 GPUs, the limit is 1'
    assert warning["fix"] == "split the work across more replicas"
    assert report["summary"]["warnings"] == 1


def test_a_denied_document_has_its_finding_in_violations_in_json(tmp_path: Path) -> None:
    record = json.loads(run("validate", "-p", policy(tmp_path), "-o", "json",
                            write(tmp_path, pod(gpus=2))).stdout)["results"][0]
    assert [v["action"] for v in record["violations"]] == ["deny"]
    assert record["warnings"] == []


def test_audit_findings_have_their_own_list_in_json_and_neither_deny_nor_warn(tmp_path: Path) -> None:
    result = run("validate", "-p", policy(tmp_path, "audit"), "-o", "json", write(tmp_path, pod(gpus=2)))
    record = json.loads(result.stdout)["results"][0]
    assert result.exit_code == 0
    assert (record["violations"], record["warnings"]) == ([], [])
    assert [(a["rule"], a["action"]) for a in record["audit"]] == [("gpu.max", "audit")]


MANY = RuleResult("gpu", "gpu.max", Action.DENY, Outcome.FAIL,
                  (Finding("/spec/containers/0", "too many gpus per container", "one of many"),), dropped=4000)


def test_a_rule_that_kept_some_findings_says_how_many_more_in_every_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine_answers(monkeypatch, MANY)
    source = write(tmp_path, pod("odd"))
    assert "  DENY [gpu/gpu.max] and 4,000 more findings\n" in run("validate", source).stdout
    record = json.loads(run("validate", "-o", "json", source).stdout)["results"][0]
    assert record["dropped"] == [{"policy": "gpu", "rule": "gpu.max", "level": "violations", "count": 4000}]
    sarif = json.loads(run("validate", "-o", "sarif", source).stdout)["runs"][0]["results"]
    assert sarif[-1]["message"]["text"] == "[gpu/gpu.max] and 4,000 more findings"
    failure = ET.fromstring(run("validate", "-o", "junit", source).stdout).find("testcase/failure")
    assert failure is not None and (failure.text or "").endswith("[gpu/gpu.max] and 4,000 more findings")


# --- 3. findings are data all the way out ------------------------------------------------------------------------

# a reason, detail and fix holding the very separators of the one-line format: only fields can tell them apart
AWKWARD = RuleResult("gpu", "gpu.max", Action.WARN, Outcome.WARN,
                     (Finding("/spec/a: b", "odd: reason", "a detail; with: separators", "fix; this: way"),))


def test_every_field_of_a_finding_reaches_json_as_it_was_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_answers(monkeypatch, AWKWARD)
    (warning,) = json.loads(run("validate", "-o", "json", write(tmp_path, pod("odd"))).stdout)["results"][0]["warnings"]
    assert (warning["path"], warning["reason"], warning["detail"], warning["fix"]) == (
        "/spec/a: b", "odd: reason", "a detail; with: separators", "fix; this: way")


def test_the_text_report_prints_the_reason_the_detail_and_the_fix_on_lines_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine_answers(monkeypatch, AWKWARD)
    source = write(tmp_path, pod("odd"))
    lines = run("validate", source).stdout.splitlines()
    at = lines.index("  WARN [gpu/gpu.max] odd: reason")
    assert lines[at + 1:at + 4] == ["       a detail; with: separators", f"       at {source}:6 /spec/a: b",
                                    "       fix: fix; this: way"]


# --- 4. a rule that could not look says so ----------------------------------------------------------------------

UNLOOKED = RuleResult("storage", "storage.shared-claim-rwx", Action.DENY, Outcome.SKIP,
                      note="no cluster facts to look up claim", unchecked=("no cluster facts to look up claim",))


def test_a_rule_that_could_not_look_is_a_skip_with_its_reason_in_every_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine_answers(monkeypatch, UNLOOKED)
    source = write(tmp_path, pod("odd"))
    said = "[storage/storage.shared-claim-rwx] could not check: no cluster facts to look up claim"
    assert f"  SKIP {said}\n" in run("validate", source).stdout
    record = json.loads(run("validate", "-o", "json", source).stdout)["results"][0]
    assert record["unchecked"] == [{"policy": "storage", "rule": "storage.shared-claim-rwx", "action": "deny",
                                    "reason": "no cluster facts to look up claim"}]
    (found,) = json.loads(run("validate", "-o", "sarif", source).stdout)["runs"][0]["results"]
    assert (found["kind"], found["level"], found["message"]["text"]) == ("open", "none", said)
    out = ET.fromstring(run("validate", "-o", "junit", source).stdout).find("testcase/system-out")
    assert out is not None and out.text == f"SKIP {said}"


def test_a_rule_that_does_not_apply_says_nothing_in_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_answers(monkeypatch, RuleResult("gpu", "gpu.max", Action.DENY, Outcome.SKIP, note="no GPUs asked for"))
    assert run("validate", write(tmp_path, pod("odd"))).stdout.splitlines()[1].startswith("1 document(s)")


def test_an_empty_file_is_no_manifests_found_and_exits_2(tmp_path: Path) -> None:
    result = run("validate", write(tmp_path, "# nothing yet\n"))
    assert result.exit_code == 2
    assert "no manifests found" in result.stderr


def test_an_empty_directory_is_no_manifests_found_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run("validate", str(tmp_path / "empty"))
    assert result.exit_code == 2 and "no manifests found" in result.stderr


def test_allow_empty_lets_ci_pass_a_run_with_no_manifests(tmp_path: Path) -> None:
    assert run("validate", "--allow-empty", write(tmp_path, "")).exit_code == 0
    assert run("mutate", "--allow-empty", write(tmp_path, "")).exit_code == 0


# --- 5. sarif and junit ------------------------------------------------------------------------------------------


def test_a_sarif_rule_is_described_by_its_own_summary_and_links_its_documentation(tmp_path: Path) -> None:
    report = json.loads(run("validate", "-p", policy(tmp_path), "-o", "sarif", write(tmp_path, pod(gpus=2))).stdout)
    (rule,) = report["runs"][0]["tool"]["driver"]["rules"]
    assert rule["shortDescription"]["text"] == catalog()["gpu.max"].summary
    assert rule["helpUri"] == f"{DOCS_URL}{RULES_DOC}#gpu.max"
    assert urlsplit(rule["helpUri"]).scheme == "https"  # sarif-2.1.0: helpUri is "format": "uri", absolute


def test_the_sarif_help_uri_takes_its_base_from_docs_url_and_refuses_a_relative_one(tmp_path: Path) -> None:
    manifest = write(tmp_path, pod(gpus=2))
    for base in ("https://docs.example/mlgate/v1", "https://docs.example/mlgate/v1/"):
        report = json.loads(run("validate", "-p", policy(tmp_path), "-o", "sarif", "--docs-url", base, manifest).stdout)
        (rule,) = report["runs"][0]["tool"]["driver"]["rules"]
        assert rule["helpUri"] == "https://docs.example/mlgate/v1/rules.md#gpu.max"
    refused = run("validate", "-o", "sarif", "--docs-url", "docs/", manifest)
    assert refused.exit_code == 2 and "'docs/' is not an absolute http(s) URL" in refused.stderr


def test_every_shipped_rule_has_its_anchor_in_the_rules_document_and_no_anchor_is_left_over() -> None:
    anchors = re.findall(r'<a id="([^"]+)"></a>', (ROOT / "docs" / RULES_DOC).read_text())
    assert sorted(anchors) == sorted([*catalog(), *CRD_CHECKS])


def test_sarif_artifact_uris_are_percent_encoded() -> None:
    assert artifact_uri("my manifests/a#1.yaml") == "my%20manifests/a%231.yaml"
    assert artifact_uri("<stdin>") == "%3Cstdin%3E"


def test_a_junit_test_case_names_its_file_and_line_and_keeps_its_warnings(tmp_path: Path) -> None:
    source = write(tmp_path, pod(gpus=2))
    case = ET.fromstring(run("validate", "-p", policy(tmp_path, "warn"), "-o", "junit", source).stdout).find(
        "testcase")
    assert case is not None and (case.get("file"), case.get("line")) == (source, "1")
    out = case.find("system-out")
    assert out is not None and (out.text or "").startswith("WARN [gpu/gpu.max] too many gpus per container: ")


def test_mlgate_test_writes_junit_with_the_file_and_line_of_each_expectation(tmp_path: Path) -> None:
    write(tmp_path, POLICY.replace("ACTION", "deny"), "policy.yaml")
    write(tmp_path, pod(gpus=2), "resources.yaml")
    suite = write(tmp_path, "apiVersion: mlgate.dev/v1alpha1\nkind: PolicyTest\nmetadata: {name: t}\nspec:\n"
                  "  policies: [policy.yaml]\n  resources: [resources.yaml]\n  results:\n"
                  "    - {policy: gpu, rule: gpu.max, resources: [fine], result: fail}\n"
                  "    - {policy: gpu, rule: gpu.max, resources: [fine], result: pass}\n", "suite.yaml")
    result = run("test", "-o", "junit", suite)
    assert result.exit_code == 1
    cases = ET.fromstring(result.stdout).findall("testsuite/testcase")
    assert [(c.get("file"), c.get("line"), c.find("failure") is not None) for c in cases] == [
        (suite, "8", False), (suite, "9", True)]
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == "expected pass, got fail"
    assert (failure.text or "").startswith("[gpu/gpu.max] too many gpus per container: ")


def test_warn_exit_code_fails_a_run_that_only_warned(tmp_path: Path) -> None:
    source = write(tmp_path, pod(gpus=2))
    assert run("validate", "-p", policy(tmp_path, "warn"), "--warn-exit-code", "3", source).exit_code == 3
    assert run("validate", "-p", policy(tmp_path, "warn"), source).exit_code == 0


def test_warn_exit_code_leaves_a_denial_at_1(tmp_path: Path) -> None:
    source = write(tmp_path, pod(gpus=2))
    assert run("validate", "-p", policy(tmp_path), "--warn-exit-code", "3", source).exit_code == 1


# --- 6. mutate --------------------------------------------------------------------------------------------------


def test_mutate_reports_a_parse_error_once(tmp_path: Path) -> None:
    result = run("mutate", write(tmp_path, BROKEN))
    assert result.exit_code == 2
    assert result.stderr.count("invalid YAML") == 1, result.stderr


# --- 7. text for people -----------------------------------------------------------------------------------------


def test_quiet_shows_only_denied_documents_and_what_blocks_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine_answers(monkeypatch, MANY, AWKWARD)
    source = write(tmp_path, pod("fine") + "---\n" + pod("odd"))
    lines = run("validate", "-q", source).stdout.splitlines()
    assert lines[0] == f"{source}:13 [doc 1] Pod ml/odd: DENIED"
    assert "WARN" not in "\n".join(lines) and "fine" not in "\n".join(lines)
    # "fine" runs as root: restricted warns of runAsNonRoot and of the capabilities the defaults keep
    assert lines[-1] == "2 document(s): 1 allowed, 1 denied, 0 skipped, 0 error(s); 3 warning(s)"  # still counted


def test_a_long_detail_is_wrapped_under_its_entry_within_100_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    detail = " ".join(["word"] * 60)
    engine_answers(monkeypatch, RuleResult("gpu", "gpu.max", Action.DENY, Outcome.FAIL, (Finding("/p", "r", detail),)))
    lines = run("validate", write(tmp_path, pod("odd"))).stdout.splitlines()
    wrapped = [line for line in lines if line.strip().startswith("word")]
    assert len(wrapped) > 1 and all(len(line) <= 100 and line.startswith(" " * 7 + "word") for line in wrapped)
    assert " ".join(w for line in wrapped for w in line.split()) == detail


def test_the_summary_counts_warnings(tmp_path: Path) -> None:
    result = run("validate", "-p", policy(tmp_path, "warn"), write(tmp_path, pod(gpus=2)))
    assert result.stdout.splitlines()[-1] == "1 document(s): 1 allowed, 0 denied, 0 skipped, 0 error(s); 1 warning(s)"
