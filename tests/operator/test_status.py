from typing import Any

from mlgate_reconciler.children import drift
from mlgate_reconciler.reconcile import next_change, pods_to_clean
from mlgate_reconciler.status import Observation, compute_status, replica_statuses, set_condition

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
EXPECTED = {"Master": 1, "Worker": 2}


def pod(name: str, role: str, phase: str | None = "Pending") -> dict[str, Any]:
    """A pod labelled as desired.py labels them: role, and the index from the name's `-<index>` suffix."""
    status = {"phase": phase} if phase else {}
    labels = {"mlgate.dev/replica-type": role, "mlgate.dev/replica-index": name.rsplit("-", 1)[1]}
    return {"metadata": {"name": name, "labels": labels}, "status": status}


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


def test_a_job_with_children_missing_is_pending_without_conditions_but_its_clock_starts():
    status = compute_status(None, 1, seen("Pending", created=False), T0)
    assert (status["phase"], status["conditions"]) == ("Pending", [])
    assert status["startTime"] == T0


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


# --- Stalled: one minimal observation, one change each -------------------------------------------------

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}


def waiting_on(reason: str, message: str = "pull failed", *, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"phase": "Pending", key: [{"name": "pytorch", "image": "registry.example/train:1.0", "ready": False,
                                       "state": {"waiting": {"reason": reason, "message": message}}}]}


def stalled(*changes: tuple[int, dict[str, Any]], podgroups: list[dict[str, Any]] | None = None,
            quota_denied: dict[str, str] | None = None, unserved: dict[str, str] | None = None) -> Observation:
    """Three pending pods with all children created; `changes` replace the status of pod i."""
    live = pods("Pending", "Pending", "Pending")
    for index, status in changes:
        live[index]["status"] = status
    return Observation(pods=live, expected=EXPECTED, created=True, podgroups=podgroups or [],
                       quota_denied=quota_denied or {}, unserved=unserved or {})


def volcano_group(phase: str, condition_status: str = "True") -> dict[str, Any]:
    unschedulable = {"type": "Unschedulable", "status": condition_status, "reason": "NotEnoughResources",
                     "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable"}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "llm"},
            "spec": {"minMember": 3}, "status": {"phase": phase, "conditions": [unschedulable]}}


def test_an_image_pull_backoff_stalls_the_job_and_keeps_its_phase():
    status = compute_status(None, 1, stalled((1, waiting_on("ImagePullBackOff", "Back-off pulling image"))), T0)
    assert status["phase"] == "Created"
    stall = cond(status, "Stalled")
    assert (stall["status"], stall["reason"]) == ("True", "ImagePullFailed")
    assert stall["message"].startswith("pod 'llm-worker-0' cannot pull image 'registry.example/train:1.0'")
    assert "ImagePullBackOff: Back-off pulling image" in stall["message"] and "imagePullSecrets" in stall["message"]


def test_an_init_container_that_cannot_pull_stalls_the_job_too():
    status = compute_status(None, 1, stalled((0, waiting_on("ErrImagePull", init=True))), T0)
    assert cond(status, "Stalled")["reason"] == "ImagePullFailed"


def test_an_invalid_image_name_fails_the_job_because_the_kubelet_never_retries():
    status = compute_status(None, 1, stalled((2, waiting_on("InvalidImageName", "invalid reference format"))), T0)
    assert status["phase"] == "Failed"
    failed = cond(status, "Failed")
    assert failed["reason"] == "ImagePullFailed"
    assert "'llm-worker-1'" in failed["message"] and "fix the image reference" in failed["message"]
    assert status["completionTime"] == T0


def test_an_unschedulable_pod_stalls_the_job_with_the_schedulers_message():
    status = compute_status(None, 1, stalled((1, {"phase": "Pending", "conditions": [UNSCHEDULABLE]})), T0)
    stall = cond(status, "Stalled")
    assert (status["phase"], stall["reason"]) == ("Created", "Unschedulable")
    assert stall["message"].startswith("pod 'llm-worker-0' cannot be scheduled: 0/4 nodes are available: 4 "
                                       "Insufficient nvidia.com/gpu.;")


