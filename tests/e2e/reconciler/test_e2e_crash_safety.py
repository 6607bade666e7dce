"""Crash safety of the TrainingJob reconciler: SIGKILL the real process at random points, restart it, converge.

Each round runs in a fresh namespace against the real API server and the real process
(`python -m mlgate_reconciler ... --namespace NS --once`):
- creation rounds: create a 16-replica TrainingJob, start the reconciler and SIGKILL it after a random delay
  (sometimes twice: the first restart dies too); then restart it once without a kill, and run passes with a
  fresh `KubeClient` until one makes zero writes. Then: exactly the 16 pods `llm-<role>-<index>` and the
  headless Service `llm`, each with exactly one ownerReference, `controller: true`, to the job's current uid;
  no object carrying `mlgate.dev/job-name` that the job does not control (an orphan); status Created with
  16 active replicas.
- deletion rounds (every third): the job is materialized (or its creation is killed half-way), then deleted,
  and the finalizer pass is killed the same way. After the restart: the job is gone (its finalizer removed)
  and no child is left.

Kill delays: interpreter start-up (about 1 s, measured) writes nothing and varies by more than a whole pass
under load, so a delay counted from spawning would mostly kill the imports. The delay is counted from the
pass's first write instead (seen by polling the job and its pods and services) and drawn uniformly in
[0, the pass's length], where the length (first to last write) is measured once per run by `calibrate`.
What each kill interrupted is read back from the API (`stage`) and reported.

A pod DELETE cut short by a kill can leave an unscheduled pod Terminating with `deletionGracePeriodSeconds: 0`
(the API server deletes such a pod in two steps). No PodGC runs here, so the finalizer pass itself must send
the DELETE again; each round records the pods a kill left stranded, and the test at the end strands one on
purpose.

Seeds: round R draws from `random.Random(f"{seed}/{R}")`; the seed is random per run unless
`MLGATE_CRASH_SEED` is set, and every failure message names it. Replaying a seed repeats the draws; where a
kill lands still depends on timing. bench/crash_bench.py runs this harness for more rounds.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from control_plane import REPO, ControlPlane, HarnessError
from e2e_objects import OUT_OF_WEBHOOK, in_namespace, trainingjob

from mlgate.engine import PolicySet
from mlgate.loading.policies import load_policy_paths
from mlgate_reconciler.client import KubeClient, Transport, kube_transport
from mlgate_reconciler.desired import JOB_LABEL
from mlgate_reconciler.reconcile import FINALIZER, JOB_API, TRAINING, reconcile_training_job

pytestmark = pytest.mark.e2e

JOB, JOB_KIND, REPLICAS = "llm", "TrainingJob", 16
EXPECTED_PODS = sorted([f"{JOB}-master-0", *(f"{JOB}-worker-{i}" for i in range(REPLICAS - 1))])
EXPECTED_SERVICES = [JOB]
CHILDREN = len(EXPECTED_PODS) + len(EXPECTED_SERVICES)
EXPECTED_REPLICAS = {"Master": {"active": 1, "succeeded": 0, "failed": 0},
                     "Worker": {"active": REPLICAS - 1, "succeeded": 0, "failed": 0}}
ROUNDS = 20
DELETION_EVERY = 3  # round R is a deletion round when R % 3 == 2
MAX_PASSES = 5  # passes (the restart included) allowed before one must write nothing
POLL = 0.02  # seconds between looks for the pass's first write
PASS_TIMEOUT = 60.0
SEED_VARIABLE = "MLGATE_CRASH_SEED"
EXITED = "exited before the kill"
MID_PASS = frozenset({  # stages that leave a pass's writes half done
    "creating: finalizer on, no child", "creating: some children", "creating: all children, status not written",
    "deleting: some children deleted", "deleting: no child left, finalizer on"})


# --- the process -------------------------------------------------------------------------------------


def reconciler_command(cluster: ControlPlane, namespace: str) -> list[str]:
    return [sys.executable, "-m", "mlgate_reconciler", "--kubeconfig", str(cluster.kubeconfig),
            "--policies", str(REPO / "policies"), "--namespace", namespace, "--once"]


@dataclass(frozen=True)
class Run:
    """One reconciler process, in seconds after spawning: its first and last write seen (None: none), its end."""

    first_write: float | None
    last_write: float | None
    ended: float
    code: int
    killed: bool
    stderr: str


def children(client: KubeClient, namespace: str, kinds: Sequence[tuple[str, str]] = TRAINING.children,
             selector: str = JOB_LABEL) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) for every object of `kinds` matching `selector` (default: carrying the job-name label)."""
    return [(kind, item) for api_version, kind in kinds for item in client.list(api_version, kind, namespace, selector)]


