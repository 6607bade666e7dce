"""The status of a TrainingJob from its pods (pure; the clock is an argument).

`compute_status(old, ...)` returns the new `.status`. It changes only what the observation changed, so
for the same pods it returns a status equal to `old` and the reconciler writes nothing.

Phase (first match wins):
- `Failed`/`PolicyViolation` when the pre-flight policy check denied the job (nothing was created);
- a job already `Succeeded` or `Failed` stays so (terminal);
- `Failed` when any pod's phase is Failed: `BackoffLimitExceeded` with a runPolicy.backoffLimit (the reconciler
  restarts failed pods while the limit allows, so a failed pod left here means the limit is used up), else
  `PodFailed` (pods use restartPolicy Never: without a backoffLimit a failure is final);
- `Failed`/`DeadlineExceeded` when runPolicy.activeDeadlineSeconds have passed since startTime;
- `Succeeded`/`AllReplicasSucceeded` when every expected pod has phase Succeeded;
- `Running`/`AllReplicasRunning` when every expected pod exists and is Running or Succeeded;
- `Restarting`/`PodRestarted` when failed pods were just recreated, until every pod runs again;
- `Created`/`ChildrenCreated` when every desired child exists;
- `Pending` otherwise.
Conditions are one per type (Created, Running, Restarting, Succeeded, Failed); a condition's lastTransitionTime moves
only when its status flips. `startTime` is set when the job's children are first all created,
`completionTime` when it becomes Succeeded or Failed. `replicaStatuses[Role]` counts active (no phase,
Pending or Running), succeeded and failed pods by the `mlgate.dev/replica-type` label; they freeze once the job
is finished (so deleting finished pods later changes nothing).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["Observation", "compute_status", "now_rfc3339", "parse_time", "set_condition"]

REPLICA_TYPE_LABEL = "mlgate.dev/replica-type"
TERMINAL = ("Succeeded", "Failed")
CONDITION_TYPES = ("Created", "Running", "Succeeded", "Failed")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Observation:
    """What the reconciler saw: the job's pods, how many of each role it wants, whether all children exist."""

    pods: list[dict[str, Any]]
    expected: dict[str, int]  # role (as in the spec, e.g. "Master") -> pod count
    created: bool
    violation: str | None = None  # the policy engine's message when the pre-flight denied the job
    deadline_seconds: int | None = None  # spec.runPolicy.activeDeadlineSeconds
    backoff_limit: int | None = None  # spec.runPolicy.backoffLimit
    restarts: int = 0  # pod restarts the job has used
    restarted: bool = False  # failed pods were recreated in this pass


def compute_status(old: dict[str, Any] | None, generation: int | None, seen: Observation,
                   now: str) -> dict[str, Any]:
    status = copy.deepcopy(old or {})
    phase, reason, message = _phase(status, seen, now)
    conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
    for kind, value, why, text in _conditions(phase, reason, message, status, seen):
        conditions = set_condition(conditions, kind, value, why, text, now=now)
    status["conditions"] = conditions
    status["phase"] = phase
    if generation is not None:
        status["observedGeneration"] = generation
    if seen.violation is None and (old or {}).get("phase") not in TERMINAL:  # counts freeze at the end
        status["replicaStatuses"] = replica_statuses(seen.pods, seen.expected)
    if seen.created and phase not in ("Pending",) and not status.get("startTime"):
        status["startTime"] = now
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
    if total and seen.created and running + succeeded >= total:
        return "Running", "AllReplicasRunning", f"{running} of {total} replicas running"
    if seen.restarted or old_phase == "Restarting":
        return "Restarting", "PodRestarted", (f"failed pods recreated; {seen.restarts} of {seen.backoff_limit} "
                                              f"restarts used (runPolicy.backoffLimit)")
    if seen.created:
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
        if _condition(status, "Restarting") is not None:
            out.append(("Restarting", "False", reason, message))
    elif phase == "Restarting":
        out.append(("Restarting", "True", reason, message))
        if _condition(status, "Running") is not None:
            out.append(("Running", "False", reason, message))
    elif phase in TERMINAL and _condition(status, "Running") is not None:
        out.append(("Running", "False", "JobSucceeded" if phase == "Succeeded" else "JobFailed", message))
    if phase == "Succeeded":
        out.append(("Succeeded", "True", reason, message))
    if phase == "Failed":
        out.append(("Failed", "True", reason, message))
    return out


def set_condition(conditions: list[dict[str, Any]], kind: str, value: str, reason: str, message: str, *,
                  now: str) -> list[dict[str, Any]]:
    """Conditions with `kind` set; lastTransitionTime moves only when the status flips."""
    out = [dict(c) for c in conditions]
    for condition in out:
        if condition.get("type") == kind:
            if condition.get("status") != value:
                condition["lastTransitionTime"] = now
            condition.update({"status": value, "reason": reason, "message": message})
            return out
    out.append({"type": kind, "status": value, "reason": reason, "message": message, "lastTransitionTime": now})
    return out


def replica_statuses(pods: list[dict[str, Any]], expected: dict[str, int]) -> dict[str, dict[str, int]]:
    roles = {role.lower(): role for role in expected}
    counts = {role: {"active": 0, "succeeded": 0, "failed": 0} for role in expected}
    for pod in pods:
        role = roles.get(str(((pod.get("metadata") or {}).get("labels") or {}).get(REPLICA_TYPE_LABEL, "")))
        if role is None:
            continue
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")
        counts[role][key] += 1
    return counts


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            found: dict[str, Any] = condition
            return found
    return None


def parse_time(stamp: str) -> datetime:
    parsed = datetime.fromisoformat(stamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