def test_unschedulable_pods_are_named_sorted_in_one_message():
    blocked = {"phase": "Pending", "conditions": [UNSCHEDULABLE]}
    status = compute_status(None, 1, stalled((2, blocked), (0, blocked)), T0)
    assert cond(status, "Stalled")["message"].startswith("pods 'llm-master-0', 'llm-worker-1' cannot be scheduled")


def test_a_volcano_podgroup_inqueue_with_unschedulable_true_stalls_the_job_as_gang_unschedulable():
    status = compute_status(None, 1, stalled(podgroups=[volcano_group("Inqueue")]), T0)
    stall = cond(status, "Stalled")
    assert stall["reason"] == "GangUnschedulable"
    assert stall["message"].startswith("the gang (PodGroup 'llm', minMember 3) cannot be scheduled together; pods "
                                       "'llm-master-0', 'llm-worker-0', 'llm-worker-1' wait: NotEnoughResources: "
                                       "3/3 tasks in gang unschedulable")


def test_the_unschedulable_condition_volcano_leaves_on_a_running_podgroup_is_not_a_stall():
    status = compute_status(None, 1, stalled(podgroups=[volcano_group("Running")]), T0)
    assert cond(status, "Stalled") is None


def test_an_unschedulable_pod_of_a_gang_is_gang_unschedulable_with_the_coscheduling_message():
    rejected = {**UNSCHEDULABLE, "message": "PodGroup ns/llm gets rejected due to Pod llm-worker-1 is "
                                            "unschedulable even after PostFilter"}
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "llm"},
             "spec": {"minMember": 3}, "status": {"phase": "Pending"}}
    status = compute_status(None, 1, stalled((2, {"phase": "Pending", "conditions": [rejected]}), podgroups=[group]),
                            T0)
    stall = cond(status, "Stalled")
    assert stall["reason"] == "GangUnschedulable"
    assert "pod 'llm-worker-1' wait: PodGroup ns/llm gets rejected" in stall["message"]


def test_a_quota_refusal_stalls_the_pending_job_with_the_apis_message():
    refusal = ('pods "llm-worker-1" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, '
               'limited: pods=2')
    seen_now = Observation(pods=pods("Pending", "Pending"), expected=EXPECTED, created=False,
                           quota_denied={"Pod/llm-worker-1": refusal})
    status = compute_status(None, 1, seen_now, T0)
    stall = cond(status, "Stalled")
    assert (status["phase"], stall["reason"]) == ("Pending", "QuotaExceeded")
    assert stall["message"].startswith(f"Pod 'llm-worker-1' could not be created: {refusal}; raise the namespace's "
                                       "ResourceQuota")


def test_a_quota_that_needs_limits_the_pods_lack_says_what_to_set():
    refusal = 'pods "llm-master-0" is forbidden: failed quota: compute: must specify limits.memory for: pytorch'
    seen_now = Observation(pods=[], expected=EXPECTED, created=False, quota_denied={"Pod/llm-master-0": refusal})
    stall = cond(compute_status(None, 1, seen_now, T0), "Stalled")
    assert stall["reason"] == "QuotaNeedsResources"
    assert stall["message"] == (f"Pod 'llm-master-0' could not be created: {refusal}; set spec.resources.cpu and "
                                "spec.resources.memory (pods get them as requests and limits), or add a LimitRange "
                                "that defaults them")