def fingerprint(client: KubeClient, namespace: str) -> tuple[Any, ...]:
    """Changes with every write a pass makes to the job, its pods or its services (the events aside)."""
    job = client.get(JOB_API, JOB_KIND, namespace, JOB)
    kids = children(client, namespace, (("v1", "Pod"), ("v1", "Service")), selector="")
    return (job and job["metadata"]["resourceVersion"],
            *sorted((kind, o["metadata"]["name"], o["metadata"]["resourceVersion"]) for kind, o in kids))


def run_reconciler(command: list[str], observer: KubeClient, namespace: str, kill_after: float | None) -> Run:
    """Start the reconciler; with `kill_after`, SIGKILL it that many seconds after its first write, else watch
    its writes until it exits (to time a pass)."""
    seen = fingerprint(observer, namespace)
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_write = last_write = None
    killed = False
    try:
        while process.poll() is None and (first_write is None or kill_after is None):
            now = fingerprint(observer, namespace)
            if now != seen:
                seen, last_write = now, time.monotonic() - start
                first_write = first_write or last_write
            time.sleep(POLL)
        if first_write is not None and kill_after is not None:
            time.sleep(max(0.0, start + first_write + kill_after - time.monotonic()))
            if process.poll() is None:
                process.kill()
                killed = True
        _, stderr = process.communicate(timeout=PASS_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    ended = time.monotonic() - start
    if fingerprint(observer, namespace) != seen:  # it wrote after the last look
        first_write, last_write = first_write or ended, ended
    return Run(first_write, last_write, ended, process.returncode, killed, stderr)


def stage(observer: KubeClient, namespace: str, run: Run, children_before: int) -> str:
    """What a kill interrupted, read back from the API."""
    if not run.killed:
        return EXITED
    job = observer.get(JOB_API, JOB_KIND, namespace, JOB)
    left = len(children(observer, namespace))
    if job is None:
        return "job gone"
    if job["metadata"].get("deletionTimestamp"):
        if left == 0:
            return "deleting: no child left, finalizer on"
        return "deleting: none deleted yet" if left >= children_before else "deleting: some children deleted"
    if FINALIZER not in (job["metadata"].get("finalizers") or []):
        return "creating: no finalizer yet"
    if left == 0:
        return "creating: finalizer on, no child"
    if left < CHILDREN:
        return "creating: some children"
    phase = (job.get("status") or {}).get("phase")
    return "creating: status written" if phase == "Created" else "creating: all children, status not written"


def stranded_pods(observer: KubeClient, namespace: str) -> list[str]:
    """Unscheduled pods left Terminating with grace period 0 and no finalizer: a DELETE whose second step (the
    removal from storage) never ran. Only PodGC or a repeated DELETE removes them."""
    return sorted(p["metadata"]["name"] for p in observer.list("v1", "Pod", namespace)
                  if p["metadata"].get("deletionTimestamp") and p["metadata"].get("deletionGracePeriodSeconds") == 0
                  and not p["metadata"].get("finalizers") and not (p.get("spec") or {}).get("nodeName"))


# --- convergence and checks --------------------------------------------------------------------------


def converge(command: list[str], transport: Transport, policies: PolicySet, namespace: str) -> tuple[int, list[str]]:
    """Restart the process once (no kill), then run passes with a fresh KubeClient until one writes nothing.
    Returns (passes that were needed, the restart included; problems)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=PASS_TIMEOUT, check=False)
    problems = [] if done.returncode == 0 else [f"the restarted reconciler exited {done.returncode}:\n"
                                                f"{done.stderr[-2000:]}"]
    passes = 1
    while True:
        client = KubeClient(transport)
        reconcile_training_job(client, namespace, JOB, policies)
        if not client.writes:
            return passes, problems
        if passes >= MAX_PASSES:
            return passes, [*problems, f"still writing after {passes} passes: {dict(client.writes)}"]
        passes += 1


def owner_problems(kind: str, obj: dict[str, Any], uid: str) -> list[str]:
    meta = obj["metadata"]
    refs = meta.get("ownerReferences") or []
    controllers = [r for r in refs if r.get("controller")]
    if len(refs) != 1 or len(controllers) != 1:
        return [f"{kind}/{meta['name']} has ownerReferences {refs}, expected exactly one controller"]
    ref = refs[0]
    if (ref.get("kind"), ref.get("name"), ref.get("uid")) != (JOB_KIND, JOB, uid):
        return [f"{kind}/{meta['name']} is controlled by {ref}, not the job's current uid {uid} (an orphan)"]
    return []


def created_problems(observer: KubeClient, namespace: str, uid: str) -> list[str]:
    """The 16 pods and the Service, each controlled by the job's current uid, no orphan, status Created."""
    job = observer.get(JOB_API, JOB_KIND, namespace, JOB)
    if job is None:
        return ["the job is gone"]
    meta, status = job["metadata"], job.get("status") or {}
    problems = [] if meta["uid"] == uid else [f"the job's uid changed from {uid} to {meta['uid']}"]
    uid = meta["uid"]
    pods = sorted(p["metadata"]["name"] for p in observer.list("v1", "Pod", namespace))
    services = sorted(s["metadata"]["name"] for s in observer.list("v1", "Service", namespace))
    if pods != EXPECTED_PODS:
        problems.append(f"pods {pods}, expected {EXPECTED_PODS}")
    if services != EXPECTED_SERVICES:
        problems.append(f"services {services}, expected {EXPECTED_SERVICES}")
    for kind, child in children(observer, namespace):
        problems += owner_problems(kind, child, uid)
    if (meta.get("finalizers") or []).count(FINALIZER) != 1:
        problems.append(f"finalizers {meta.get('finalizers')}, expected {FINALIZER} once")
    created = [c for c in status.get("conditions") or [] if c.get("type") == "Created"]
    if (status.get("phase"), [c.get("status") for c in created]) != ("Created", ["True"]):
        problems.append(f"status phase {status.get('phase')!r}, conditions {status.get('conditions')}")
    if status.get("replicaStatuses") != EXPECTED_REPLICAS:
        problems.append(f"replicaStatuses {status.get('replicaStatuses')}, expected {EXPECTED_REPLICAS}")
    if status.get("observedGeneration") != meta.get("generation"):
        problems.append(f"observedGeneration {status.get('observedGeneration')}, generation {meta.get('generation')}")
    return problems


def deleted_problems(observer: KubeClient, namespace: str) -> list[str]:
    """The job gone (so its finalizer came off) and no child left."""
    problems = []
    job = observer.get(JOB_API, JOB_KIND, namespace, JOB)
    if job is not None:
        problems.append(f"the job is still there: deletionTimestamp {job['metadata'].get('deletionTimestamp')}, "
                        f"finalizers {job['metadata'].get('finalizers')}")
    left = [f"{kind}/{o['metadata']['name']}" for kind, o in children(observer, namespace)]
    left += [f"Pod/{p['metadata']['name']}" for p in observer.list("v1", "Pod", namespace)]
    if left:
        problems.append(f"left behind: {sorted(set(left))}")
    return problems


# --- rounds ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """Seconds, measured on one uninterrupted run each: start-up to the first write, then first to last write."""

    startup: float
    create_pass: float
    delete_pass: float


@dataclass
class Round:
    seed: int
    index: int
    deletion: bool
    stages: list[str] = field(default_factory=list)  # what each kill interrupted
    delays: list[float] = field(default_factory=list)
    passes: int = 0
    stranded: list[str] = field(default_factory=list)  # pods a kill left Terminating, for the pass to finish
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        kind = "deletion" if self.deletion else "creation"
        kills = ", ".join(f"{d:.3f}s -> {s}" for d, s in zip(self.delays, self.stages, strict=True))
        return (f"{SEED_VARIABLE}={self.seed} round {self.index} ({kind}; kills after the first write: {kills}; "
                f"{self.passes} passes to converge; stranded {self.stranded}): " + "; ".join(self.problems))


def namespace_factory(transport: Transport, base: str) -> Callable[[], str]:
    """Fresh namespaces `<base>-<n>-<random>` out of the webhook's scope, created through the API (a kubectl
    process per round costs 0.2-0.6 s). Nothing deletes them: with no namespace controller they never go."""
    count = itertools.count()

    def make() -> str:
        name = f"{base}-{next(count)}-{uuid.uuid4().hex[:5]}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": OUT_OF_WEBHOOK}}
        status, data = transport("POST", "/api/v1/namespaces", {}, body, "application/json")
        if status != 201:
            raise HarnessError(f"creating namespace {name}: {status} {data[:300]!r}")
        return name

    return make


