from typing import Any

from mlgate_reconciler.children import drift
from mlgate_reconciler.reconcile import pods_to_clean
from mlgate_reconciler.status import Observation, compute_status, replica_statuses, set_condition

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
EXPECTED = {"Master": 1, "Worker": 2}


def pod(name: str, role: str, phase: str | None = "Pending") -> dict[str, Any]:
    status = {"phase": phase} if phase else {}
    return {"metadata": {"name": name, "labels": {"mlgate.dev/replica-type": role}}, "status": status}


def pods(*phases: str | None) -> list[dict[str, Any]]:
    names = [("llm-master-0", "master"), ("llm-worker-0", "worker"), ("llm-worker-1", "worker")]
    return [pod(name, role, phase) for (name, role), phase in zip(names, phases, strict=False)]


def seen(*phases: str | None, created: bool = True, violation: str | None = None) -> Observation:
    return Observation(pods=pods(*phases), expected=EXPECTED, created=created, violation=violation)


def cond(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status["conditions"] if c["type"] == kind), None)


def test_a_job_whose_children_all_exist_is_created_with_a_start_time():
    status = compute_status(None, 1, seen("Pending", "Pending", "Pending"), T0)
    assert status["phase"] == "Created"
    assert cond(status, "Created") == {"type": "Created", "status": "True", "reason": "ChildrenCreated",
                                       "message": "every pod and service of the job exists", "lastTransitionTime": T0}
    assert status["startTime"] == T0
    assert status["observedGeneration"] == 1
    assert "completionTime" not in status


def test_a_job_with_children_missing_is_pending_without_conditions():
    status = compute_status(None, 1, seen("Pending", created=False), T0)
    assert (status["phase"], status["conditions"]) == ("Pending", [])
    assert "startTime" not in status


def test_the_same_observation_twice_gives_an_equal_status_so_nothing_is_written():
    first = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    assert compute_status(first, 1, seen("Running", "Running", "Running"), T1) == first


def test_running_needs_every_expected_pod_running():
    assert compute_status(None, 1, seen("Running", "Running", "Pending"), T0)["phase"] == "Created"
    status = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    assert status["phase"] == "Running"
    assert cond(status, "Running")["reason"] == "AllReplicasRunning"


def test_all_succeeded_makes_the_job_succeeded_with_completion_time_and_running_false():
    running = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    done = compute_status(running, 1, seen("Succeeded", "Succeeded", "Succeeded"), T1)
    assert done["phase"] == "Succeeded"
    assert done["completionTime"] == T1
    assert done["startTime"] == T0
    assert cond(done, "Running")["status"] == "False"
    assert cond(done, "Running")["lastTransitionTime"] == T1
    assert cond(done, "Succeeded")["status"] == "True"


def test_a_failed_pod_fails_the_job_and_names_the_pod():
    status = compute_status(None, 1, seen("Running", "Failed", "Running"), T0)
    assert status["phase"] == "Failed"
    failed = cond(status, "Failed")
    assert failed["reason"] == "PodFailed"
    assert "'llm-worker-0'" in failed["message"]
    assert status["completionTime"] == T0


def test_a_finished_job_stays_finished_when_its_pods_change():
    done = compute_status(None, 1, seen("Succeeded", "Succeeded", "Succeeded"), T0)
    assert compute_status(done, 1, seen(created=False), T1) == done


def test_a_policy_violation_fails_the_job_with_the_engines_message_and_no_replica_counts():
    status = compute_status(None, 3, seen(created=False, violation="denied by policy: [gpu/gpu.max] too many"), T0)
    assert status["phase"] == "Failed"
    failed = cond(status, "Failed")
    assert (failed["reason"], failed["message"]) == ("PolicyViolation", "denied by policy: [gpu/gpu.max] too many")
    assert cond(status, "Created") is None
    assert "replicaStatuses" not in status and "startTime" not in status


def test_replica_statuses_count_pods_by_role_label_and_phase():
    counts = replica_statuses(pods("Running", "Succeeded", None), EXPECTED)
    assert counts == {"Master": {"active": 1, "succeeded": 0, "failed": 0},
                      "Worker": {"active": 1, "succeeded": 1, "failed": 0}}


def test_a_condition_keeps_its_transition_time_when_only_the_message_changes():
    first = set_condition([], "Running", "True", "AllReplicasRunning", "a", now=T0)
    second = set_condition(first, "Running", "True", "AllReplicasRunning", "b", now=T1)
    assert second[0]["lastTransitionTime"] == T0 and second[0]["message"] == "b"
    flipped = set_condition(second, "Running", "False", "JobSucceeded", "c", now=T2)
    assert flipped[0]["lastTransitionTime"] == T2
    assert first[0]["message"] == "a"  # the input is not modified


