"""The reconciler's runtime: informers feed a work queue, a few workers run one level-triggered pass per key.

- Informers (mlgate/kube/watch.py's Reflector: LIST then WATCH, relist on 410) watch the owners (TrainingJob,
  InferenceService) and their children, filtered by the label every child carries (`mlgate.dev/job-name`,
  `mlgate.dev/inference-service`). A child's event queues its controlling owner (from its ownerReference), so a
  deleted pod or a hand-edited Service is repaired within a pass. They fill the cache (cache.py) the passes read
  from, so a steady-state pass sends no request at all; it keeps objects shrunk (no managedFields, a pod without
  its spec), so memory stays flat with thousands of pods. The client writes through it.
- Every `resync` seconds every known owner is queued again: a level-triggered safety net for anything missed.
- The work queue (workqueue.py) deduplicates keys and never hands one key to two workers; `workers` threads run
  passes concurrently, and every API request goes through one token bucket (`qps`, `burst`).
- A pass that raises is retried with a per-key exponential backoff; a pass that lost a race (`requeue`) runs again
  after `REQUEUE_SECONDS`; a pass that knows when its owner next changes on its own (a deadline, a TTL) asks to
  run again then (`requeue_after`).
- `run()` returns when `stop` is set: it stops taking keys, lets running passes finish (bounded by
  `drain_seconds`) and returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlgate.engine import PolicySet
from mlgate.kube.reach import unreachable
from mlgate.kube.watch import Get, OnEvent, OnReplace, Reflector

from .cache import Cache, Collection, Reader, shrink
from .children import OwnerKind
from .client import KubeClient, collection_path
from .inference import INFERENCE, reconcile_inference_service
from .metrics import ReconcilerMetrics
from .reconcile import TRAINING, reconcile_training_job
from .results import PassResult
from .workqueue import WorkQueue

__all__ = ["OWNERS", "Controller", "Key", "reconcile_once"]

log = logging.getLogger("mlgate.reconciler")
Key = tuple[str, str, str]  # (owner kind, namespace, name)


class Pass(Protocol):
    def __call__(self, client: KubeClient, namespace: str, name: str, policies: PolicySet, *,
                 reader: Reader | None = None) -> PassResult: ...


OWNERS: dict[str, tuple[OwnerKind, Pass]] = {
    "TrainingJob": (TRAINING, reconcile_training_job),
    "InferenceService": (INFERENCE, reconcile_inference_service),
}
REQUEUE_SECONDS = 1.0


def reconcile_once(client: KubeClient, policies: PolicySet, namespace: str = "") -> int:
    """One pass over every owner, one after another (`--once`); returns how many passes failed."""
    errors = 0
    for kind, (owner, run_pass) in OWNERS.items():
        for obj in client.list(owner.api_version, kind, namespace):
            meta = obj.get("metadata") or {}
            try:
                result = run_pass(client, str(meta["namespace"]), str(meta["name"]), policies)
            except Exception as exc:  # one broken object never stops the round; an API server gone away does
                if unreachable(exc):
                    raise
                errors += 1
                log.error("reconcile %s %s/%s failed: %s", kind, meta.get("namespace"), meta.get("name"), exc)
                continue
            _log_result(kind, meta["namespace"], meta["name"], result)
    return errors


def _log_result(kind: str, namespace: str, name: str, result: PassResult) -> None:
    if result.wrote:
        log.info("%s %s/%s: created %s, deleted %s, repaired %s, restarted %s, status written %s, finalized %s",
                 kind, namespace, name, result.created, result.deleted, result.repaired, result.restarted,
                 result.status_written, result.finalized)


@dataclass
class Controller:
    client: KubeClient
    get: Get  # the informers' GET (watches are long requests: they bypass the token bucket)
    policies: PolicySet
    metrics: ReconcilerMetrics
    namespace: str = ""  # "" = every namespace
    workers: int = 2
    resync: float = 300.0
    drain_seconds: float = 30.0
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    _known: dict[str, set[Key]] = field(default_factory=dict)  # informer kind -> owner keys it listed
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reflectors: list[Reflector] = field(default_factory=list)
    cache: Cache = field(init=False)

    def __post_init__(self) -> None:
        self.metrics.depth.set_function(lambda: len(self.queue))
        self.cache = Cache(self.client)
        self.client.observer = self.cache  # the pass after a write reads it, before its watch event comes

    # --- informers ---------------------------------------------------------------------------------

    def start_informers(self, stop: threading.Event) -> None:
        for kind, (owner, _) in OWNERS.items():
            path = collection_path(owner.api_version, kind, self.namespace)
            self._start(Reflector(kind, path, self.get, *self._fill((owner.api_version, kind, ""),
                                  self._owners_listed, self._owner_event), stop, transform=shrink))
            for api_version, child_kind in owner.children:
                path = collection_path(api_version, child_kind, self.namespace)
                self._start(Reflector(f"{child_kind} of {kind}", path, self.get,
                                      *self._fill((api_version, child_kind, owner.label), self._children_listed,
                                                  self._child_event), stop, selector=owner.label, transform=shrink))

    def _fill(self, collection: Collection, on_replace: OnReplace, on_event: OnEvent) -> tuple[OnReplace, OnEvent]:
        """The informer's callbacks, with the cache filled first: the pass a change queues reads it."""

        def replaced(kind: str, items: Sequence[Mapping[str, Any]]) -> None:
            self.cache.replace(collection, items)
            on_replace(kind, items)

        def changed(kind: str, event: str, obj: Mapping[str, Any]) -> None:
            self.cache.event(collection, event, obj)
            on_event(kind, event, obj)

        return replaced, changed

    def _start(self, reflector: Reflector) -> None:
        self._reflectors.append(reflector)
        reflector.start()

    def synced(self) -> bool:
        """Every informer has listed once (the readiness probe)."""
        return all(r.synced.is_set() for r in self._reflectors)

    def _owners_listed(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        keys = {(kind, str(o["metadata"]["namespace"]), str(o["metadata"]["name"])) for o in items}
        with self._lock:
            self._known[kind] = keys
        for key in sorted(keys):
            self.queue.add(key)

    def _owner_event(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        key = (kind, str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
        with self._lock:
            known = self._known.setdefault(kind, set())
            if event == "DELETED":
                known.discard(key)
            else:
                known.add(key)
        self.queue.add(key)  # DELETED too: a pass on a gone owner does nothing, cheaply

    def _children_listed(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        for obj in items:  # after a relist, any child may have changed unseen
            self._child_event(kind, "SYNC", obj)

    def _child_event(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") in OWNERS and str(ref.get("apiVersion", "")).startswith("mlgate.dev/"):
                self.queue.add((str(ref["kind"]), str(meta.get("namespace")), str(ref.get("name"))))

    # --- workers -----------------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        """Start the informers, then `run` until `stop` is set."""
        self.start_informers(stop)
        self.run(stop)

    def run(self, stop: threading.Event) -> None:
        """Run the workers and the resync until `stop` is set, then drain."""
        threads = [threading.Thread(target=self._work, name=f"mlgate-worker-{i}", daemon=True)
                   for i in range(self.workers)]
        for thread in threads:
            thread.start()
        while not stop.wait(self.resync):
            with self._lock:
                keys = sorted(set().union(*self._known.values())) if self._known else []
            for key in keys:
                self.queue.add(key)
        self.queue.shut_down()
        deadline = time.monotonic() + self.drain_seconds
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.process(key)
            finally:
                self.queue.done(key)

    def process(self, key: Key) -> None:
        kind, namespace, name = key
        run_pass = OWNERS[kind][1]
        started = time.perf_counter()
        try:
            result = run_pass(self.client, namespace, name, self.policies, reader=self.cache)
        except Exception as exc:  # a bug or a dropped connection: retried with backoff, never fatal
            self.metrics.errors.labels(kind).inc()
            delay = self.queue.retry(key)
            log.error("reconcile %s %s/%s failed (retry in %.1fs): %s", kind, namespace, name, delay, exc)
            return
        finally:
            self.metrics.duration.labels(kind).observe(time.perf_counter() - started)
        self.queue.forget(key)
        _log_result(kind, namespace, name, result)
        if result.requeue:
            self.queue.add_after(key, REQUEUE_SECONDS)
        elif result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