@dataclass
class Harness:
    """What a round needs: the cluster, a fresh namespace per call, policies, a transport, a read-only client."""

    cluster: ControlPlane
    new_namespace: Callable[[], str]
    policies: PolicySet
    transport: Transport
    observer: KubeClient = field(init=False)

    def __post_init__(self) -> None:
        self.observer = KubeClient(self.transport)

    def create_job(self, namespace: str) -> str:
        job = self.observer.create(in_namespace(trainingjob(JOB, replicas=REPLICAS), namespace))
        return str(job["metadata"]["uid"])

    def delete_job(self, namespace: str) -> None:
        self.observer.delete(JOB_API, JOB_KIND, namespace, JOB)


def calibrate(harness: Harness) -> Calibration:
    """One uninterrupted creation pass and one deletion pass of the real process, timed."""
    namespace = harness.new_namespace()
    command = reconciler_command(harness.cluster, namespace)
    uid = harness.create_job(namespace)
    create = run_reconciler(command, harness.observer, namespace, None)
    problems = created_problems(harness.observer, namespace, uid)
    harness.delete_job(namespace)
    delete = run_reconciler(command, harness.observer, namespace, None)
    problems += deleted_problems(harness.observer, namespace)
    if None in (create.first_write, create.last_write, delete.first_write, delete.last_write) or problems:
        raise AssertionError(f"an uninterrupted pass did not do its job (exit codes {create.code}, {delete.code}): "
                             f"{problems}\n{create.stderr[-1500:]}\n{delete.stderr[-1500:]}")
    return Calibration(startup=_seconds(create.first_write), create_pass=_window(create),
                       delete_pass=_window(delete))


