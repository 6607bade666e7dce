"""The PolicyReport builder: engine results in, wgpolicyk8s.io / openreports.io report objects out.

Every case starts from one job with one failed rule (`judged()`) and changes one thing. The reports are also
checked against the upstream CRDs' schemas (manifests/reports/), as the API server would check them.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mlgate.loading.schemas import SchemaCatalog
from mlgate.model.results import MESSAGES_PER_RULE, Action, ExceptionRef, Finding, Outcome, RuleResult
from mlgate.reports import (
    OPENREPORTS,
    WGPOLICY,
    Judged,
    ObjectRef,
    build_reports,
    dumps,
    list_everything,
    timestamp,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2030, 1, 31, 12, 0, 0, 250_000, tzinfo=UTC)
JOB = ObjectRef(kind="PyTorchJob", name="resnet", namespace="research", api_version="kubeflow.org/v1",
                uid="6b1c3a40-0000-4000-8000-000000000001")
FINDING = Finding("/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/securityContext/privileged",
                  "privileged", 'container "pytorch" must not set securityContext.privileged=true',
                  "remove privileged")
FAILED = RuleResult("pod-security", "pod-security.baseline", Action.DENY, Outcome.FAIL, (FINDING,))


def judged(*results: RuleResult, ref: ObjectRef = JOB) -> Judged:
    return Judged(ref, results or (FAILED,))


def only_report(*items: Judged, **options: Any) -> dict[str, Any]:
    reports = build_reports(items, now=NOW, **options)
    assert len(reports) == 1, [r["metadata"] for r in reports]
    return reports[0]


def only_result(*results: RuleResult, **options: Any) -> dict[str, Any]:
    listed = only_report(judged(*results), **options)["results"]
    assert len(listed) == 1, listed
    return listed[0]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def upstream() -> SchemaCatalog:
    return SchemaCatalog.from_paths([ROOT / "manifests" / "reports"])


def refusals(catalog: SchemaCatalog, report: dict[str, Any]) -> list[str]:
    verdict = catalog.check(report)
    assert verdict is not None, f"no upstream CRD describes {report['apiVersion']} {report['kind']}"
    return [f"{v.path}: {v.reason}: {v.detail}" for v in verdict.violations]


def test_a_failed_rule_is_a_fail_result_naming_the_object_the_field_and_the_fix() -> None:
    result = only_result()
    assert result == {
        "policy": "pod-security", "rule": "pod-security.baseline", "result": "fail", "severity": "high",
        "scored": True, "category": "pod-security", "source": "mlgate",
        "timestamp": {"seconds": 1896091200, "nanos": 250_000_000},
        "resources": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet",
                       "namespace": "research", "uid": "6b1c3a40-0000-4000-8000-000000000001"}],
        "properties": {"path": FINDING.path, "reason": "privileged", "fix": "remove privileged"},
        "message": FINDING.detail,
    }


def test_a_warning_is_a_warn_result_of_medium_severity() -> None:
    result = only_result(replace(FAILED, action=Action.WARN, outcome=Outcome.WARN))
    assert (result["result"], result["severity"]) == ("warn", "medium")


def test_an_audit_finding_is_a_warn_result_of_low_severity() -> None:
    result = only_result(replace(FAILED, action=Action.AUDIT, outcome=Outcome.WARN))
    assert (result["result"], result["severity"]) == ("warn", "low")


def test_a_rule_that_could_not_evaluate_is_an_error_result_saying_why() -> None:
    result = only_result(replace(FAILED, outcome=Outcome.ERROR, findings=(), note="gpu count is not a number"))
    assert result["result"] == "error"
    assert result["message"] == "could not evaluate: gpu count is not a number"
    assert "properties" not in result


def test_a_pass_is_counted_in_the_summary_but_not_listed() -> None:
    report = only_report(judged(replace(FAILED, outcome=Outcome.PASS, findings=())))
    assert report["results"] == []
    assert report["summary"] == {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}


def test_a_pass_is_listed_when_everything_is_asked_for() -> None:
    result = only_result(replace(FAILED, outcome=Outcome.PASS, findings=()), listed=list_everything)
    assert result["result"] == "pass"
    assert "message" not in result


def test_a_skip_is_counted_in_the_summary_but_not_listed() -> None:
    report = only_report(judged(replace(FAILED, outcome=Outcome.SKIP, findings=(), note="no GPUs requested")))
    assert report["results"] == []
    assert report["summary"]["skip"] == 1


def test_a_skip_that_could_not_look_is_listed_with_what_it_could_not_check() -> None:
    result = only_result(replace(FAILED, outcome=Outcome.SKIP, findings=(), unchecked=("no cluster facts",)))
    assert (result["result"], result["message"]) == ("skip", "could not check: no cluster facts")


def test_a_skip_by_an_exception_is_listed_naming_the_exception_and_its_expiry() -> None:
    ref = ExceptionRef("research", "nccl-net-admin", datetime(2030, 3, 1, tzinfo=UTC))
    result = only_result(replace(FAILED, outcome=Outcome.SKIP, findings=(), exceptions=(ref,), excepted=1,
                                 note="excepted by MLPolicyException research/nccl-net-admin"))
    assert result["result"] == "skip"
    assert result["properties"] == {"exceptions": "research/nccl-net-admin (until 2030-03-01T00:00:00Z)"}


def test_an_expired_exception_is_named_beside_the_failure_it_no_longer_excepts() -> None:
    ref = ExceptionRef("research", "nccl-net-admin", datetime(2030, 1, 1, tzinfo=UTC))
    result = only_result(replace(FAILED, expired=(ref,)))
    assert result["result"] == "fail"
    assert result["properties"]["expiredExceptions"] == "research/nccl-net-admin (expired 2030-01-01T00:00:00Z)"


def test_each_finding_of_a_rule_is_a_result_of_its_own() -> None:
    other = Finding("/spec/x/containers/1/securityContext/privileged", "privileged", "container b is", "remove it")
    listed = only_report(judged(replace(FAILED, findings=(FINDING, other))))["results"]
    assert [r["properties"]["path"] for r in listed] == [FINDING.path, other.path]


def test_findings_past_the_message_limit_are_counted_in_one_more_result() -> None:
    many = tuple(replace(FINDING, path=f"/spec/containers/{i}/securityContext/privileged") for i in range(25))
    report = only_report(judged(replace(FAILED, findings=many, dropped=5)))
    assert len(report["results"]) == MESSAGES_PER_RULE + 1
    assert report["results"][-1]["message"] == "and 10 more findings"
    assert report["summary"]["fail"] == MESSAGES_PER_RULE + 1


def test_an_object_known_only_offline_is_referenced_without_a_uid() -> None:
    result = only_report(judged(ref=replace(JOB, uid="")))["results"][0]
    assert result["resources"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "resnet",
                                    "namespace": "research"}]


def test_an_object_with_no_results_is_in_no_report() -> None:
    assert build_reports([Judged(JOB)], now=NOW) == []


def test_each_namespace_gets_its_own_policyreport_named_mlgate() -> None:
    reports = build_reports([judged(ref=replace(JOB, namespace="vision")), judged()], now=NOW)
    assert [(r["kind"], r["metadata"]["namespace"], r["metadata"]["name"]) for r in reports] == [
        ("PolicyReport", "research", "mlgate"), ("PolicyReport", "vision", "mlgate")]
    assert reports[0]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "mlgate"}


def test_cluster_scoped_objects_go_to_a_clusterpolicyreport() -> None:
    runtime = ObjectRef(kind="ClusterTrainingRuntime", name="torch", api_version="trainer.kubeflow.org/v1alpha1")
    report = only_report(judged(ref=runtime))
    assert report["kind"] == "ClusterPolicyReport"
    assert report["metadata"] == {"name": "mlgate", "labels": {"app.kubernetes.io/managed-by": "mlgate"}}
    assert "namespace" not in report["results"][0]["resources"][0]


def test_the_openreports_api_writes_reports_and_clusterreports_naming_the_source_once_more() -> None:
    runtime = ObjectRef(kind="ClusterTrainingRuntime", name="torch", api_version="trainer.kubeflow.org/v1alpha1")
    reports = build_reports([judged(), judged(ref=runtime)], now=NOW, api=OPENREPORTS)
    assert [(r["apiVersion"], r["kind"]) for r in reports] == [
        ("openreports.io/v1alpha1", "ClusterReport"), ("openreports.io/v1alpha1", "Report")]
    assert all(r["source"] == "mlgate" for r in reports)
    assert reports[1]["results"] == build_reports([judged()], now=NOW)[0]["results"]


def test_an_unknown_report_api_is_refused() -> None:
    with pytest.raises(ValueError, match="report api 'v1'"):
        build_reports([judged()], now=NOW, api="v1")  # type: ignore[arg-type]


def test_results_are_sorted_so_the_same_verdicts_serialize_to_the_same_bytes() -> None:
    warned = replace(FAILED, policy="gpu", rule="gpu.max", action=Action.WARN, outcome=Outcome.WARN)
    items = [judged(FAILED, warned, ref=replace(JOB, name=f"job-{i}")) for i in range(20)]
    first = [dumps(r) for r in build_reports(items, now=NOW)]
    shuffled = [Judged(i.ref, tuple(random.Random(n).sample(i.results, 2))) for n, i in enumerate(items)]
    random.Random(7).shuffle(shuffled)
    assert [dumps(r) for r in build_reports(shuffled, now=NOW)] == first
    names = [(r["resources"][0]["name"], r["policy"]) for r in build_reports(items, now=NOW)[0]["results"]]
    assert names == sorted(names)


def test_a_namespace_over_the_budget_is_split_into_reports_each_within_it() -> None:
    items = [judged(ref=replace(JOB, name=f"job-{i:03d}")) for i in range(200)]
    budget = 20_000
    reports = build_reports(items, now=NOW, budget=budget)
    assert len(reports) > 1
    assert [r["metadata"]["name"] for r in reports][:2] == [f"mlgate-1-of-{len(reports)}",
                                                            f"mlgate-2-of-{len(reports)}"]
    assert all(len(dumps(r)) <= budget + 1000 for r in reports)  # the results within it, plus the envelope
    assert sum(r["summary"]["fail"] for r in reports) == 200


def test_a_change_to_one_object_changes_only_the_report_it_lands_in() -> None:
    items = [judged(ref=replace(JOB, name=f"job-{i:03d}")) for i in range(200)]
    before = [dumps(r) for r in build_reports(items, now=NOW, budget=20_000)]
    items[17] = judged(replace(FAILED, action=Action.WARN, outcome=Outcome.WARN), ref=items[17].ref)
    after = [dumps(r) for r in build_reports(items, now=NOW, budget=20_000)]
    assert len(before) == len(after)
    assert sum(b != a for b, a in zip(before, after, strict=True)) == 1


def test_a_naive_time_is_taken_as_utc() -> None:
    assert timestamp(datetime(1970, 1, 1, 0, 1, 0, 5)) == {"seconds": 60, "nanos": 5000}


@pytest.mark.parametrize("api", [WGPOLICY, OPENREPORTS])
def test_every_outcome_holds_to_the_upstream_crd_schema(upstream: SchemaCatalog, api: Any) -> None:
    ref = ExceptionRef("research", "nccl-net-admin", datetime(2030, 3, 1, tzinfo=UTC))
    results = (FAILED, replace(FAILED, rule="pod-security.restricted", action=Action.AUDIT, outcome=Outcome.WARN),
               replace(FAILED, rule="a.error", outcome=Outcome.ERROR, findings=(), note="broken"),
               replace(FAILED, rule="a.pass", outcome=Outcome.PASS, findings=()),
               replace(FAILED, rule="a.skip", outcome=Outcome.SKIP, findings=(), exceptions=(ref,)))
    runtime = ObjectRef(kind="ClusterTrainingRuntime", name="torch", api_version="trainer.kubeflow.org/v1alpha1")
    reports = build_reports([judged(*results), judged(*results, ref=runtime)], now=NOW, api=api,
                            listed=list_everything)
    assert len(reports) == 2
    for report in reports:
        assert {r["result"] for r in report["results"]} == {"pass", "fail", "warn", "error", "skip"}
        assert refusals(upstream, report) == []


def test_the_schema_check_would_catch_a_result_outside_the_crd_enum(upstream: SchemaCatalog) -> None:
    report = only_report(judged())
    report["results"][0]["result"] = "denied"
    assert refusals(upstream, report)
