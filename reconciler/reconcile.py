"""One level-triggered reconcile of ONE TrainingJob: observe, compare with desired.py, fix the difference.

`reconcile_training_job(client, namespace, name, policies)` runs passes.py's skeleton with `TrainingPass`:
1. Read the job (from the informers' cache under the controller); gone -> nothing to do.
2. Being deleted -> delete its children (pods, an MPI launcher Job, then services, config maps, pod groups), and
   only when none is
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
6. Children: an MPI launcher (a batch Job) is created only once every worker pod is Ready (launcher.py).
   List what the job owns (label `mlgate.dev/job-name` AND an ownerReference with the job's uid),
   create every desired child that is missing (a deleted pod or service comes back) unless the job already
   finished. A create a ResourceQuota refuses (403 "exceeded quota", or "failed quota" for a pod without the
   requests or limits the quota requires) does not stop the pass: the other children are still created, the
   status says Stalled/QuotaExceeded (or Stalled/QuotaNeedsResources) with the API's message, and
   the pass asks to run again (`PassResult.requeue`) to retry once the quota has room. A PodGroup whose kind
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
   the job up: quota, gang or pod unschedulable, image pull; see status.py); written by passes.write_status
   only when it differs (on 409 the job is read again, gated again and its children listed again). Each change
   to a phase with a condition (all but Pending) records a Kubernetes Event (reason and message of the phase's
   condition; best effort), and so does each change of the Stalled condition's status or reason (Warning while
   True) unless the phase's event had that reason.
8. Completion: once Succeeded or Failed, pods (and an MPI launcher Job, as its pod) are deleted per
   runPolicy.cleanPodPolicy (`pods_to_clean`), and
   a job past activeDeadlineSeconds loses its unfinished pods; ttlSecondsAfterFinished after completionTime
   the job itself is deleted (and the finalizer pass removes what is left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlgate.engine import PolicySet
from mlgate.model.facts import ClusterFacts
from mlgate.workloads import render

from .cache import Reader
from .children import (
    FINALIZER,
    ChildKey,
    OwnerKind,
    delete_unwanted,
    key,
    owned_children,
    repair_drift,
)
from .client import KubeClient
from .desired import JOB_LABEL, desired_children
from .launcher import is_launcher_job, launcher_as_pod, waiting_for_workers
from .mpi import ssh_secret_name
from .passes import Context, Converged, Plan, Written, run_pass
from .preflight import invalid_name, namespace_facts, violation
from .reasons import Reason
from .refusals import (
    INVALID_NAME,
    POLICY_VIOLATION,
    Refusals,
    create_children,
    create_stall,
    stall_backoff,
    stalled_on,
)
from .results import PassResult, requeue_on_conflict
from .sshkeys import with_ssh_keys
from .status import TERMINAL, Observation, compute_status, condition, now_rfc3339, parse_time

__all__ = ["FINALIZER", "JOB_API", "TRAINING", "TrainingPass", "reconcile_training_job"]

log = logging.getLogger("mlgate.reconciler")
JOB_API, JOB_KIND = "mlgate.dev/v1alpha1", "TrainingJob"
TRAINING = OwnerKind(JOB_API, JOB_KIND, JOB_LABEL, (  # deleted in this order: pods first, so nothing runs alone
    ("v1", "Pod"), ("batch/v1", "Job"), ("v1", "Service"), ("v1", "ConfigMap"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"), ("scheduling.x-k8s.io/v1alpha1", "PodGroup")))
RESTARTS_ANNOTATION = "mlgate.dev/restarts"  # pod restarts used, counted per job against runPolicy.backoffLimit


def reconcile_training_job(client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
                           facts: ClusterFacts | None = None, now: Callable[[], str] = now_rfc3339,
                           reader: Reader | None = None) -> PassResult:
    return run_pass(TrainingPass(), client, namespace, name, policies, facts=facts, now=now, reader=reader)


@dataclass(frozen=True)
class TrainingPass:
    """The TrainingJob as passes.run_pass sees it."""

    kind: OwnerKind = TRAINING

    def plan(self, ctx: Context, owner: dict[str, Any]) -> Plan:
        job, verdict = _gate(ctx, owner)
        desired = [] if verdict else desired_children(job)
        owned = owned_children(ctx.reader, job, TRAINING, _listed_kinds(job, desired))
        if _spec_changed(job) or any(child["kind"] == "Secret" for child in desired):
            _add_ssh_secret(ctx.reader, job, owned)
        desired = waiting_for_workers(desired, set(owned), _of_kind(owned, "Pod"))  # an MPI launcher waits
        return Plan(job, verdict, desired, owned)

    def replan(self, ctx: Context, fresh: dict[str, Any], plan: Plan) -> Plan:
        return self.plan(ctx, fresh)

    def converge(self, ctx: Context, plan: Plan, result: PassResult) -> Converged | None:
        job, verdict, desired, owned = plan.owner, plan.verdict, plan.desired, plan.owned
        if verdict is not None or (job.get("status") or {}).get("phase") in TERMINAL:
            return Converged(plan, Refusals())
        with requeue_on_conflict(result) as conflict:  # the job changed: count restarts on fresh state next pass
            job = _restart_failed(ctx.client, job, owned, result)
        if conflict.lost:
            return None
        delete_unwanted(ctx.client, desired, owned, result)  # pods beyond the replicas, a PodGroup no longer asked
        refusals = create_children(ctx.client, with_ssh_keys(desired, set(owned)), owned, result)
        repair_drift(ctx.client, desired, owned, result)
        return Converged(Plan(job, verdict, desired, owned), refusals)

    def status(self, plan: Plan, refusals: Refusals, result: PassResult, stamp: str) -> dict[str, Any]:
        job, verdict, owned = plan.owner, plan.verdict, plan.owned
        spec = job.get("spec") or {}
        run_policy = spec.get("runPolicy") or {}
        deadline, limit = run_policy.get("activeDeadlineSeconds"), run_policy.get("backoffLimit")
        desired_keys = {key(c) for c in plan.desired}
        launchers = [launcher_as_pod(j) for j in _of_kind(owned, "Job") if is_launcher_job(j)]
        seen = Observation(pods=_of_kind(owned, "Pod") + launchers, expected=dict(render.training_roles(spec)),
                           created=bool(desired_keys) and desired_keys <= set(owned),
                           violation=verdict.message if verdict else None,
                           deadline_seconds=deadline if isinstance(deadline, int) else None,
                           backoff_limit=limit if isinstance(limit, int) else None, restarts=restarts(job),
                           restarted=bool(result.restarted), podgroups=_of_kind(owned, "PodGroup"),
                           quota_denied=refusals.quota, unserved=refusals.unserved)
        old = job.get("status") or {}
        new = _preflight_reason(compute_status(old, job["metadata"].get("generation"), seen, stamp), verdict)
        cause = create_stall(refusals)
        if cause is not None and new.get("phase") not in TERMINAL:
            new = stalled_on(old, new, cause, stamp)
        return new

    def phase_event(self, status: dict[str, Any]) -> Reason | None:
        """The phase's condition (Pending has none and nothing to say; a Stalled event says why it waits)."""
        phase = str(status.get("phase"))
        found = condition(status, phase)
        if found is None:
            return None
        return Reason(str(found.get("reason") or phase), str(found.get("message") or phase))

    def settle(self, ctx: Context, written: Written, result: PassResult) -> None:
        job, status = written.plan.owner, written.status
        _clean_up(ctx.client, job, status, written.plan.owned, result)
        if ttl_expired(job, status, ctx.now()):
            meta = job["metadata"]
            ctx.client.delete(JOB_API, JOB_KIND, meta["namespace"], meta["name"])  # the finalizer pass cleans up
            result.deleted.append(f"{JOB_KIND}/{meta['name']}")
            result.requeue = True
            return
        stamp = ctx.now()
        waits = [s for s in (next_change(job, status, stamp), stall_backoff(status, stamp)) if s is not None]
        result.requeue_after = min(waits, default=None)

    def release(self, ctx: Context, owner: dict[str, Any], result: PassResult) -> None:
        """After the listed children: the SSH Secret (read by name, so not among them), then the checkpoint
        claim."""
        owned: dict[ChildKey, dict[str, Any]] = {}
        _add_ssh_secret(ctx.client, owner, owned)
        for _, kind, name in owned:
            if ctx.client.delete("v1", kind, owner["metadata"]["namespace"], name):
                result.deleted.append(f"{kind}/{name}")
        _release_claim(ctx, owner, result)