def _seconds(value: float | None) -> float:
    return value or 0.0


def _window(run: Run) -> float:
    """First to last write, plus one look's worth (the last write was seen up to one look late)."""
    return max(0.05, _seconds(run.last_write) - _seconds(run.first_write) + POLL)


def kill_runs(harness: Harness, command: list[str], namespace: str, result: Round, kills: int,
              length: float, rng: random.Random) -> None:
    for _ in range(kills):
        delay = rng.uniform(0.0, length)
        before = len(children(harness.observer, namespace))
        run = run_reconciler(command, harness.observer, namespace, delay)
        result.delays.append(delay)
        result.stages.append(stage(harness.observer, namespace, run, before))
        result.stranded += stranded_pods(harness.observer, namespace)


def crash_round(harness: Harness, calibration: Calibration, seed: int, index: int) -> Round:
    """One round (see the module docstring); its problems are empty when the reconciler converged cleanly."""
    started = time.monotonic()
    rng = random.Random(f"{seed}/{index}")
    result = Round(seed, index, deletion=index % DELETION_EVERY == DELETION_EVERY - 1)
    kills = 2 if rng.random() < 0.3 else 1
    namespace = harness.new_namespace()
    command = reconciler_command(harness.cluster, namespace)
    uid = harness.create_job(namespace)
    if not result.deletion:
        kill_runs(harness, command, namespace, result, kills, calibration.create_pass, rng)
        result.passes, result.problems = converge(command, harness.transport, harness.policies, namespace)
        result.problems += created_problems(harness.observer, namespace, uid)
    else:
        if rng.random() < 0.5:  # the creation is cut short too: the finalizer pass finds a partial job
            kill_runs(harness, command, namespace, result, 1, calibration.create_pass, rng)
        else:
            reconcile_training_job(KubeClient(harness.transport), namespace, JOB, harness.policies)
        harness.delete_job(namespace)
        kill_runs(harness, command, namespace, result, kills, calibration.delete_pass, rng)
        result.passes, result.problems = converge(command, harness.transport, harness.policies, namespace)
        result.problems += deleted_problems(harness.observer, namespace)
    result.seconds = time.monotonic() - started
    return result


