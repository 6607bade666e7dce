"""One level-triggered reconcile of ONE TrainingJob: observe, compare with desired.py, fix the difference.

`reconcile_training_job(client, namespace, name, policies)`:
1. Read the job; gone -> nothing to do.
2. Being deleted -> delete its children (pods, then services, config maps, pod groups), and only when none is
   left remove the finalizer `mlgate.dev/cleanup` (a merge patch carrying resourceVersion). A restart mid-way
   simply runs this again: deletes are idempotent and the finalizer goes last.
3. No finalizer yet -> add it (merge patch with resourceVersion: a 409 means someone else wrote first, so the
   pass stops and the next one starts from fresh state).
4. Pre-flight: run the policy engine on the job as stored. Denied -> create nothing; the status says
   Failed/PolicyViolation with the engine's messages. Unless the caller passes facts, the engine gets the
   job's namespace labels (read from the API, so namespaceSelector policies match as in the webhook) and
   `known=False` for everything else (rules that need PVCs, storage classes or nodes skip, never guess).
   The pre-flight gates materialization only: a job that already got its children (phase Created or later)
   is not failed by a policy added afterwards; admission decides about updates.
5. Restarts: with runPolicy.backoffLimit, failed pods are deleted and recreated while the restarts used (the
   job annotation `mlgate.dev/restarts`, written BEFORE the deletes so a crash never under-counts) stay within
   the limit; beyond it the status says Failed/BackoffLimitExceeded.
6. Children: list what the job owns (label `mlgate.dev/job-name` AND an ownerReference with the job's uid),
   create every desired child that is missing (a deleted pod or service comes back) unless the job already
   finished. Existing children are compared on the fields the reconciler owns (`owned_fields`: labels it sets
   on every child; a Service's selector, ports, clusterIP and publishNotReadyAddresses; a ConfigMap's data; a
   PodGroup's spec) and get one merge patch only where those differ (hand edits drift back). A pod's spec is
   not repaired (mostly immutable); a matching child is left untouched.
7. Status: computed by status.py from the pods; written through the status subresource only when it differs,
   with the job's resourceVersion; on 409 the job is read again and the status recomputed (bounded retries).
   Each phase change also records a Kubernetes Event (reason and message of the phase's condition; best effort).
8. Completion: once Succeeded or Failed, pods are deleted per runPolicy.cleanPodPolicy (`pods_to_clean`), and
   a job past activeDeadlineSeconds loses its unfinished pods; ttlSecondsAfterFinished after completionTime
   the job itself is deleted (and the finalizer pass removes what is left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.model.facts import ClusterFacts, StaticFacts
from mlgate.rules.gang_markers import label_value
from mlgate.workloads import render

from .client import ApiError, KubeClient
from .desired import JOB_LABEL, desired_children
from .status import TERMINAL, Observation, compute_status, now_rfc3339, parse_time

__all__ = ["FINALIZER", "JOB_API", "Outcome", "reconcile_training_job"]

log = logging.getLogger("mlgate.reconciler")
FINALIZER = "mlgate.dev/cleanup"
JOB_API, JOB_KIND = "mlgate.dev/v1alpha1", "TrainingJob"
CHILD_KINDS = (("v1", "Pod"), ("v1", "Service"), ("v1", "ConfigMap"),
               ("scheduling.volcano.sh/v1beta1", "PodGroup"), ("scheduling.x-k8s.io/v1alpha1", "PodGroup"))
STATUS_RETRIES = 5
EVENT_SOURCE = "mlgate-reconciler"
MAX_MESSAGE = 4096  # the CRD allows 32768 per condition message; events are shown on one line
RESTARTS_ANNOTATION = "mlgate.dev/restarts"  # pod restarts used, counted per job against runPolicy.backoffLimit


@dataclass
class Outcome:
    """What one pass did (for logs and tests)."""

    created: list[str] = field(default_factory=list)  # "Pod/llm-worker-0"
    deleted: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # children patched back to the spec
    restarted: list[str] = field(default_factory=list)  # failed pods deleted to be recreated (backoffLimit)
    status_written: bool = False
    finalized: bool = False  # the finalizer was removed (the job can go)
    requeue: bool = False  # state moved under us; run again soon


def reconcile_training_job(client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
                           facts: ClusterFacts | None = None, now: Callable[[], str] = now_rfc3339) -> Outcome:
    outcome = Outcome()
    job = client.get(JOB_API, JOB_KIND, namespace, name)
    if job is None:
        return outcome
    meta = job["metadata"]
    if meta.get("deletionTimestamp"):
        _finalize(client, job, outcome)
        return outcome
    if FINALIZER not in (meta.get("finalizers") or []):
        try:
            job = _set_finalizers(client, job, [*(meta.get("finalizers") or []), FINALIZER])
        except ApiError as exc:
            if exc.status == 409:
                outcome.requeue = True
                return outcome
            raise
    if facts is None:
        facts = namespace_facts(client, namespace)
    violation = _gate(job, policies, facts)
    desired = [] if violation else desired_children(job)
    owned = _owned_children(client, job)
    if violation is None and (job.get("status") or {}).get("phase") not in TERMINAL:
        try:
            job = _restart_failed(client, job, owned, outcome)
        except ApiError as exc:
            if exc.status != 409:
                raise
            outcome.requeue = True  # the job changed under us: count restarts on fresh state next pass
            return outcome
        _create_missing(client, desired, owned, outcome)
        _repair_drift(client, desired, owned, outcome)
    status, pods = _write_status(client, job, violation, policies=policies, facts=facts, now=now, outcome=outcome)
    _clean_up(client, job, status, pods, outcome)
    if ttl_expired(job, status, now()):
        client.delete(JOB_API, JOB_KIND, namespace, name)  # the finalizer pass then removes the children
        outcome.deleted.append(f"{JOB_KIND}/{name}")
        outcome.requeue = True
    return outcome


# --- pre-flight --------------------------------------------------------------------------------------


def namespace_facts(client: KubeClient, namespace: str) -> ClusterFacts:
    """Facts that know the namespace's labels only (known=False: fact-based rules skip)."""
    ns = client.get_namespace(namespace)
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    return StaticFacts(namespaces={namespace: dict(labels)}, known=False)


