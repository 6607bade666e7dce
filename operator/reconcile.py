"""One level-triggered reconcile of ONE TrainingJob: observe, compare with desired.py, fix the difference.

`reconcile_training_job(client, namespace, name, policies)`:
1. Read the job; gone -> nothing to do.
2. Being deleted -> delete its children (pods, then services, config maps, pod groups), and only when none is
   left remove the finalizer `mlgate.dev/cleanup` (a merge patch carrying resourceVersion). A restart mid-way
   simply runs this again: deletes are idempotent and the finalizer goes last.
   `spec.checkpoint.retain` (default true) decides the checkpoint claim's fate in between: with retain false
   and a claimName, the PersistentVolumeClaim is deleted once the children are gone and before the finalizer
   comes off, unless another TrainingJob of the namespace that is not being deleted names the same claim (it
   is kept, and the log says which job holds it). With retain true, or a checkpoint uri, nothing is deleted.
3. No finalizer yet -> add it (merge patch with resourceVersion: a 409 means someone else wrote first, so the
   pass stops and the next one starts from fresh state).
4. Pre-flight: run the policy engine on the job as stored. Denied -> create nothing; the status says
   Failed/PolicyViolation with the engine's messages. Unless the caller passes facts, the engine gets the
   job's namespace labels (read from the API, so namespaceSelector policies match as in the webhook) and
   `known=False` for everything else (rules that need PVCs, storage classes or nodes skip, never guess).
   The pre-flight gates materialization only: a job that already got its children (phase Created or later)
   is not failed by a policy added afterwards; admission decides about updates. A refused job is checked again
   every pass: once the engine admits it (its spec was fixed, or the policy changed) the failure is dropped and
   the job starts over from Pending. Before the policies, `preflight.invalid_name` checks that the API accepts
   the names of every child (a Service name is a DNS-1035 label, a pod's hostname `<job>-master-0` at most 63
   characters): if not, Failed/InvalidName, nothing created, for good (a name never changes).
5. Restarts: with runPolicy.backoffLimit, failed pods are deleted and recreated while the restarts used (the
   job annotation `mlgate.dev/restarts`, written BEFORE the deletes so a crash never under-counts) stay within
   the limit; beyond it the status says Failed/BackoffLimitExceeded.
6. Children: list what the job owns (label `mlgate.dev/job-name` AND an ownerReference with the job's uid),
   create every desired child that is missing (a deleted pod or service comes back) unless the job already
   finished. A create a ResourceQuota refuses (403 "exceeded quota", or "failed quota" for a pod without the
   requests or limits the quota requires) does not stop the pass: the other children are still created, the
   status says Stalled/QuotaExceeded (or Stalled/QuotaNeedsResources) with the API's message, and
   the pass asks to run again (`outcome.requeue`) to retry once the quota has room. A PodGroup whose kind
   the API server does not serve (404: Volcano's or coscheduling's CRDs are not installed) is handled the
   same way: the pods are still created, and the status says Stalled/GangSchedulerMissing.
   A create refused for another reason (a 4xx in REFUSED: invalid, forbidden by admission, too large) does not
   stop the pass either: the status says Stalled/ChildRefused with the child and the API's message. A 409 from a
   same-named object someone else controls (children.create_missing reads it) makes Stalled/NameConflict naming
   the object and its controller. Both come with a Warning Event (on the Stalled change) and are retried with a
   backoff (the time stalled so far, 5 s to 5 min), never every second: refusals.py, shared with the
   InferenceService pass.
   Owned children the spec no longer asks for (pods beyond a lowered replica count, a PodGroup once gang
   scheduling is off, a ConfigMap once the job is not MPI) are deleted, as Kubeflow does, while the job is
   admitted and unfinished; ConfigMaps and PodGroups are listed for that only after a spec change (generation
   differs from observedGeneration). Existing children are
   compared on the fields the reconciler owns (`owned_fields`: labels it sets on every child; a Service's
   selector, ports, clusterIP and publishNotReadyAddresses; a ConfigMap's data; a PodGroup's spec) and get one
   merge patch only where those differ (hand edits drift back). A pod's spec is not repaired (mostly
   immutable); a matching child is left untouched.
7. Status: computed by status.py from the pods and pod groups (with a Stalled condition naming what holds
   the job up: quota, gang or pod unschedulable, image pull; see status.py); written through the status
   subresource only when it differs, with the job's resourceVersion; on 409 the job is read again and the
   status recomputed (bounded retries). Each change to a phase with a condition (all but Pending) records a
   Kubernetes Event (reason and message of the phase's condition; best effort), and so does each change of
   the Stalled condition's status or reason (Warning while True) unless the phase's event had that reason.
8. Completion: once Succeeded or Failed, pods are deleted per runPolicy.cleanPodPolicy (`pods_to_clean`), and
   a job past activeDeadlineSeconds loses its unfinished pods; ttlSecondsAfterFinished after completionTime
   the job itself is deleted (and the finalizer pass removes what is left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mlgate.engine import PolicySet
from mlgate.model.facts import ClusterFacts
from mlgate.workloads import render

from .children import (
    FINALIZER,
    ChildKey,
    Outcome,
    OwnerKind,
    delete_unwanted,
    ensure_finalizer,
    finalize,
    key,
    owned_children,
    repair_drift,
)
from .client import ApiError, KubeClient
from .desired import JOB_LABEL, desired_children
from .events import record_event
from .mpi import ssh_secret_name
from .preflight import invalid_name, namespace_facts, violation
from .refusals import (
    INVALID_NAME,
    POLICY_VIOLATION,
    Refusals,
    Verdict,
    create_children,
    create_stall,
    stall_backoff,
    stall_event,
    stalled_on,
)
from .sshkeys import with_ssh_keys
from .status import (
    TERMINAL,
    Observation,
    compute_status,
    condition,
    now_rfc3339,
    parse_time,
)

__all__ = ["FINALIZER", "JOB_API", "TRAINING", "Outcome", "reconcile_training_job"]

log = logging.getLogger("mlgate.reconciler")
JOB_API, JOB_KIND = "mlgate.dev/v1alpha1", "TrainingJob"
TRAINING = OwnerKind(JOB_API, JOB_KIND, JOB_LABEL, (  # deleted in this order: pods first, so nothing runs alone
    ("v1", "Pod"), ("v1", "Service"), ("v1", "ConfigMap"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"), ("scheduling.x-k8s.io/v1alpha1", "PodGroup")))
STATUS_RETRIES = 5
RESTARTS_ANNOTATION = "mlgate.dev/restarts"  # pod restarts used, counted per job against runPolicy.backoffLimit


def reconcile_training_job(client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
                           facts: ClusterFacts | None = None, now: Callable[[], str] = now_rfc3339) -> Outcome:
    outcome = Outcome()
    job = client.get(JOB_API, JOB_KIND, namespace, name)
    if job is None:
        return outcome
    meta = job["metadata"]
    if meta.get("deletionTimestamp"):
        deleting = job  # narrowed to a dict for the closure
        finalize(client, job, TRAINING, outcome, before_release=lambda: _release(client, deleting, outcome))
        return outcome
    finalized = ensure_finalizer(client, job, outcome)
    if finalized is None:
        return outcome
    job, verdict = _gate(client, finalized, policies, facts)
    desired = [] if verdict else desired_children(job)
    kinds = _listed_kinds(job, desired)
    owned = owned_children(client, job, TRAINING, kinds)
    if _spec_changed(job) or any(child["kind"] == "Secret" for child in desired):
        _add_ssh_secret(client, job, owned)
    refusals = Refusals()
    if verdict is None and (job.get("status") or {}).get("phase") not in TERMINAL:
        try:
            job = _restart_failed(client, job, owned, outcome)
        except ApiError as exc:
            if exc.status != 409:
                raise
            outcome.requeue = True  # the job changed under us: count restarts on fresh state next pass
            return outcome
        delete_unwanted(client, desired, owned, outcome)  # pods beyond the replicas, a PodGroup no longer asked
        refusals = create_children(client, with_ssh_keys(desired, set(owned)), owned, outcome)
        repair_drift(client, desired, owned, outcome)
    status, pods = _write_status(client, job, verdict, policies=policies, facts=facts, now=now, outcome=outcome,
                                 refusals=refusals, owned=owned, desired=desired, kinds=kinds)
    _clean_up(client, job, status, pods, outcome)
    if ttl_expired(job, status, now()):
        client.delete(JOB_API, JOB_KIND, namespace, name)  # the finalizer pass then removes the children
        outcome.deleted.append(f"{JOB_KIND}/{name}")
        outcome.requeue = True
    else:
        stamp = now()
        waits = [s for s in (next_change(job, status, stamp), stall_backoff(status, stamp)) if s is not None]
        outcome.requeue_after = min(waits, default=None)
    return outcome


def _add_ssh_secret(client: KubeClient, job: dict[str, Any], owned: dict[ChildKey, dict[str, Any]]) -> None:
    """The job's SSH Secret, read by its name: the reconciler may get, never list, Secrets (least privilege).
    The garbage collector deletes it with the job (its ownerReference); a job that stops being MPI has it
    deleted here as unwanted."""
    meta = job["metadata"]
    secret = client.get("v1", "Secret", meta["namespace"], ssh_secret_name(str(meta["name"])))
    refs = ((secret or {}).get("metadata") or {}).get("ownerReferences") or []
    if secret is not None and any(r.get("uid") == meta.get("uid") and r.get("controller") for r in refs):
        secret.setdefault("apiVersion", "v1")
        secret.setdefault("kind", "Secret")
        owned[("v1", "Secret", str(secret["metadata"]["name"]))] = secret


def _listed_kinds(job: dict[str, Any], desired: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The child kinds a pass reads: pods and services always, a ConfigMap or PodGroup only when desired or
    after a spec change, which may have made one unwanted (the finalizer pass reads every kind)."""
    changed = _spec_changed(job)
    wanted = {("v1", "Pod"), ("v1", "Service")} | {(c["apiVersion"], c["kind"]) for c in desired}
    return tuple(kind for kind in TRAINING.children if changed or kind in wanted)