def test_a_running_job_fails_with_deadline_exceeded_once_its_active_deadline_has_passed():
    running = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    with_deadline = Observation(pods=pods("Running", "Running", "Running"), expected=EXPECTED, created=True,
                                deadline_seconds=120)
    assert compute_status(running, 1, with_deadline, T1)["phase"] == "Running"
    expired = compute_status(running, 1, with_deadline, T2)
    assert (expired["phase"], cond(expired, "Failed")["reason"]) == ("Failed", "DeadlineExceeded")
    assert expired["completionTime"] == T2


def failed_job(reason: str) -> dict[str, Any]:
    return {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "reason": reason}]}


def test_clean_pod_policy_running_deletes_only_unfinished_pods_and_none_keeps_all():
    live = pods("Running", "Failed", None)
    assert pods_to_clean(failed_job("PodFailed"), live, "Running") == ["llm-master-0", "llm-worker-1"]
    assert pods_to_clean(failed_job("PodFailed"), live, "None") == []
    assert pods_to_clean(failed_job("PodFailed"), live, "All") == ["llm-master-0", "llm-worker-0", "llm-worker-1"]


def test_an_expired_deadline_deletes_unfinished_pods_even_with_clean_pod_policy_none():
    assert pods_to_clean(failed_job("DeadlineExceeded"), pods("Running", "Succeeded"), "None") == ["llm-master-0"]


def test_a_running_job_has_no_pods_to_clean():
    assert pods_to_clean({"phase": "Running"}, pods("Running"), "All") == []


def test_drift_ignores_fields_the_api_server_adds_but_not_changed_owned_values():
    wanted = {"spec": {"selector": {"a": "1"}, "ports": [{"port": 1}]}}
    assert not drift(wanted, {"spec": {"selector": {"a": "1"}, "ports": [{"port": 1, "x": 2}], "clusterIP": "y"}})
    assert drift(wanted, {"spec": {"selector": {"a": "2"}, "ports": [{"port": 1}]}})
    assert drift(wanted, {"spec": {"selector": {"a": "1"}, "ports": []}})


def test_recreated_pods_make_the_job_restarting_until_every_pod_runs_again():
    running = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    again = Observation(pods=pods("Running", "Running", "Pending"), expected=EXPECTED, created=True,
                        backoff_limit=3, restarts=1, restarted=True)
    restarting = compute_status(running, 1, again, T1)
    assert restarting["phase"] == "Restarting"
    assert (cond(restarting, "Restarting")["status"], cond(restarting, "Running")["status"]) == ("True", "False")
    later = Observation(pods=again.pods, expected=EXPECTED, created=True, backoff_limit=3, restarts=1)
    assert compute_status(restarting, 1, later, T2) == restarting  # still restarting, nothing to write
    healed = Observation(pods=pods("Running", "Running", "Running"), expected=EXPECTED, created=True,
                         backoff_limit=3, restarts=1)
    back = compute_status(restarting, 1, healed, T2)
    assert (back["phase"], cond(back, "Restarting")["status"], cond(back, "Running")["status"]) == (
        "Running", "False", "True")


def test_a_failed_pod_with_a_backoff_limit_means_the_limit_is_used_up():
    used_up = Observation(pods=pods("Running", "Failed", "Running"), expected=EXPECTED, created=True,
                          backoff_limit=2, restarts=2)
    status = compute_status(None, 1, used_up, T0)
    assert (status["phase"], cond(status, "Failed")["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert "2 of its 2 restarts" in cond(status, "Failed")["message"]


def test_drift_reads_quantities_as_the_api_server_stores_them():
    wanted = {"resources": {"limits": {"nvidia.com/gpu": 1, "cpu": 0.5, "memory": "1024Mi"}}}
    assert not drift(wanted, {"resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "500m", "memory": "1Gi"}}})
    assert drift(wanted, {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "500m", "memory": "1Gi"}}})


def test_drift_matches_an_empty_wanted_value_to_the_field_the_api_server_omitted():
    assert not drift({"spec": {"hostNetwork": False, "env": [], "value": ""}}, {"spec": {}})
    assert drift({"spec": {"hostNetwork": True}}, {"spec": {}})


def test_drift_never_reads_a_boolean_as_a_quantity():
    assert drift({"enabled": True}, {"enabled": "1"})