def test_the_first_cause_wins_quota_then_gang_then_unschedulable_then_image_pull():
    blocked = (0, {"phase": "Pending", "conditions": [UNSCHEDULABLE]})
    pulling = (1, waiting_on("ImagePullBackOff"))
    group = [volcano_group("Pending")]
    quota = {"Pod/llm-worker-2": "exceeded quota: q"}
    missing = {"PodGroup/llm": "scheduling.volcano.sh/v1beta1"}
    causes = [stalled(pulling), stalled(pulling, blocked), stalled(pulling, blocked, podgroups=group),
              stalled(pulling, blocked, podgroups=group, unserved=missing),
              stalled(pulling, blocked, podgroups=group, unserved=missing, quota_denied=quota)]
    reasons = [cond(compute_status(None, 1, seen_now, T0), "Stalled")["reason"] for seen_now in causes]
    assert reasons == ["ImagePullFailed", "Unschedulable", "GangUnschedulable", "GangSchedulerMissing",
                       "QuotaExceeded"]


def test_a_podgroup_kind_the_api_does_not_serve_names_the_scheduler_to_install():
    seen_now = Observation(pods=pods("Pending", "Pending"), expected=EXPECTED, created=False,
                           unserved={"PodGroup/llm": "scheduling.volcano.sh/v1beta1"})
    status = compute_status(None, 1, seen_now, T0)
    stall = cond(status, "Stalled")
    assert (status["phase"], stall["reason"]) == ("Pending", "GangSchedulerMissing")
    assert stall["message"] == ("PodGroup 'llm' could not be created: the API server does not serve "
                                "scheduling.volcano.sh/v1beta1 PodGroups; install Volcano, its CRDs and scheduler, "
                                "or set spec.scheduling.gang to false")


def test_stalled_turns_false_with_progressing_once_the_cause_is_gone_and_then_stays_unchanged():
    blocked = compute_status(None, 1, stalled((1, {"phase": "Pending", "conditions": [UNSCHEDULABLE]})), T0)
    healed = compute_status(blocked, 1, stalled(), T1)
    stall = cond(healed, "Stalled")
    assert (stall["status"], stall["reason"], stall["lastTransitionTime"]) == ("False", "Progressing", T1)
    assert compute_status(healed, 1, stalled(), T2) == healed


def test_a_job_that_never_stalled_has_no_stalled_condition():
    assert cond(compute_status(None, 1, stalled(), T0), "Stalled") is None


def test_stalled_freezes_once_the_job_is_finished():
    blocked = stalled((1, {"phase": "Pending", "conditions": [UNSCHEDULABLE]}))
    expired = Observation(pods=blocked.pods, expected=EXPECTED, created=True, deadline_seconds=60)
    running = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    failed = compute_status(running, 1, expired, T2)
    assert (failed["phase"], cond(failed, "Stalled")["reason"]) == ("Failed", "Unschedulable")
    assert compute_status(failed, 1, stalled(), T2) == failed


def test_a_created_job_whose_lost_pod_a_quota_refuses_stays_created_and_says_why():
    created = compute_status(None, 1, seen("Running", "Running", "Running"), T0)
    refused = Observation(pods=pods("Running", "Running"), expected=EXPECTED, created=False,
                          quota_denied={"Pod/llm-worker-1": "exceeded quota: q"})
    status = compute_status(created, 1, refused, T1)
    assert (status["phase"], cond(status, "Stalled")["reason"]) == ("Created", "QuotaExceeded")


def test_a_running_job_with_a_deadline_asks_to_be_looked_at_just_after_it():
    job = {"spec": {"runPolicy": {"activeDeadlineSeconds": 60}}}
    assert next_change(job, {"phase": "Running", "startTime": T0}, "2026-01-01T00:00:50Z") == 11.0


def test_a_finished_job_with_a_ttl_asks_to_be_looked_at_when_it_expires_and_others_never():
    job = {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 30, "activeDeadlineSeconds": 5}}}
    done = {"phase": "Succeeded", "completionTime": T0}
    assert next_change(job, done, T0) == 31.0
    assert next_change({"spec": {}}, done, T0) is None
