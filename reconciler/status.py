"""The status of a TrainingJob from its pods (pure; the clock is an argument).

`compute_status(old, ...)` returns the new `.status`. It changes only what the observation changed, so
for the same pods it returns a status equal to `old` and the reconciler writes nothing.

Phase (first match wins):
- `Failed`/`PolicyViolation` when the pre-flight policy check denied the job (nothing was created);
- a job already `Succeeded` or `Failed` stays so (terminal);
- `Failed` when any pod's phase is Failed: `BackoffLimitExceeded` with a runPolicy.backoffLimit (the reconciler
  restarts failed pods while the limit allows, so a failed pod left here means the limit is used up), else
  `PodFailed` (pods use restartPolicy Never: without a backoffLimit a failure is final);
- `Failed`/`ImagePullFailed` when a container's image can never be pulled (waiting with InvalidImageName or
  ErrImageNeverPull: the kubelet does not retry those);
- `Failed`/`DeadlineExceeded` when runPolicy.activeDeadlineSeconds have passed since startTime;
- `Succeeded` when the framework's success rule holds (`success_roles`): `ChiefSucceeded`, `MasterSucceeded` or
  `LauncherSucceeded` when the leading pod succeeded (others may still run; cleanPodPolicy decides their fate),
  `AllReplicasSucceeded` when every expected pod did;
- `Running`/`AllReplicasRunning` when every expected pod exists and is Running or Succeeded;
- `Restarting`/`PodRestarted` when failed pods were just recreated, until every pod runs again;
- `Created`/`ChildrenCreated` when every desired child exists, or did once (the Created condition is set);
- `Pending` otherwise.
Only the pods at the slots the spec asks for count, anywhere above: role and index from the
`mlgate.dev/replica-type` / `mlgate.dev/replica-index` labels, index below the role's count (a leftover such as
`llm-worker-2` after replicas 3 -> 2 is being deleted and says nothing about the job).
Conditions are one per type (Created, Running, Restarting, Succeeded, Failed, Stalled); a condition's
lastTransitionTime moves only when its status flips. `startTime` is set on the first pass that sees the job
unfinished (as Kubeflow's training-operator and batch Jobs start the clock at the first sync), so
activeDeadlineSeconds also runs while some pods cannot be created; `completionTime` is set when the job becomes
Succeeded or Failed. `replicaStatuses[Role]` counts active (no phase, Pending or Running), succeeded and failed pods
of the expected slots; they freeze once the job is finished (so deleting finished pods later changes nothing).

`Stalled` says what holds an unfinished job up, in words a user can act on: True with the reason and a message
naming the pods (sorted) and what to do, False/`Progressing` once the cause is gone (absent until the first
stall). It does not change the phase (a permanent image-pull failure fails the job, above). The first cause
in this order wins, the order a pod's life goes through (created, scheduled, image pulled):
1. `QuotaExceeded`: the API refused to create a child with 403 "exceeded quota" (a ResourceQuota; the
   reconciler passes the API's message in `Observation.quota_denied`). `QuotaNeedsResources` when the 403
   says "must specify": a quota on requests or limits refuses pods that do not set them.
2. `GangSchedulerMissing`: the job asks for gang scheduling but the API server does not serve the scheduler's
   PodGroup kind (its CRDs are not installed: creating the PodGroup gave 404; `Observation.unserved`).
3. `GangUnschedulable`: the job has a PodGroup, and either a Volcano PodGroup in phase Pending, Inqueue or
   Unknown carries a condition `Unschedulable` True (reasons such as NotEnoughResources or NotEnoughTasks; the
   message reads "3/3 tasks in gang unschedulable: pod group is not ready, ..."), or a pod of the job waits
   with PodScheduled False and reason Unschedulable (coscheduling's "cannot find enough sibling pods" or
   "PodGroup ... gets rejected") or Schedulable (Volcano: the pod fits "once minAvailable is satisfied").
4. `Unschedulable`: a pod waits with PodScheduled False and reason Unschedulable (the scheduler's message).
5. `ImagePullFailed`: a container (init or regular) waits with ErrImagePull or ImagePullBackOff (the kubelet
   retries), or InvalidImageName or ErrImageNeverPull (it does not: the phase is Failed too).
Like the replica counts, Stalled freezes once the job is finished: it then tells what held the job up.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from .desired import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from .reasons import Reason

__all__ = ["STALLED", "Observation", "compute_status", "condition", "expected_pods", "now_rfc3339", "parse_time",
           "replica_statuses", "set_condition", "stall", "success_roles"]

TERMINAL = ("Succeeded", "Failed")
CONDITION_TYPES = ("Created", "Running", "Restarting", "Succeeded", "Failed", "Stalled")
STALLED = "Stalled"
PULL_RETRIED = ("ErrImagePull", "ImagePullBackOff")  # kubelet waiting reasons (pkg/kubelet/images/types.go)
PULL_NEVER = ("InvalidImageName", "ErrImageNeverPull")  # the kubelet never pulls: the pod cannot start
PULL_ADVICE = {
    "InvalidImageName": "fix the image reference in the job's spec",
    "ErrImageNeverPull": "the image is not on the node and imagePullPolicy is Never: pre-load it or allow pulls",
}
GANG_WAITING_PHASES = ("Pending", "Inqueue", "Unknown")  # Volcano PodGroup phases with pods not (all) placed
SCHEDULER_WAITING = ("Unschedulable", "Schedulable")  # PodScheduled=False reasons; Schedulable: Volcano gang wait


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Observation:
    """What the reconciler saw: the job's pods and pod groups, how many pods of each role it wants, whether all
    children exist, and which creates a ResourceQuota refused."""

    pods: list[dict[str, Any]]
    expected: dict[str, int]  # role (as in the spec, e.g. "Master") -> pod count
    created: bool
    violation: str | None = None  # the policy engine's message when the pre-flight denied the job
    deadline_seconds: int | None = None  # spec.runPolicy.activeDeadlineSeconds
    backoff_limit: int | None = None  # spec.runPolicy.backoffLimit
    restarts: int = 0  # pod restarts the job has used
    restarted: bool = False  # failed pods were recreated in this pass
    podgroups: list[dict[str, Any]] = field(default_factory=list)  # the job's PodGroups (gang scheduling)
    quota_denied: dict[str, str] = field(default_factory=dict)  # "Pod/llm-worker-1" -> the API's 403 message
    unserved: dict[str, str] = field(default_factory=dict)  # "PodGroup/llm" -> its apiVersion, which is not served


def compute_status(old: dict[str, Any] | None, generation: int | None, seen: Observation,
                   now: str) -> dict[str, Any]:
    status = copy.deepcopy(old or {})
    seen = replace(seen, pods=expected_pods(seen.pods, seen.expected))
    if seen.violation is None and status.get("phase") not in TERMINAL and not status.get("startTime"):
        status["startTime"] = now  # before the phase, so a first pass already measures the deadline from it
    phase, reason, message = _phase(status, seen, now)
    conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
    for kind, value, why, text in _conditions(phase, reason, message, status, seen):
        conditions = set_condition(conditions, kind, value, why, text, now=now)
    if (old or {}).get("phase") not in TERMINAL:  # like the counts, Stalled freezes at the end
        conditions = _stalled(conditions, stall(seen), now)
    status["conditions"] = conditions
    status["phase"] = phase
    if generation is not None:
        status["observedGeneration"] = generation
    if seen.violation is None and (old or {}).get("phase") not in TERMINAL:  # counts freeze at the end
        status["replicaStatuses"] = replica_statuses(seen.pods, seen.expected)
    if phase in TERMINAL and not status.get("completionTime"):
        status["completionTime"] = now
    return status


def _phase(status: dict[str, Any], seen: Observation, now: str) -> tuple[str, str, str]:
    old_phase = status.get("phase")
    if seen.violation is not None:
        return "Failed", "PolicyViolation", seen.violation
    phases = {_name(p): str((p.get("status") or {}).get("phase") or "Pending") for p in seen.pods}
    failed = sorted(name for name, phase in phases.items() if phase == "Failed")
    if old_phase in TERMINAL:
        return str(old_phase), "", ""
    if failed and seen.backoff_limit is not None:
        return "Failed", "BackoffLimitExceeded", (f"pod {failed[0]!r} failed and the job has used {seen.restarts} of "
                                                  f"its {seen.backoff_limit} restarts (runPolicy.backoffLimit)")
    if failed:
        return "Failed", "PodFailed", f"pod {failed[0]!r} failed ({len(failed)} failed in all)"
    never = [pull for pull in _pull_failures(seen.pods) if pull[2] in PULL_NEVER]
    if never:
        return "Failed", "ImagePullFailed", _pull_message(never)
    if seen.deadline_seconds and status.get("startTime"):
        elapsed = (parse_time(now) - parse_time(str(status["startTime"]))).total_seconds()
        if elapsed >= seen.deadline_seconds:
            return "Failed", "DeadlineExceeded", (f"the job ran {elapsed:.0f}s, more than its activeDeadlineSeconds "
                                                  f"({seen.deadline_seconds})")
    total = sum(seen.expected.values())
    counts = replica_statuses(seen.pods, seen.expected)
    succeeded = sum(c["succeeded"] for c in counts.values())
    running = sum(1 for phase in phases.values() if phase == "Running")
    if total and succeeded >= total:
        return "Succeeded", "AllReplicasSucceeded", f"all {total} replicas succeeded"
    leaders = success_roles(seen.expected)
    if total and all(counts[role]["succeeded"] >= seen.expected[role] for role in leaders):
        role = leaders[0]  # not every replica succeeded, so the rule named one leading role
        return "Succeeded", f"{role}Succeeded", (f"the {role.lower()} succeeded ({succeeded} of {total} replicas "
                                                 "succeeded)")
    if total and seen.created and running + succeeded >= total:
        return "Running", "AllReplicasRunning", f"{running} of {total} replicas running"
    if seen.restarted or old_phase == "Restarting":
        return "Restarting", "PodRestarted", (f"failed pods recreated; {seen.restarts} of {seen.backoff_limit} "
                                              f"restarts used (runPolicy.backoffLimit)")
    if seen.created or condition(status, "Created") is not None:  # a pod missing later (e.g. a quota) is no restart
        return "Created", "ChildrenCreated", f"{total} pods and their services created"
    return "Pending", "", ""


def _conditions(phase: str, reason: str, message: str, status: dict[str, Any],
                seen: Observation) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) for every condition this observation decides; others stay as they are."""
    out: list[tuple[str, str, str, str]] = []
    if reason == "":  # terminal and unchanged, or still pending: nothing new to say
        return out
    if seen.created or phase in ("Running", "Succeeded"):
        out.append(("Created", "True", "ChildrenCreated", "every pod and service of the job exists"))
    if phase == "Running":
        out.append(("Running", "True", reason, message))
        if condition(status, "Restarting") is not None:
            out.append(("Restarting", "False", reason, message))
    elif phase == "Restarting":
        out.append(("Restarting", "True", reason, message))
        if condition(status, "Running") is not None:
            out.append(("Running", "False", reason, message))
    elif phase in TERMINAL and condition(status, "Running") is not None:
        out.append(("Running", "False", "JobSucceeded" if phase == "Succeeded" else "JobFailed", message))
    if phase == "Succeeded":
        out.append(("Succeeded", "True", reason, message))
    if phase == "Failed":
        out.append(("Failed", "True", reason, message))
    return out


