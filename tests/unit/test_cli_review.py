"""`mlgate validate` in-process: one minimal valid manifest, one change per test.

The engine is replaced where a test needs it to fail in a way real input may stop causing
once the engine is fixed (a crash, a rule that cannot evaluate), so these tests keep
checking the CLI's own handling.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import mlgate.cli.namespaces as namespaces
from mlgate.cli.main import cli
from mlgate.model.results import Action, Decision, FailurePolicy, Outcome, RuleResult

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
"""
POLICY = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: warnonly}
spec:
  failurePolicy: Fail
  rules:
    - rule: gpu.max
      action: warn
"""


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    logger = logging.getLogger("mlgate")
    handlers = list(logger.handlers)
    yield
    logger.handlers[:] = handlers


@pytest.fixture
def policy(tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return str(path)


def write(tmp_path: Path, text: str, name: str = "in.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def validate(*args: str) -> Result:
    return CliRunner().invoke(cli, ["validate", *args], catch_exceptions=False)


def engine_that(monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    """Replace the engine for objects named "odd"; the others get the real one."""
    real = namespaces.evaluate

    def fake(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Decision:
        if obj["metadata"]["name"] != "odd":
            return real(obj, *args, **kwargs)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(namespaces, "evaluate", fake)


def test_an_engine_crash_on_one_document_is_its_error_and_the_next_document_is_still_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str,
) -> None:
    engine_that(monkeypatch, AttributeError("'str' object has no attribute 'get'\nsecond line"))
    source = write(tmp_path, POD.format(name="odd") + "---\n" + POD.format(name="fine"))
    result = validate("-p", policy, "-o", "json", source)
    report = json.loads(result.stdout)
    assert result.exit_code == 2
    odd, fine = report["results"]
    assert (odd["status"], odd["line"], odd["name"]) == ("error", 1, "odd")
    assert odd["error"] == "could not evaluate: AttributeError: 'str' object has no attribute 'get'"
    assert fine["status"] == "allowed"
    assert report["summary"]["errors"] == 1
    assert result.stderr == f"mlgate: {source}:1: {odd['error']}\n"


def test_an_engine_crash_shows_in_text_with_the_object_it_happened_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str,
) -> None:
    engine_that(monkeypatch, TypeError("boom"))
    source = write(tmp_path, POD.format(name="odd"))
    result = validate("-p", policy, source)
    assert result.exit_code == 2
    head = " ".join(result.stdout.split("\n1 document(s)")[0].split())  # wrapped at 100 columns
    assert head == f"{source}:1 [doc 0] Pod ml/odd: ERROR could not evaluate: TypeError: boom"


BLOCKING_ERROR = Decision(allowed=False, results=[RuleResult(
    "warnonly", "gpu.max", Action.WARN, Outcome.ERROR, note="TypeError: 'int' object is not iterable",
    failure_policy=FailurePolicy.FAIL)])


def test_a_warn_rule_that_cannot_evaluate_under_fail_is_labelled_an_error_in_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str,
) -> None:
    engine_that(monkeypatch, BLOCKING_ERROR)
    result = validate("-p", policy, write(tmp_path, POD.format(name="odd")))
    assert result.exit_code == 1
    assert "  ERROR [warnonly/gpu.max] could not evaluate: TypeError: 'int' object is not iterable" in result.stdout
    assert "WARN" not in result.stdout


def test_a_warn_rule_that_cannot_evaluate_under_fail_is_labelled_an_error_in_json_and_sarif(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str,
) -> None:
    engine_that(monkeypatch, BLOCKING_ERROR)
    source = write(tmp_path, POD.format(name="odd"))
    (violation,) = json.loads(validate("-p", policy, "-o", "json", source).stdout)["results"][0]["violations"]
    (found,) = json.loads(validate("-p", policy, "-o", "sarif", source).stdout)["runs"][0]["results"]
    assert violation["action"] == "error"
    assert found["level"] == "error"


def test_a_rule_that_raises_is_one_line_on_stderr_without_a_traceback(
    tmp_path: Path, policy: str, capsys: pytest.CaptureFixture[str],
) -> None:
    validate("-p", policy, write(tmp_path, POD.format(name="fine")))  # sets up the CLI's logging
    capsys.readouterr()
    try:
        raise ValueError("bad value\nmore detail")
    except ValueError:
        logging.getLogger("mlgate.engine").exception("check %s/%s failed", "p", "r")
    assert capsys.readouterr().err == "mlgate: check p/r failed: ValueError: bad value\n"


LIST = """\
apiVersion: v1
kind: List
items:
  - just-a-string
  - apiVersion: v1
    kind: Pod
    metadata: {name: in-list}
    spec:
      hostNetwork: true
      containers: [{name: main, image: registry.example/train:1.0}]
"""


def test_a_list_item_that_is_not_an_object_is_an_error_at_its_line_and_the_others_are_judged(
    tmp_path: Path,
) -> None:
    result = validate("-o", "json", write(tmp_path, LIST))
    bad, pod = json.loads(result.stdout)["results"]
    assert result.exit_code == 2
    assert (bad["item"], bad["line"], bad["status"]) == (0, 4, "error")
    assert bad["error"] == "line 4: item 0 is a str, not a Kubernetes object"
    assert (pod["item"], pod["line"], pod["status"]) == (1, 5, "denied")
    denial = next(v for v in pod["violations"] if v["action"] == "deny")
    assert (denial["path"], denial["line"]) == ("/items/1/spec/hostNetwork", 9)
    assert all(op["path"].startswith("/items/1/") for op in pod["patch"])


def test_an_empty_list_is_reported_like_any_other_kind(tmp_path: Path) -> None:
    result = validate(write(tmp_path, "apiVersion: v1\nkind: List\nitems: []\n"))
    assert result.exit_code == 0
    assert "skipped (no pod template to judge: v1/List)" in result.stdout


def test_a_name_yaml_reads_as_a_date_is_reported_as_text(tmp_path: Path) -> None:
    result = validate("-o", "json", write(tmp_path, POD.format(name="2024-01-01")))
    assert json.loads(result.stdout)["results"][0]["name"] == "2024-01-01"


def test_a_namespaced_object_without_a_namespace_is_placed_in_the_one_given() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    assert namespaces.in_namespace(pod, "team")["metadata"] == {"name": "p", "namespace": "team"}
    assert pod["metadata"] == {"name": "p"}


def test_an_object_that_names_its_namespace_keeps_it() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}
    assert namespaces.in_namespace(pod, "team") is pod


def test_a_cluster_scoped_object_gets_no_namespace() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    assert namespaces.in_namespace(node, "team") is node


def test_a_policy_file_with_no_policy_in_it_is_an_error_not_an_empty_set(tmp_path: Path) -> None:
    empty = write(tmp_path, "# nothing yet\n", "policies.yaml")
    result = validate("-p", empty, write(tmp_path, POD.format(name="fine")))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"mlgate: policy error: {empty}: no MLPolicy or ClusterMLPolicy documents\n"