def _of_kind(owned: dict[ChildKey, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [child for (_, child_kind, _), child in owned.items() if child_kind == kind]


def _add_ssh_secret(reader: Reader, job: dict[str, Any], owned: dict[ChildKey, dict[str, Any]]) -> None:
    """The job's SSH Secret, read by its name: the reconciler may get, never list, Secrets (least privilege).
    The garbage collector deletes it with the job (its ownerReference); a job that stops being MPI has it
    deleted here as unwanted."""
    meta = job["metadata"]
    secret = reader.get("v1", "Secret", meta["namespace"], ssh_secret_name(str(meta["name"])))
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


def _gate(ctx: Context, job: dict[str, Any]) -> tuple[dict[str, Any], Reason | None]:
    """(the job, the pre-flight verdict) for a job not yet materialized or refused so far; a refused job the
    engine now admits comes back without its failure, so the pass materializes it."""
    status = job.get("status") or {}
    refused = _refused(status)
    if status.get("phase") not in (None, "Pending") and refused is None:
        return job, None
    bad_name = invalid_name(job)
    if bad_name is not None:
        return job, Reason(INVALID_NAME, bad_name)
    # read only when the gate runs: a materialized job's passes skip the namespace GET
    facts = ctx.facts if ctx.facts is not None else namespace_facts(ctx.client, job["metadata"]["namespace"])
    found = violation(job, ctx.policies, facts)
    if found is not None:
        return job, Reason(POLICY_VIOLATION, found)
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


def _preflight_reason(status: dict[str, Any], verdict: Reason | None) -> dict[str, Any]:
    """status.py fails every pre-flight refusal as PolicyViolation; an invalid name gets its own reason."""
    if verdict is None or verdict.reason == POLICY_VIOLATION:
        return status
    conditions = [{**c, "reason": verdict.reason} if c.get("type") == "Failed" else c for c in status["conditions"]]
    return {**status, "conditions": conditions}


# --- restarts ----------------------------------------------------------------------------------------


def restarts(job: dict[str, Any]) -> int:
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def _restart_failed(client: KubeClient, job: dict[str, Any], owned: dict[ChildKey, dict[str, Any]],
                    result: PassResult) -> dict[str, Any]:
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
        result.restarted.append(f"Pod/{pod_key[2]}")
    return job


# --- deletion and completion ---------------------------------------------------------------------------


def _release_claim(ctx: Context, job: dict[str, Any], result: PassResult) -> None:
    """spec.checkpoint.retain false: delete the checkpoint claim unless a live job of the namespace uses it."""
    checkpoint = (job.get("spec") or {}).get("checkpoint") or {}
    claim, meta = checkpoint.get("claimName"), job["metadata"]
    if checkpoint.get("retain", True) is not False or not claim:
        return
    users = sorted(str(other["metadata"]["name"]) for other in ctx.reader.list(JOB_API, JOB_KIND, meta["namespace"])
                   if other["metadata"]["name"] != meta["name"] and not other["metadata"].get("deletionTimestamp")
                   and ((other.get("spec") or {}).get("checkpoint") or {}).get("claimName") == claim)
    if users:
        log.info("keeping PersistentVolumeClaim %s/%s of deleted TrainingJob %s (checkpoint.retain false): "
                 "TrainingJob %s still uses it", meta["namespace"], claim, meta["name"], ", ".join(users))
        return
    if ctx.client.delete("v1", "PersistentVolumeClaim", meta["namespace"], str(claim)):
        result.deleted.append(f"PersistentVolumeClaim/{claim}")


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


def _clean_up(client: KubeClient, job: dict[str, Any], status: dict[str, Any], owned: dict[ChildKey, dict[str, Any]],
              result: PassResult) -> None:
    """cleanPodPolicy's pods, and an MPI launcher Job as its pod: a running launcher past the deadline goes too
    (deleted with its pods: client.delete propagates in the background)."""
    policy = str(((job.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None")
    launchers = {str(j["metadata"]["name"]): j for j in _of_kind(owned, "Job") if is_launcher_job(j)}
    pods = _of_kind(owned, "Pod") + [launcher_as_pod(j) for j in launchers.values()]
    for name in pods_to_clean(status, pods, policy):
        api_version, kind = ("batch/v1", "Job") if name in launchers else ("v1", "Pod")
        if client.delete(api_version, kind, job["metadata"]["namespace"], name):
            result.deleted.append(f"{kind}/{name}")
