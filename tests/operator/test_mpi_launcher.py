"""An MPI job's launcher is a batch Job that retries, created once every worker is Ready (reconciler/launcher.py)."""

from typing import Any

import pytest
from builders import change, trainingjob

from mlgate.engine import evaluate
from mlgate.loading.policies import default_policy_dir, load_policy_paths
from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.launcher import launcher_as_pod, waiting_for_workers, workers_ready
from mlgate_reconciler.preflight import invalid_name

SHIPPED = load_policy_paths([default_policy_dir()])


def mpi(**run_policy: Any) -> dict[str, Any]:
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    return change(job, "/spec/runPolicy", run_policy)


def launcher_of(job: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in desired_children(job) if c["kind"] == "Job"]
    return found


def worker(name: str, ready: bool | None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": name, "labels": {"mlgate.dev/replica-type": "worker"}}}
    if ready is not None:
        pod["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return pod


def keys(children: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(c["apiVersion"], c["kind"], c["metadata"]["name"]) for c in children}


def test_the_launcher_is_a_batch_job_that_restarts_on_failure_within_the_jobs_backoff_limit():
    launcher = launcher_of(mpi(backoffLimit=4))
    assert (launcher["apiVersion"], launcher["metadata"]["name"]) == ("batch/v1", "llm-launcher-0")
    assert launcher["spec"]["backoffLimit"] == 4
    template = launcher["spec"]["template"]
    assert template["spec"]["restartPolicy"] == "OnFailure"
    assert template["spec"]["containers"][0]["env"][0] == {"name": "K_MPI_JOB_ROLE", "value": "launcher"}
    assert template["metadata"]["labels"]["mlgate.dev/replica-type"] == "launcher"
    assert launcher["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert not [c for c in desired_children(mpi()) if c["kind"] == "Pod" and "launcher" in c["metadata"]["name"]]


def test_without_a_backoff_limit_the_job_apis_default_applies():
    assert "backoffLimit" not in launcher_of(mpi())["spec"]


def test_the_launcher_is_not_created_while_a_worker_is_not_ready():
    desired = desired_children(mpi())
    for pods in ([], [worker("llm-worker-0", True)], [worker("llm-worker-0", True), worker("llm-worker-1", False)],
                 [worker("llm-worker-0", True), worker("llm-worker-1", None)]):
        assert ("batch/v1", "Job", "llm-launcher-0") not in keys(waiting_for_workers(desired, set(), pods))


def test_the_launcher_is_created_once_every_worker_is_ready():
    desired = desired_children(mpi())
    pods = [worker("llm-worker-0", True), worker("llm-worker-1", True)]
    assert workers_ready(pods)
    assert waiting_for_workers(desired, set(), pods) == desired


def test_a_launcher_that_exists_stays_when_a_worker_stops_being_ready():
    desired = desired_children(mpi())
    existing = {("batch/v1", "Job", "llm-launcher-0")}
    assert waiting_for_workers(desired, existing, [worker("llm-worker-0", False)]) == desired


def test_other_frameworks_create_every_child_at_once():
    desired = desired_children(trainingjob(replicas=2))
    assert waiting_for_workers(desired, set(), []) == desired


def test_the_launcher_jobs_outcome_reads_as_its_pods_phase():
    launcher = launcher_of(mpi())
    phases = [launcher_as_pod({**launcher, "status": status})["status"]["phase"] for status in (
        {}, {"active": 1}, {"conditions": [{"type": "Complete", "status": "True"}]},
        {"failed": 7, "conditions": [{"type": "Failed", "status": "True"}]})]
    assert phases == ["Pending", "Running", "Succeeded", "Failed"]


def test_the_launcher_jobs_name_is_held_to_a_labels_63_characters():
    job = change(change(trainingjob(replicas=2), "/metadata/name", "a" * 53), "/spec/framework", "mpi")
    assert f"Job '{'a' * 53}-launcher-0' name is 64 characters, more than 63" in str(invalid_name(job))


@pytest.mark.parametrize("scheduling", [None, {"gang": True, "scheduler": "volcano"}])
def test_the_shipped_policies_admit_the_launcher_job_the_webhook_will_see(scheduling):
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    if scheduling:
        job = change(job, "/spec/scheduling", scheduling)
    job = evaluate(job, SHIPPED).mutated or job
    decision = evaluate(launcher_of(job), SHIPPED)
    assert decision.allowed, [(r.rule, f.reason) for r in decision.violations for f in r.findings]