def _spec_changed(job: dict[str, Any]) -> bool:
    return bool(job["metadata"].get("generation") != (job.get("status") or {}).get("observedGeneration"))


def _release(client: KubeClient, job: dict[str, Any], outcome: Outcome) -> None:
    """After the listed children: the SSH Secret (read by name, so not among them), then the checkpoint claim."""
    owned: dict[ChildKey, dict[str, Any]] = {}
    _add_ssh_secret(client, job, owned)
    for _, kind, name in owned:
        if client.delete("v1", kind, job["metadata"]["namespace"], name):
            outcome.deleted.append(f"{kind}/{name}")
    _release_claim(client, job, outcome)


def next_change(job: dict[str, Any], status: dict[str, Any], now: str) -> float | None:
    """Seconds until the job changes with no event to say so: its activeDeadlineSeconds or its TTL runs out."""
    run_policy = (job.get("spec") or {}).get("runPolicy") or {}
    deadline, ttl = run_policy.get("activeDeadlineSeconds"), run_policy.get("ttlSecondsAfterFinished")
    if status.get("phase") in TERMINAL:
        since, seconds = status.get("completionTime"), ttl
    else:
        since, seconds = status.get("startTime"), deadline
    if not since or not isinstance(seconds, int):
        return None
    return max(0.0, seconds - (parse_time(now) - parse_time(str(since))).total_seconds()) + 1.0  # 1 s past due