# --- Stalled -------------------------------------------------------------------------------------------

Pull = tuple[str, str, str, str, str]  # (pod, container, waiting reason, kubelet message, image)


def stall(seen: Observation) -> Reason | None:
    """What holds the job up (the first cause in the module's order), or None."""
    for check in (_quota, _gang_missing, _gang, _unschedulable, _image_pull):
        cause = check(seen)
        if cause is not None:
            return cause
    return None


def _stalled(conditions: list[dict[str, Any]], cause: Reason | None, now: str) -> list[dict[str, Any]]:
    if cause is not None:
        return set_condition(conditions, STALLED, "True", cause[0], cause[1], now=now)
    if any(c.get("type") == STALLED for c in conditions):
        return set_condition(conditions, STALLED, "False", "Progressing", "nothing holds the job up", now=now)
    return conditions


def _quota(seen: Observation) -> Reason | None:
    if not seen.quota_denied:
        return None
    refused = sorted(seen.quota_denied)
    objects = ", ".join(f"{kind} {name!r}" for kind, _, name in (child.partition("/") for child in refused))
    message = seen.quota_denied[refused[0]]
    if "must specify" in message:
        return Reason("QuotaNeedsResources", f"{objects} could not be created: {message}; set spec.resources.cpu and "
                                             "spec.resources.memory (pods get them as requests and limits), or add a "
                                             "LimitRange that defaults them")
    return Reason("QuotaExceeded", f"{objects} could not be created: {message}; raise the "
                                   f"namespace's ResourceQuota or lower the job's replicas or resources")


