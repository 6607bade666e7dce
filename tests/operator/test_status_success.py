"""Which pods count, when a job succeeds, and when its clock starts: pods come from desired.py (so they carry its
labels), built from one minimal TrainingJob with one change each."""

from dataclasses import replace
from typing import Any

import pytest
from builders import change, trainingjob

from mlgate.workloads import render
from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.launcher import launcher_as_pod
from mlgate_reconciler.status import Observation, compute_status, replica_statuses, success_roles

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
JOB = trainingjob(replicas=3)  # pytorch: llm-master-0, llm-worker-0, llm-worker-1


def observe(job: dict[str, Any], phase: str = "Running", *, created: bool = True, deadline: int | None = None,
            **phases: str) -> Observation:
    """The job's desired pods, every one in `phase` except those named in `phases` (pod name with `_` for `-`)."""
    pods = [c for c in desired_children(job) if c["kind"] == "Pod"]
    for pod in pods:
        pod["status"] = {"phase": phases.get(pod["metadata"]["name"].replace("-", "_"), phase)}
    return Observation(pods=pods, expected=dict(render.training_roles(job["spec"])), created=created,
                       deadline_seconds=deadline)


def with_leftover(lowered: Observation, before: dict[str, Any], phase: str) -> Observation:
    """`lowered` plus the pods only `before` (the job with more replicas) had, in `phase`."""
    names = {p["metadata"]["name"] for p in lowered.pods}
    extra = [p for p in observe(before, phase).pods if p["metadata"]["name"] not in names]
    assert extra
    return Observation(pods=[*lowered.pods, *extra], expected=lowered.expected, created=lowered.created)


def cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


# --- only the expected slots count ---------------------------------------------------------------------


def test_a_leftover_pod_after_lowering_replicas_is_not_counted_as_running():
    lowered = change(JOB, "/spec/replicas", 2)
    status = compute_status(None, 1, with_leftover(observe(lowered), JOB, "Running"), T0)
    assert cond(status, "Running")["message"] == "2 of 2 replicas running"
    assert status["replicaStatuses"]["Worker"] == {"active": 1, "succeeded": 0, "failed": 0}


def test_a_leftover_pod_does_not_let_the_job_succeed_while_an_expected_pod_still_runs():
    lowered = change(change(JOB, "/spec/replicas", 2), "/spec/framework", "jax")  # all workers must succeed
    seen = with_leftover(observe(lowered, "Succeeded", llm_worker_1="Running"), change(JOB, "/spec/framework", "jax"),
                         "Succeeded")
    assert compute_status(None, 1, seen, T0)["phase"] == "Running"


def test_a_failed_leftover_pod_does_not_fail_the_job():
    lowered = change(JOB, "/spec/replicas", 2)
    assert compute_status(None, 1, with_leftover(observe(lowered), JOB, "Failed"), T0)["phase"] == "Running"


def test_replica_statuses_ignore_a_pod_without_an_index_label():
    seen = observe(JOB)
    del seen.pods[2]["metadata"]["labels"]["mlgate.dev/replica-index"]
    assert replica_statuses(seen.pods, seen.expected)["Worker"] == {"active": 1, "succeeded": 0, "failed": 0}


# --- the success rule per framework ----------------------------------------------------------------------


@pytest.mark.parametrize(("framework", "roles"), [("pytorch", ["Master"]), ("xgboost", ["Master"]),
                                                  ("tensorflow", ["Chief"]), ("mpi", ["Launcher"]),
                                                  ("jax", ["Worker"])])
def test_success_roles_name_the_leading_role_of_each_framework(framework: str, roles: list[str]):
    assert success_roles(dict(render.training_roles(change(JOB, "/spec/framework", framework)["spec"]))) == roles


def test_a_tensorflow_job_succeeds_when_its_chief_does_with_parameter_servers_and_workers_still_running():
    tf = change(change(JOB, "/spec/framework", "tensorflow"), "/spec/tensorflow", {"parameterServers": 2})
    status = compute_status(None, 1, observe(tf, llm_chief_0="Succeeded"), T0)
    assert (status["phase"], cond(status, "Succeeded")["reason"]) == ("Succeeded", "ChiefSucceeded")
    assert cond(status, "Succeeded")["message"] == "the chief succeeded (1 of 5 replicas succeeded)"
    assert status["completionTime"] == T0


