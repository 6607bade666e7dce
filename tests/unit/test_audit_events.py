"""Warning Events of the audit: due when an object's results turn to fail, shaped as events.k8s.io/v1 wants,
paced by a bucket that never waits. The real engine and the shipped policies judge."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from builders import stored_job

from mlgate.engine import evaluate
from mlgate.loading.policies import load_policy_paths
from mlgate.model.facts import StaticFacts
from mlgate_audit.events import NOTE_LIMIT, Bucket, event_path, warning_event
from mlgate_audit.state import AuditState

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
JOBS = "batch/v1/Job"
FACTS = StaticFacts.from_objects([{"kind": "Namespace", "metadata": {"name": "team-a"}}])
GREEDY = ("batch/v1", "Job", "team-a", "greedy")


@pytest.fixture(scope="module")
def policies():
    return load_policy_paths([REPO / "policies"])


def judge(state, policies):
    state.judge(lambda obj: evaluate(obj, policies, facts=FACTS), FACTS)


def test_an_object_that_fails_when_first_judged_is_due_one_event(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12), stored_job("ok", 1)])
    judge(state, policies)
    assert state.events_due == {GREEDY}
    taken = state.take_events(10)
    assert [key for key, _ in taken] == [GREEDY] and state.events_due == set()


def test_a_resync_that_finds_the_same_failure_is_due_no_event(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    judge(state, policies)
    state.take_events(10)
    state.everything_changed()
    judge(state, policies)
    assert state.events_due == set()


def test_a_job_that_turns_from_pass_to_fail_is_due_an_event(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 2)])
    judge(state, policies)
    assert state.events_due == set()
    state.apply(JOBS, "MODIFIED", stored_job("greedy", 12, generation=2))
    judge(state, policies)
    assert state.events_due == {GREEDY}


def test_a_job_fixed_before_its_event_was_sent_is_told_nothing(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    judge(state, policies)
    state.apply(JOBS, "MODIFIED", stored_job("greedy", 2, generation=2))
    judge(state, policies)
    assert state.events_due == set() and state.take_events(10) == []


def test_failures_the_stored_reports_already_list_are_not_told_again_by_a_new_leader(policies):
    state = AuditState(policies.kinds)
    state.seed_failing({GREEDY})
    state.replace(JOBS, [stored_job("greedy", 12)])
    judge(state, policies)
    assert state.events_due == set()


def test_a_seeded_failure_of_an_object_gone_from_the_list_is_forgotten(policies):
    state = AuditState(policies.kinds)
    state.seed_failing({GREEDY})
    state.replace(JOBS, [stored_job("ok", 1)])
    assert state.failing == set()


def test_the_event_names_the_object_the_rule_and_the_fix(policies):
    state = AuditState(policies.kinds)
    state.replace(JOBS, [stored_job("greedy", 12)])
    judge(state, policies)
    event = warning_event(state.results[GREEDY], NOW, "audit-0")
    assert event["apiVersion"] == "events.k8s.io/v1" and event["type"] == "Warning"
    assert event["reason"] == "PolicyViolation" and event["action"] == "Audit"
    assert event["reportingController"] == "mlgate.dev/audit" and event["reportingInstance"] == "audit-0"
    assert event["eventTime"] == "2026-01-01T12:00:00.123456Z"
    assert event["metadata"]["namespace"] == "team-a" and event["metadata"]["name"].startswith("greedy.")
    assert event["regarding"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "greedy", "namespace": "team-a",
                                  "uid": "uid-greedy"}
    assert event["note"].startswith("mlgate audit: [gpu/gpu.max] ") and "12" in event["note"], event["note"]
    assert event_path(event) == "/apis/events.k8s.io/v1/namespaces/team-a/events"


def test_a_long_note_is_cut_to_the_api_servers_limit(policies):
    state = AuditState(policies.kinds)
    long_name = stored_job("greedy", 12)
    long_name["spec"]["template"]["spec"]["containers"][0]["name"] = "c" * 3000
    state.replace(JOBS, [long_name])
    judge(state, policies)
    note = warning_event(state.results[GREEDY], NOW, "audit-0")["note"]
    assert len(note.encode()) <= NOTE_LIMIT and note.endswith("...")


def test_the_bucket_grants_its_burst_then_its_rate():
    bucket = Bucket(rate=2.0, burst=5)
    assert bucket.take(100, now=0.0) == 5
    assert bucket.take(100, now=0.1) == 0
    assert bucket.take(100, now=1.1) == 2
    assert bucket.take(1, now=100.0) == 1  # never more than the burst saved up
    assert bucket.take(100, now=100.0) == 4
