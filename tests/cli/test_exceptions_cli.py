"""`mlgate validate --exceptions` in every report format, and `mlgate exceptions list`, in-process.

One pod whose two containers add NET_ADMIN, one policy, one exception; each test changes one thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from click.testing import CliRunner, Result

from mlgate.cli.main import cli

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: rdma, namespace: ml}
spec:
  containers:
    - name: main
      image: registry.example/train:1.0
      securityContext: {capabilities: {add: [NET_ADMIN]}}
    - name: nccl
      image: registry.example/nccl:1.0
      securityContext: {capabilities: {add: [NET_ADMIN]}}
"""
POLICY = """\
apiVersion: mlgate.dev/v1alpha1
kind: ClusterMLPolicy
metadata: {name: psa}
spec:
  rules:
    - rule: pod-security.baseline
"""
EXCEPTION = """\
apiVersion: mlgate.dev/v1alpha1
kind: MLPolicyException
metadata: {name: rdma-net-admin, namespace: ml}
spec:
  policy: psa
  rules: [pod-security.baseline]
  match: {names: [rdma]}
  expiresAt: "2099-01-31T00:00:00Z"
  reason: RDMA needs NET_ADMIN (NET-1234)
"""
MESSAGE = "[psa/pod-security.baseline] 2 finding(s) excepted by MLPolicyException ml/rdma-net-admin until " \
          "2099-01-31T00:00:00Z"


def run(tmp_path: Path, *args: str, exception: str = EXCEPTION, policy: str = POLICY) -> Result:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "exceptions.yaml").write_text(exception)
    return CliRunner().invoke(cli, ["validate", "-p", str(tmp_path / "policy.yaml"), "--exceptions",
                                    str(tmp_path / "exceptions.yaml"), *args, str(tmp_path / "pod.yaml")])


def test_without_the_exception_the_pod_is_denied(tmp_path: Path):
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "policy.yaml").write_text(POLICY)
    result = CliRunner().invoke(cli, ["validate", "-p", str(tmp_path / "policy.yaml"), str(tmp_path / "pod.yaml")])
    assert result.exit_code == 1


def test_the_text_report_says_what_the_exception_excepted(tmp_path: Path):
    result = run(tmp_path)
    assert result.exit_code == 0, result.output
    assert f"  SKIP {MESSAGE}\n" in result.output.replace("\n       ", " ")


def test_the_json_report_carries_the_exception_as_data(tmp_path: Path):
    result = run(tmp_path, "-o", "json")
    (record,) = json.loads(result.output)["results"]
    assert record["status"] == "allowed"
    assert record["excepted"] == [{"policy": "psa", "rule": "pod-security.baseline", "namespace": "ml",
                                   "name": "rdma-net-admin", "expires": "2099-01-31T00:00:00Z", "count": 2,
                                   "expired": False}]


def test_sarif_reports_the_excepted_findings_as_suppressed(tmp_path: Path):
    (result,) = json.loads(run(tmp_path, "-o", "sarif").output)["runs"][0]["results"]
    assert result["message"]["text"] == MESSAGE
    assert result["suppressions"] == [{"kind": "external", "status": "accepted",
                                       "justification": "MLPolicyException ml/rdma-net-admin until "
                                                        "2099-01-31T00:00:00Z"}]


def test_junit_reports_the_exception_in_the_test_case_output(tmp_path: Path):
    case = ET.fromstring(run(tmp_path, "-o", "junit").output).find("testcase")
    assert case is not None and case.find("failure") is None
    assert case.findtext("system-out") == f"SKIP {MESSAGE}"


def test_an_expired_exception_excepts_nothing_and_is_named(tmp_path: Path):
    expired = EXCEPTION.replace("2099-01-31T00:00:00Z", "2020-01-31T00:00:00Z")
    result = run(tmp_path, exception=expired)
    assert result.exit_code == 1
    assert "  NOTE [psa/pod-security.baseline] MLPolicyException ml/rdma-net-admin expired at 2020-01-31T00:00:00Z; " \
           "its findings stand" in result.output.replace("\n       ", " ")


def test_a_container_narrowing_leaves_the_other_containers_finding(tmp_path: Path):
    narrow = EXCEPTION.replace("  match:", "  containers: [nccl]\n  match:")
    result = run(tmp_path, "-o", "json", exception=narrow)
    (record,) = json.loads(result.output)["results"]
    assert [v["path"] for v in record["violations"]] == ["/spec/containers/0/securityContext/capabilities/add/0"]
    assert record["excepted"][0]["count"] == 1


def test_an_exception_the_policy_does_not_allow_is_a_load_error_with_its_line(tmp_path: Path):
    closed = POLICY.replace("spec:\n", "spec:\n  allowExceptions: false\n")
    result = run(tmp_path, policy=closed)
    assert result.exit_code == 2
    assert result.output == (f"mlgate: exception error: {tmp_path / 'exceptions.yaml'}:6: spec.rules[0]: policy 'psa' "
                             "allows no exceptions (allowExceptions: false), so 'pod-security.baseline' cannot be "
                             "excepted\n")


def test_exceptions_list_shows_who_is_excepted_from_what_until_when(tmp_path: Path):
    expired = EXCEPTION.replace("rdma-net-admin", "old").replace("2099", "2020")
    (tmp_path / "exceptions.yaml").write_text(EXCEPTION + "---\n" + expired.replace("  match:", "  capabilities: "
                                                                                     "[NET_ADMIN]\n  match:"))
    result = CliRunner().invoke(cli, ["exceptions", "list", "--exceptions", str(tmp_path / "exceptions.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "ml/old: EXPIRED at 2020-01-31T00:00:00Z\n"
        "  excepts psa [pod-security.baseline] for objects named rdma in ml\n"
        "  only capabilities NET_ADMIN\n"
        "  reason: RDMA needs NET_ADMIN (NET-1234)\n"
        f"  from {tmp_path / 'exceptions.yaml'}\n"
        "ml/rdma-net-admin: live until 2099-01-31T00:00:00Z\n"
        "  excepts psa [pod-security.baseline] for objects named rdma in ml\n"
        "  reason: RDMA needs NET_ADMIN (NET-1234)\n"
        f"  from {tmp_path / 'exceptions.yaml'}\n"
        "2 exception(s), 1 expired\n")


def test_exceptions_list_as_json_flags_the_expired(tmp_path: Path):
    selector = EXCEPTION.replace("{names: [rdma]}", "{selector: {matchLabels: {app: rdma}}}").replace("2099", "2020")
    (tmp_path / "exceptions.yaml").write_text(selector)
    result = CliRunner().invoke(cli, ["exceptions", "list", "--exceptions", str(tmp_path / "exceptions.yaml"),
                                      "-o", "json"])
    listed = json.loads(result.output)
    assert listed["expired"] == 1
    (entry,) = listed["exceptions"]
    assert (entry["match"], entry["expired"]) == ({"selector": {"matchLabels": {"app": "rdma"}}}, True)


def test_exceptions_list_checks_against_policies_when_given(tmp_path: Path):
    (tmp_path / "exceptions.yaml").write_text(EXCEPTION)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("psa", "other"))
    result = CliRunner().invoke(cli, ["exceptions", "list", "--exceptions", str(tmp_path / "exceptions.yaml"),
                                      "-p", str(tmp_path / "policy.yaml")])
    assert result.exit_code == 2
    assert "spec.policy: no policy 'psa' is in force here" in result.output