def mpi_observed(launcher_status: dict[str, Any]) -> Observation:
    """An MPI job's running workers and its launcher Job with `launcher_status`, as the pass shows them."""
    mpi = change(JOB, "/spec/framework", "mpi")
    seen = observe(mpi)
    launcher = next(c for c in desired_children(mpi) if c["kind"] == "Job")
    return replace(seen, pods=[*seen.pods, launcher_as_pod({**launcher, "status": launcher_status})])


def test_an_mpi_job_succeeds_when_its_launcher_job_completes():
    status = compute_status(None, 1, mpi_observed({"conditions": [{"type": "Complete", "status": "True"}]}), T0)
    assert (status["phase"], cond(status, "Succeeded")["reason"]) == ("Succeeded", "LauncherSucceeded")


def test_an_mpi_job_runs_while_its_launcher_job_has_an_active_pod_and_fails_when_the_job_does():
    assert compute_status(None, 1, mpi_observed({"active": 1}), T0)["phase"] == "Running"
    assert compute_status(None, 1, mpi_observed({}), T0)["phase"] == "Created"
    failed = mpi_observed({"failed": 4, "conditions": [{"type": "Failed", "status": "True",
                                                         "reason": "BackoffLimitExceeded"}]})
    assert compute_status(None, 1, failed, T0)["phase"] == "Failed"


def test_a_pytorch_job_succeeds_when_its_master_does():
    status = compute_status(None, 1, observe(JOB, llm_master_0="Succeeded"), T0)
    assert (status["phase"], cond(status, "Succeeded")["reason"]) == ("Succeeded", "MasterSucceeded")


def test_a_pytorch_job_whose_workers_succeeded_before_the_master_keeps_running():
    status = compute_status(None, 1, observe(JOB, "Succeeded", llm_master_0="Running"), T0)
    assert status["phase"] == "Running"


def test_a_jax_job_needs_every_worker_to_succeed():
    jax = change(JOB, "/spec/framework", "jax")
    assert compute_status(None, 1, observe(jax, "Succeeded", llm_worker_2="Running"), T0)["phase"] == "Running"
    status = compute_status(None, 1, observe(jax, "Succeeded"), T0)
    assert (status["phase"], cond(status, "Succeeded")["reason"]) == ("Succeeded", "AllReplicasSucceeded")


def test_a_failed_worker_fails_the_job_even_when_the_master_succeeded():
    status = compute_status(None, 1, observe(JOB, llm_master_0="Succeeded", llm_worker_0="Failed"), T0)
    assert (status["phase"], cond(status, "Failed")["reason"]) == ("Failed", "PodFailed")


# --- the clock starts at the first pass ------------------------------------------------------------------


def test_a_job_whose_pods_cannot_all_be_created_still_reaches_its_active_deadline():
    refused = Observation(pods=observe(JOB).pods[:1], expected=observe(JOB).expected, created=False,
                          deadline_seconds=90)
    pending = compute_status(None, 1, refused, T0)
    assert (pending["phase"], pending["startTime"]) == ("Pending", T0)
    assert compute_status(pending, 1, refused, T1) == pending  # within the deadline: nothing to write
    expired = compute_status(pending, 1, refused, T2)
    assert (expired["phase"], cond(expired, "Failed")["reason"]) == ("Failed", "DeadlineExceeded")
    assert (expired["startTime"], expired["completionTime"]) == (T0, T2)


def test_the_start_time_is_kept_once_set():
    first = compute_status(None, 1, observe(JOB, "Pending", created=False), T0)
    assert compute_status(first, 1, observe(JOB), T1)["startTime"] == T0


def test_a_pending_job_with_a_start_time_is_not_created_until_its_children_were():
    first = compute_status(None, 1, observe(JOB, "Pending", created=False), T0)
    assert compute_status(first, 1, observe(JOB, "Pending", created=False), T1)["phase"] == "Pending"