# --- pre-flight --------------------------------------------------------------------------------------


def _gate(client: KubeClient, job: dict[str, Any], policies: PolicySet,
          facts: ClusterFacts | None) -> tuple[dict[str, Any], Verdict | None]:
    """(the job, the pre-flight verdict) for a job not yet materialized or refused so far; a refused job the
    engine now admits comes back without its failure, so the pass materializes it."""
    status = job.get("status") or {}
    refused = _refused(status)
    if status.get("phase") not in (None, "Pending") and refused is None:
        return job, None
    bad_name = invalid_name(job)
    if bad_name is not None:
        return job, (INVALID_NAME, bad_name)
    if facts is None:  # read only when the gate runs: a materialized job's passes skip the namespace GET
        facts = namespace_facts(client, job["metadata"]["namespace"])
    found = violation(job, policies, facts)
    if found is not None:
        return job, (POLICY_VIOLATION, found)
    return (job if refused is None else {**job, "status": _reopened(status)}), None


def _refused(status: dict[str, Any]) -> str | None:
    """The pre-flight reason a job failed with, if it did."""
    failed = condition(status, "Failed") or {}
    reason = failed.get("reason")
    return str(reason) if status.get("phase") == "Failed" and reason in (POLICY_VIOLATION, INVALID_NAME) else None


