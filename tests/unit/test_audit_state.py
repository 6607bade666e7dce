"""The audit's state: what is judged again, and when a report is written, with the real engine and policies."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path

import pytest
from builders import stored_job

from mlgate.engine import evaluate
from mlgate.loading.policies import load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate_audit.state import AuditState

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
JOBS = "batch/v1/Job"


@pytest.fixture(scope="module")
def policies():
    return load_policy_paths([REPO / "policies"])


def facts(**labels):
    return StaticFacts.from_objects([{"kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}])


def run(state, policies, known=None):
    """One round: judge everything dirty, then the reports; they count as written."""
    known = known or facts()
    state.judge(lambda obj: evaluate(obj, policies, facts=known), known)
    writes, deletes = state.reports(NOW)
    for report in writes:
        state.wrote(report)
    for namespace, name in deletes:
        state.deleted(namespace, name)
    return writes, deletes


def failed_rules(report):
    return sorted((r["resources"][0]["name"], r["rule"]) for r in report["results"] if r["result"] == "fail")


def test_a_violating_job_gets_one_report_with_its_failure(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("ok", 1), stored_job("greedy", 12)])
    writes, _ = run(state, policies)
    assert len(writes) == 1 and writes[0]["kind"] == "PolicyReport"
    assert writes[0]["metadata"] == {"name": "mlgate", "namespace": "team-a",
                                     "labels": {"app.kubernetes.io/managed-by": "mlgate"}}
    assert failed_rules(writes[0]) == [("greedy", "gpu.max")]


def test_a_status_update_judges_nothing_and_writes_nothing(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    run(state, policies)
    updated = {**stored_job("greedy", 12), "status": {"active": 1}}
    state.apply(JOBS, "MODIFIED", updated)
    assert not state.dirty
    assert run(state, policies) == ([], [])


def test_a_resync_that_changes_nothing_writes_nothing(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    run(state, policies)
    state.everything_changed()
    assert run(state, policies) == ([], [])


def test_a_fixed_job_costs_one_write(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12), stored_job("ok", 1)])
    run(state, policies)
    state.apply(JOBS, "MODIFIED", stored_job("greedy", 2, generation=2))
    writes, deletes = run(state, policies)
    assert len(writes) == 1 and not deletes
    assert failed_rules(writes[0]) == []


def test_jobs_in_an_opted_out_namespace_are_reported_once_the_opt_out_is_removed(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    assert run(state, policies, facts(**{"mlgate.dev/ignore": "true"})) == ([], [])
    state.namespace_changed("team-a")
    writes, _ = run(state, policies, facts())
    assert failed_rules(writes[0]) == [("greedy", "gpu.max")]


def test_a_tightened_policy_changes_the_report(policies, tmp_path):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("four", 4)])
    assert failed_rules(run(state, policies)[0][0]) == []
    tight = tmp_path / "gpu.yaml"
    text = (REPO / "policies" / "gpu.yaml").read_text(encoding="utf-8").replace("perContainer: 8", "perContainer: 2")
    assert text != (REPO / "policies" / "gpu.yaml").read_text(encoding="utf-8")
    tight.write_text(text, encoding="utf-8")
    tightened = load_policy_paths([tight])
    state.everything_changed()
    writes, _ = run(state, tightened)
    assert failed_rules(writes[0]) == [("four", "gpu.max")]


def test_the_last_object_gone_deletes_its_report(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    run(state, policies)
    state.apply(JOBS, "DELETED", stored_job("greedy", 12))
    assert run(state, policies) == ([], [("team-a", "mlgate")])
    assert state.written == {}


def test_a_list_without_an_object_drops_it_as_a_delete_would(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12), stored_job("ok", 1)])
    run(state, policies)
    state.replace(JOBS, [stored_job("ok", 1)])
    writes, _ = run(state, policies)
    assert failed_rules(writes[0]) == []


def test_a_job_s_pods_are_left_to_their_job(policies):
    state = AuditState(policies.kinds)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "greedy-x", "namespace": "team-a",
           "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "greedy", "controller": True}]},
           "spec": copy.deepcopy(stored_job("greedy", 12)["spec"]["template"]["spec"])}
    state.replace("v1/Pod", [pod])
    assert state.objects == {}


def test_memory_holds_one_copy_per_object_however_many_updates(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    for generation in range(2, 200):
        state.apply(JOBS, "MODIFIED", {**stored_job("greedy", 12, generation), "metadata": {
            **stored_job("greedy", 12)["metadata"], "generation": generation, "managedFields": [{"x": generation}]}})
        run(state, policies)
    assert len(state.objects) == len(state.seen) == len(state.results) == 1
    assert "managedFields" not in state.objects[("batch/v1", "Job", "team-a", "greedy")]["metadata"]
    assert len(state.written) == 1