def crash_seed() -> int:
    return int(os.environ.get(SEED_VARIABLE) or random.SystemRandom().randrange(2**32))


def summary(rounds: Sequence[Round]) -> Counter[str]:
    return Counter(s for r in rounds for s in r.stages)


# --- the test ----------------------------------------------------------------------------------------


def make_harness(cluster: ControlPlane, base: str) -> Harness:
    transport = kube_transport(str(cluster.kubeconfig))
    return Harness(cluster, namespace_factory(transport, base), load_policy_paths([REPO / "policies"]), transport)


def test_a_reconciler_killed_at_random_points_of_creating_or_deleting_a_16_replica_job_converges_cleanly(
        cluster: ControlPlane):
    harness = make_harness(cluster, "crash-safety")
    seed = crash_seed()
    calibration = calibrate(harness)
    rounds: list[Round] = []
    for index in range(ROUNDS):
        rounds.append(crash_round(harness, calibration, seed, index))
        assert not rounds[-1].problems, rounds[-1].describe()
    stages = summary(rounds)
    print(f"\n{SEED_VARIABLE}={seed}: {calibration}, kills by stage {dict(stages)}, "
          f"max passes {max(r.passes for r in rounds)}, stranded {sum(len(r.stranded) for r in rounds)} pods, "
          f"{sum(r.seconds for r in rounds):.1f}s")
    mid_pass = sum(n for s, n in stages.items() if s in MID_PASS)
    assert mid_pass >= ROUNDS // 4, (f"{SEED_VARIABLE}={seed}: only {mid_pass} kills landed mid-pass, so the test "
                                     f"proved little: {dict(stages)} ({calibration})")


# --- a DELETE cut short -------------------------------------------------------------------------------
# The API server marks an unscheduled pod (deletionTimestamp, deletionGracePeriodSeconds 0) and then removes it;
# a client that dies in between leaves it marked. finalize() sends the DELETE again, which finishes it
# (k8s.io/apiserver registry/rest/delete.go, BeforeDelete); without that the finalizer would be held until
# kube-controller-manager's PodGC, which this control plane does not run.


def cut_short_delete(cluster: ControlPlane, namespace: str, pod: str, after: float) -> None:
    """Send a pod DELETE and reset the connection `after` seconds later, as a process killed mid-request does."""
    request = (f"DELETE /api/v1/namespaces/{namespace}/pods/{pod} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Length: 0\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", cluster.api_port), timeout=5) as raw, \
            cluster.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as connection:
        connection.sendall(request)
        time.sleep(after)
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST


def strand_pod(harness: Harness, namespace: str, pod: str, rng: random.Random, attempts: int = 200) -> int:
    """Cut DELETEs of the job's `pod` short (a pass recreates it when one went through) until it is stranded
    Terminating; returns the attempts it took (about one in three lands between the two steps)."""
    for attempt in range(1, attempts + 1):
        if harness.observer.get("v1", "Pod", namespace, pod) is None:
            reconcile_training_job(KubeClient(harness.transport), namespace, JOB, harness.policies)
        cut_short_delete(harness.cluster, namespace, pod, rng.uniform(0.0, 0.01))
        time.sleep(0.05)  # the API server finishes or abandons the request
        if pod in stranded_pods(harness.observer, namespace):
            return attempt
    raise HarnessError(f"no cut-short DELETE of {pod} stranded it in {attempts} attempts")


def test_a_pod_stranded_terminating_by_a_cut_short_delete_does_not_hold_the_job_finalizer(
        cluster: ControlPlane):
    harness = make_harness(cluster, "stranded-pod")
    namespace, seed = harness.new_namespace(), crash_seed()
    harness.create_job(namespace)
    reconcile_training_job(KubeClient(harness.transport), namespace, JOB, harness.policies)
    attempts = strand_pod(harness, namespace, f"{JOB}-worker-3", random.Random(seed))
    harness.delete_job(namespace)
    passes, problems = converge(reconciler_command(cluster, namespace), harness.transport, harness.policies, namespace)
    problems += deleted_problems(harness.observer, namespace)
    assert not problems, f"{SEED_VARIABLE}={seed}, stranded after {attempts} cut-short DELETEs, {passes} passes: " \
                         f"{problems}"