def _reopened(status: dict[str, Any]) -> dict[str, Any]:
    """A refused job's status without the refusal: it starts over (status.py keeps a Failed phase for good)."""
    out = {k: v for k, v in status.items() if k not in ("phase", "completionTime")}
    out["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Failed"]
    return out


# --- restarts ----------------------------------------------------------------------------------------


def restarts(job: dict[str, Any]) -> int:
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def _restart_failed(client: KubeClient, job: dict[str, Any], owned: dict[ChildKey, dict[str, Any]],
                    outcome: Outcome) -> dict[str, Any]:
    """Delete failed pods (to be recreated) while runPolicy.backoffLimit allows; the count is written first."""
    limit = ((job.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    failed = [pod_key for pod_key, child in owned.items() if pod_key[1] == "Pod" and not child["metadata"].get(
        "deletionTimestamp") and (child.get("status") or {}).get("phase") == "Failed"]
    used = restarts(job)
    if not isinstance(limit, int) or not failed or used + len(failed) > limit:
        return job  # nothing failed, or the status will say BackoffLimitExceeded / PodFailed
    meta = job["metadata"]
    patch = {"metadata": {"annotations": {RESTARTS_ANNOTATION: str(used + len(failed))},
                          "resourceVersion": meta["resourceVersion"]}}
    job = client.patch(JOB_API, JOB_KIND, meta["namespace"], meta["name"], patch)
    for pod_key in sorted(failed):
        client.delete("v1", "Pod", meta["namespace"], pod_key[2])
        owned.pop(pod_key)
        outcome.restarted.append(f"Pod/{pod_key[2]}")
    return job


# --- children ----------------------------------------------------------------------------------------


# --- status ------------------------------------------------------------------------------------------


def _write_status(client: KubeClient, job: dict[str, Any], verdict: Verdict | None, *, policies: PolicySet,
                  facts: ClusterFacts | None, now: Callable[[], str], outcome: Outcome, refusals: Refusals,
                  owned: dict[ChildKey, dict[str, Any]], desired: list[dict[str, Any]],
                  kinds: tuple[tuple[str, str], ...]) -> tuple[dict[str, Any], list[Any]]:
    """(the status now stored, the job's pods); `owned` and `desired` are what this pass saw, wrote and wanted,
    worked out again (with the job read again) only after a 409."""
    spec = job.get("spec") or {}
    expected = dict(render.training_roles(spec))
    meta = job["metadata"]
    deadline = (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
    for attempt in range(STATUS_RETRIES):
        if attempt:
            owned = owned_children(client, job, TRAINING, kinds)
            desired = [] if verdict else desired_children(job)
        pods = [c for (_, kind, _), c in owned.items() if kind == "Pod"]
        podgroups = [c for (_, kind, _), c in owned.items() if kind == "PodGroup"]
        desired_keys = {key(c) for c in desired}
        limit = (spec.get("runPolicy") or {}).get("backoffLimit")
        refused = verdict[1] if verdict else None
        seen = Observation(pods=pods, expected=expected, created=bool(desired_keys) and desired_keys <= set(owned),
                           violation=refused, deadline_seconds=deadline if isinstance(deadline, int) else None,
                           backoff_limit=limit if isinstance(limit, int) else None, restarts=restarts(job),
                           restarted=bool(outcome.restarted), podgroups=podgroups, quota_denied=refusals.quota,
                           unserved=refusals.unserved)
        old = job.get("status") or {}
        stamp = now()
        new = _preflight_reason(compute_status(old, meta.get("generation"), seen, stamp), verdict)
        cause = create_stall(refusals)
        if cause is not None and new.get("phase") not in TERMINAL:
            new = stalled_on(old, new, cause, stamp)
        if new == old:
            return new, pods
        try:
            client.replace_status({**job, "status": new})
            outcome.status_written = True
            announced = None
            if new.get("phase") != old.get("phase"):
                announced = _event(client, job, new, stamp)
            stall_event(client, job, old, new, stamp, announced=announced)
            return new, pods
        except ApiError as exc:
            if exc.status != 409:
                raise
        fresh = client.get(JOB_API, JOB_KIND, meta["namespace"], meta["name"])
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return old, pods
        job, verdict = _gate(client, fresh, policies, facts)
        meta = job["metadata"]
    outcome.requeue = True
    return job.get("status") or {}, []


def _preflight_reason(status: dict[str, Any], verdict: Verdict | None) -> dict[str, Any]:
    """status.py fails every pre-flight refusal as PolicyViolation; an invalid name gets its own reason."""
    if verdict is None or verdict[0] == POLICY_VIOLATION:
        return status
    conditions = [{**c, "reason": verdict[0]} if c.get("type") == "Failed" else c for c in status["conditions"]]
    return {**status, "conditions": conditions}


def _event(client: KubeClient, job: dict[str, Any], status: dict[str, Any], stamp: str) -> str | None:
    """A Kubernetes Event for a phase transition, with the reason and message of the phase's condition; the
    condition's reason (None when there is no condition, so no event)."""
    phase = str(status.get("phase"))
    found = condition(status, phase)
    if found is None:  # Pending has no condition and nothing to say; a Stalled event says why it waits
        return None
    record_event(client, job, str(found.get("reason") or phase), str(found.get("message") or phase),
                 warning=phase == "Failed", stamp=stamp)
    return None if found.get("reason") is None else str(found.get("reason"))


# --- checkpoint claim ---------------------------------------------------------------------------------


def _release_claim(client: KubeClient, job: dict[str, Any], outcome: Outcome) -> None:
    """spec.checkpoint.retain false: delete the checkpoint claim unless a live job of the namespace uses it."""
    checkpoint = (job.get("spec") or {}).get("checkpoint") or {}
    claim, meta = checkpoint.get("claimName"), job["metadata"]
    if checkpoint.get("retain", True) is not False or not claim:
        return
    users = sorted(str(other["metadata"]["name"]) for other in client.list(JOB_API, JOB_KIND, meta["namespace"])
                   if other["metadata"]["name"] != meta["name"] and not other["metadata"].get("deletionTimestamp")
                   and ((other.get("spec") or {}).get("checkpoint") or {}).get("claimName") == claim)
    if users:
        log.info("keeping PersistentVolumeClaim %s/%s of deleted TrainingJob %s (checkpoint.retain false): "
                 "TrainingJob %s still uses it", meta["namespace"], claim, meta["name"], ", ".join(users))
        return
    if client.delete("v1", "PersistentVolumeClaim", meta["namespace"], str(claim)):
        outcome.deleted.append(f"PersistentVolumeClaim/{claim}")


# --- completion --------------------------------------------------------------------------------------


def pods_to_clean(status: dict[str, Any], pods: list[dict[str, Any]], clean_pod_policy: str) -> list[str]:
    """Pods to delete once the job finished: runPolicy.cleanPodPolicy All (every pod), Running (pods not yet
    finished), None (the default: keep them for their logs); a job past its deadline loses its unfinished pods
    whatever the policy (the deadline terminates the job)."""
    if status.get("phase") not in TERMINAL:
        return []
    failed: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
    deadline = status.get("phase") == "Failed" and failed.get("reason") == "DeadlineExceeded"
    out = []
    for pod in pods:
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if clean_pod_policy == "All" or (not finished and (clean_pod_policy == "Running" or deadline)):
            out.append(str(pod["metadata"]["name"]))
    return sorted(out)


def ttl_expired(job: dict[str, Any], status: dict[str, Any], now: str) -> bool:
    """runPolicy.ttlSecondsAfterFinished has passed since completionTime (0: at once)."""
    ttl = ((job.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    done = status.get("completionTime")
    if not isinstance(ttl, int) or status.get("phase") not in TERMINAL or not done:
        return False
    return (parse_time(now) - parse_time(str(done))).total_seconds() >= ttl


def _clean_up(client: KubeClient, job: dict[str, Any], status: dict[str, Any], pods: list[dict[str, Any]],
              outcome: Outcome) -> None:
    policy = str(((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None")
    for name in pods_to_clean(status, pods, policy):
        if client.delete("v1", "Pod", job["metadata"]["namespace"], name):
            outcome.deleted.append(f"Pod/{name}")