def _gate(job: dict[str, Any], policies: PolicySet, facts: ClusterFacts) -> str | None:
    """The pre-flight verdict for a job not yet materialized (or already refused); None for the others."""
    status = job.get("status") or {}
    refused = any(c.get("type") == "Failed" and c.get("reason") == "PolicyViolation"
                  for c in status.get("conditions") or [])
    return _preflight(job, policies, facts) if status.get("phase") in (None, "Pending") or refused else None


def _preflight(job: dict[str, Any], policies: PolicySet, facts: ClusterFacts) -> str | None:
    """None when the engine admits the job, else its violation messages (one per line)."""
    decision = evaluate(job, policies, facts=facts)
    if decision.allowed:
        return None
    lines = [line for result in decision.violations for line in result.messages()]
    message = "denied by policy: " + "; ".join(lines or ["a policy denied the job"])
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


# --- children ----------------------------------------------------------------------------------------


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return str(obj.get("apiVersion")), str(obj.get("kind")), str(obj["metadata"]["name"])


def _owned_children(client: KubeClient, job: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    meta = job["metadata"]
    selector = f"{JOB_LABEL}={label_value(str(meta['name']))}"
    uid = meta.get("uid")
    owned: dict[tuple[str, str, str], dict[str, Any]] = {}
    for api_version, kind in CHILD_KINDS:
        for item in client.list(api_version, kind, meta["namespace"], selector):
            refs = (item.get("metadata") or {}).get("ownerReferences") or []
            if any(ref.get("uid") == uid and ref.get("controller") for ref in refs):
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                owned[(api_version, kind, str(item["metadata"]["name"]))] = item
    return owned


def _create_missing(client: KubeClient, desired: list[dict[str, Any]],
                    owned: dict[tuple[str, str, str], dict[str, Any]], outcome: Outcome) -> None:
    for child in desired:
        key = _key(child)
        if key in owned:
            continue
        try:
            owned[key] = client.create(child)
            outcome.created.append(f"{key[1]}/{key[2]}")
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.warning("%s/%s exists but is not controlled by this job; leaving it alone", key[1], key[2])
            outcome.requeue = True


def owned_fields(child: dict[str, Any]) -> dict[str, Any]:
    """The part of a desired child the reconciler keeps equal to the spec (as a merge patch)."""
    out: dict[str, Any] = {"metadata": {"labels": dict(child["metadata"].get("labels") or {})}}
    kind = child.get("kind")
    if kind == "Service":
        spec = child.get("spec") or {}
        out["spec"] = {k: spec[k] for k in ("clusterIP", "selector", "ports", "publishNotReadyAddresses") if k in spec}
    elif kind == "ConfigMap":
        out["data"] = child.get("data") or {}
    elif kind == "PodGroup":
        out["spec"] = child.get("spec") or {}
    return out


EXACT_MAPS = {"Service": ("spec", "selector"), "ConfigMap": ("data",)}  # keys not in the spec are removed


def _removals(child: dict[str, Any], live: dict[str, Any], patch: dict[str, Any]) -> bool:
    """Null out, in `patch`, keys of an exactly-owned map that the spec does not have; True when any."""
    path = EXACT_MAPS.get(str(child.get("kind")))
    if path is None:
        return False
    wanted, have = patch, live
    for step in path:
        wanted, have = wanted.get(step) or {}, (have or {}).get(step) or {}
    extra = [k for k in have if k not in wanted]
    for key in extra:
        wanted[key] = None
    return bool(extra)


def drift(wanted: Any, live: Any) -> bool:
    """True when `live` lacks or differs from something in `wanted` (the API server may add fields)."""
    if isinstance(wanted, dict):
        return not isinstance(live, dict) or any(k not in live or drift(v, live[k]) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (not isinstance(live, list) or len(live) != len(wanted)
                or any(drift(w, v) for w, v in zip(wanted, live, strict=True)))
    return bool(wanted != live)


def _repair_drift(client: KubeClient, desired: list[dict[str, Any]],
                  owned: dict[tuple[str, str, str], dict[str, Any]], outcome: Outcome) -> None:
    for child in desired:
        key = _key(child)
        live = owned.get(key)
        if live is None:
            continue
        wanted = owned_fields(child)
        changed = drift(wanted, live)
        if not (_removals(child, live, wanted) or changed):
            continue
        meta = child["metadata"]
        wanted["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        try:
            owned[key] = client.patch(key[0], key[1], meta["namespace"], meta["name"], wanted)
            outcome.repaired.append(f"{key[1]}/{key[2]}")
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
            outcome.requeue = True


def restarts(job: dict[str, Any]) -> int:
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if str(value).isdigit() else 0


def _restart_failed(client: KubeClient, job: dict[str, Any], owned: dict[tuple[str, str, str], dict[str, Any]],
                    outcome: Outcome) -> dict[str, Any]:
    """Delete failed pods (to be recreated) while runPolicy.backoffLimit allows; the count is written first."""
    limit = ((job.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    failed = [key for key, child in owned.items() if key[1] == "Pod" and not child["metadata"].get(
        "deletionTimestamp") and (child.get("status") or {}).get("phase") == "Failed"]
    used = restarts(job)
    if not isinstance(limit, int) or not failed or used + len(failed) > limit:
        return job  # nothing failed, or the status will say BackoffLimitExceeded / PodFailed
    meta = job["metadata"]
    patch = {"metadata": {"annotations": {RESTARTS_ANNOTATION: str(used + len(failed))},
                          "resourceVersion": meta["resourceVersion"]}}
    job = client.patch(JOB_API, JOB_KIND, meta["namespace"], meta["name"], patch)
    for key in sorted(failed):
        client.delete("v1", "Pod", meta["namespace"], key[2])
        owned.pop(key)
        outcome.restarted.append(f"Pod/{key[2]}")
    return job


# --- status ------------------------------------------------------------------------------------------


def _write_status(client: KubeClient, job: dict[str, Any], violation: str | None, *, policies: PolicySet,
                  facts: ClusterFacts, now: Callable[[], str], outcome: Outcome) -> tuple[dict[str, Any], list[Any]]:
    """(the status now stored, the job's pods); retried on 409 with the job read again."""
    spec = job.get("spec") or {}
    expected = dict(render.training_roles(spec))
    meta = job["metadata"]
    deadline = (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
    for _ in range(STATUS_RETRIES):
        owned = _owned_children(client, job)
        pods = [c for (_, kind, _), c in owned.items() if kind == "Pod"]
        desired_keys = set() if violation else {_key(c) for c in desired_children(job)}
        limit = (spec.get("runPolicy") or {}).get("backoffLimit")
        seen = Observation(pods=pods, expected=expected, created=bool(desired_keys) and desired_keys <= set(owned),
                           violation=violation, deadline_seconds=deadline if isinstance(deadline, int) else None,
                           backoff_limit=limit if isinstance(limit, int) else None, restarts=restarts(job),
                           restarted=bool(outcome.restarted))
        old = job.get("status") or {}
        stamp = now()
        new = compute_status(old, meta.get("generation"), seen, stamp)
        if new == old:
            return new, pods
        try:
            client.replace_status({**job, "status": new})
            outcome.status_written = True
            if new.get("phase") != old.get("phase"):
                _event(client, job, new, stamp)
            return new, pods
        except ApiError as exc:
            if exc.status != 409:
                raise
        fresh = client.get(JOB_API, JOB_KIND, meta["namespace"], meta["name"])
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return old, pods
        job, meta = fresh, fresh["metadata"]
        violation = _gate(job, policies, facts)
    outcome.requeue = True
    return job.get("status") or {}, []


def _event(client: KubeClient, job: dict[str, Any], status: dict[str, Any], stamp: str) -> None:
    """A Kubernetes Event for a phase transition, with the reason and message of the phase's condition."""
    meta, phase = job["metadata"], str(status.get("phase"))
    condition: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == phase), {})
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": JOB_API, "kind": JOB_KIND, "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid", "")},
        "reason": str(condition.get("reason") or phase), "message": str(condition.get("message") or phase)[:1024],
        "type": "Warning" if phase == "Failed" else "Normal",
        "source": {"component": EVENT_SOURCE}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        client.create(event)
    except ApiError as exc:  # an event is best effort: never fail a pass for it
        log.warning("event for %s/%s not recorded: %s", meta["namespace"], meta["name"], exc)


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


# --- finalizer ---------------------------------------------------------------------------------------


def _set_finalizers(client: KubeClient, job: dict[str, Any], finalizers: list[str]) -> dict[str, Any]:
    meta = job["metadata"]
    patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    return client.patch(JOB_API, JOB_KIND, meta["namespace"], meta["name"], patch)


def _finalize(client: KubeClient, job: dict[str, Any], outcome: Outcome) -> None:
    meta = job["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        return
    owned = _owned_children(client, job)
    for api_version, kind in CHILD_KINDS:  # pods first, so nothing runs without its service
        for key, child in owned.items():
            if key[:2] != (api_version, kind) or child["metadata"].get("deletionTimestamp"):
                continue
            if client.delete(api_version, kind, meta["namespace"], key[2]):
                outcome.deleted.append(f"{kind}/{key[2]}")
    if _owned_children(client, job):  # still terminating: keep the finalizer, look again later
        outcome.requeue = True
        return
    try:
        _set_finalizers(client, job, [f for f in finalizers if f != FINALIZER])
        outcome.finalized = True
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise
        outcome.requeue = True