SCHEDULER_PROJECTS = {"scheduling.volcano.sh": "Volcano", "scheduling.x-k8s.io": "scheduler-plugins (coscheduling)"}


def _gang_missing(seen: Observation) -> Reason | None:
    if not seen.unserved:
        return None
    child = sorted(seen.unserved)[0]
    kind, _, name = child.partition("/")
    api_version = seen.unserved[child]
    project = SCHEDULER_PROJECTS.get(api_version.partition("/")[0], "the gang scheduler")
    return Reason("GangSchedulerMissing", f"{kind} {name!r} could not be created: the API server does not serve "
                                          f"{api_version} {kind}s; install {project}, its CRDs and scheduler, or set "
                                          "spec.scheduling.gang to false")


def _waiting(seen: Observation) -> list[tuple[str, str, str]]:
    """(pod, reason, message) of the live pods the scheduler has not placed, sorted by pod."""
    out = []
    for pod in seen.pods:
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") not in (None, "Pending"):
            continue
        scheduled: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"),
                                         {})
        if scheduled.get("status") == "False" and scheduled.get("reason") in SCHEDULER_WAITING:
            out.append((_name(pod), str(scheduled["reason"]), str(scheduled.get("message") or "")))
    return sorted(out)


def _blocked_group(podgroups: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(PodGroup, its condition) for a Volcano PodGroup not placed yet whose Unschedulable condition is True
    (Volcano leaves that condition behind once the group runs, so the phase decides)."""
    for podgroup in podgroups:
        status = podgroup.get("status") or {}
        if status.get("phase") not in GANG_WAITING_PHASES:
            continue
        for found in status.get("conditions") or []:
            if found.get("type") == "Unschedulable" and found.get("status") == "True":
                return podgroup, found
    return None


def _gang(seen: Observation) -> Reason | None:
    if not seen.podgroups:
        return None
    waiting, blocked = _waiting(seen), _blocked_group(seen.podgroups)
    names = [name for name, _, _ in waiting] or sorted(
        _name(p) for p in seen.pods if not (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") in (None, "Pending"))
    if (blocked is None and not waiting) or not names:  # every pod placed: nothing waits for the gang
        return None
    if blocked is not None:
        group, found = blocked
        detail = f"{found.get('reason') or 'Unschedulable'}: {found.get('message') or ''}".rstrip(": ")
    else:  # a pod the scheduler refused says why; Volcano's Schedulable pods only wait for the others
        group = seen.podgroups[0]
        detail = next((message for _, reason, message in waiting if reason == "Unschedulable"), waiting[0][2])
    size = (group.get("spec") or {}).get("minMember")
    return Reason("GangUnschedulable", f"the gang (PodGroup {_name(group)!r}, minMember {size}) cannot be "
                                       f"scheduled together; {_pods(names)} wait: {detail}; free room for {size} "
                                       "pods at once, or lower the job's replicas or resources")


def _unschedulable(seen: Observation) -> Reason | None:
    refused = [(name, message) for name, reason, message in _waiting(seen) if reason == "Unschedulable"]
    if not refused:
        return None
    return Reason("Unschedulable", f"{_pods([name for name, _ in refused])} cannot be scheduled: {refused[0][1]}; free "
                                   f"capacity or lower the job's resources, or relax its node selector and tolerations")


def _pull_failures(pods: list[dict[str, Any]]) -> list[Pull]:
    """Containers (init or regular) waiting on an image pull, those the kubelet never retries first."""
    out = []
    for pod in pods:
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PULL_RETRIED + PULL_NEVER:
                out.append((_name(pod), str(container.get("name") or ""), str(waiting["reason"]),
                            str(waiting.get("message") or ""), str(container.get("image") or "")))
    return sorted(out, key=lambda pull: (pull[2] not in PULL_NEVER, pull))


def _pull_message(pulls: list[Pull]) -> str:
    pod, container, reason, message, image = pulls[0]
    advice = PULL_ADVICE.get(reason, "check the image name and tag, that the registry has it, and the pull "
                                     "credentials (imagePullSecrets)")
    pods = _pods(sorted({pull[0] for pull in pulls}))
    shown = f" {image!r}" if image else ""
    return f"{pods} cannot pull image{shown} (container {container!r} of {pod!r}: {reason}: {message}); {advice}"


def _image_pull(seen: Observation) -> Reason | None:
    pulls = _pull_failures(seen.pods)
    return Reason("ImagePullFailed", _pull_message(pulls)) if pulls else None


def _pods(names: list[str]) -> str:
    return ("pod " if len(names) == 1 else "pods ") + ", ".join(repr(name) for name in names)


def set_condition(conditions: list[dict[str, Any]], kind: str, value: str, reason: str, message: str, *,
                  now: str) -> list[dict[str, Any]]:
    """Conditions with `kind` set; lastTransitionTime moves only when the status flips."""
    out = [dict(c) for c in conditions]
    for item in out:
        if item.get("type") == kind:
            if item.get("status") != value:
                item["lastTransitionTime"] = now
            item.update({"status": value, "reason": reason, "message": message})
            return out
    out.append({"type": kind, "status": value, "reason": reason, "message": message, "lastTransitionTime": now})
    return out


LEADING_ROLES = ("Chief", "Master", "Launcher")  # render.training_roles' names; at most one per job


def success_roles(expected: dict[str, int]) -> list[str]:
    """The roles whose pods must all succeed for the job to succeed (roles as render.training_roles names them).

    - TensorFlow (Chief, Worker, PS): the Chief (or a Master). Kubeflow training-operator's TFJob with the default
      successPolicy succeeds when its chief/master does, whatever workers and parameter servers still run (PS
      never exit by themselves).
    - PyTorch and XGBoost (Master, Worker): the Master. training-operator's PyTorchJob and XGBoostJob: the master's
      success is the job's (a PyTorchJob without a master needs every worker, the last rule below).
    - MPI (Launcher, Worker): the Launcher. mpi-operator v2beta1 takes the job's outcome from the launcher; the
      workers (sshd) never exit by themselves.
    - JAX and any job of workers only: every expected pod.
    The pods still running then are cleaned up by runPolicy.cleanPodPolicy.
    """
    leading = [role for role in LEADING_ROLES if expected.get(role)]
    return leading[:1] or list(expected)


def expected_pods(pods: list[dict[str, Any]], expected: dict[str, int]) -> list[dict[str, Any]]:
    """The pods at a slot the spec asks for: role label among `expected`, index label below that role's count."""
    counts = {role.lower(): count for role, count in expected.items()}
    out = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        count = counts.get(str(labels.get(REPLICA_TYPE_LABEL, "")), 0)
        index = str(labels.get(REPLICA_INDEX_LABEL, ""))
        if index.isdecimal() and int(index) < count:
            out.append(pod)
    return out


def replica_statuses(pods: list[dict[str, Any]], expected: dict[str, int]) -> dict[str, dict[str, int]]:
    roles = {role.lower(): role for role in expected}
    counts = {role: {"active": 0, "succeeded": 0, "failed": 0} for role in expected}
    for pod in expected_pods(pods, expected):
        role = roles[str(((pod.get("metadata") or {}).get("labels") or {})[REPLICA_TYPE_LABEL])]
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")
        counts[role][key] += 1
    return counts


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of type `kind` in a status, or None."""
    for item in status.get("conditions") or []:
        if item.get("type") == kind:
            found: dict[str, Any] = item
            return found
    return None


def parse_time(stamp: str) -> datetime:
    parsed = datetime.fromisoformat(stamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
