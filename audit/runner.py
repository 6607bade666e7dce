"""The audit process: watches feed `AuditState`, one loop judges and, while leading, writes reports.

Reused, not rewritten: the webhook's policy store (files plus MLPolicy/ClusterMLPolicy/ClusterWorkloadKind objects,
hot reloaded) and facts cache, the shared LIST+WATCH loop (mlgate/kube/watch.py), the stored-object rules of
`validate --cluster` (mlgate/kube/stored.py), the reconciler's Lease election and rate-limited client, and the
report builder (mlgate/reports). Reports are written by server-side apply, one request per changed report.

An API server that does not answer (not there yet, restarting, a network partition) ends no loop: the watches, the
Lease, the reading of the stored reports and the rounds each wait by a capped exponential backoff and try again
(mlgate/kube/reach.py), and `not_ready()` names the server that cannot be reached until it answers again.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mlgate.engine import PolicySet, evaluate
from mlgate.kube.facts import FACT_PATHS
from mlgate.kube.listing import Served, list_items, served
from mlgate.kube.reach import Backoff, Reachability, describe, unreachable
from mlgate.kube.stored import wanted_kinds
from mlgate.kube.watch import ApiError, Reflector, api_client, api_get, server_of
from mlgate.loading.policies import default_policy_dir
from mlgate.reports import WGPOLICY, ReportApi
from mlgate.reports.policyreport import KINDS as KINDS_BY_API
from mlgate.reports.policyreport import MANAGED_BY
from mlgate_reconciler.client import Transport, kube_transport, rate_limited  # type: ignore[import-not-found,unused-ignore]
from mlgate_reconciler.leader import LeaderElector  # type: ignore[import-not-found,unused-ignore]
from mlgate_webhook.exception_store import ClusterExceptionSource, ExceptionStore  # type: ignore[import-not-found,unused-ignore]
from mlgate_webhook.facts_cache import WatchedFacts  # type: ignore[import-not-found,unused-ignore]
from mlgate_webhook.kube import EXCEPTIONS, POLICIES  # type: ignore[import-not-found,unused-ignore]
from mlgate_webhook.policy_store import ClusterPolicySource, DirectorySource, PolicyStore  # type: ignore[import-not-found,unused-ignore]

from .events import Bucket, event_path, warning_event
from .metrics import Metrics
from .state import AuditState, Key

log = logging.getLogger("mlgate.audit")
FIELD_MANAGER = "mlgate-audit"
JUDGE_BATCH = 500  # objects per round: watch events and the lease are served between batches


@dataclass
class Options:
    kubeconfig: str | None = None
    in_cluster: bool = False
    policy_paths: Sequence[str] = ()
    resync: float = 600.0
    write_qps: float = 5.0
    write_burst: int = 10
    interval: float = 1.0
    report_api: ReportApi = WGPOLICY
    leader_elect: bool = False
    lease_namespace: str = "mlgate-system"
    lease_name: str = "mlgate-audit"
    identity: str = "mlgate-audit"
    event_qps: float = 1.0
    event_burst: int = 20


@dataclass
class Audit:
    options: Options
    metrics: Metrics = field(default_factory=Metrics)
    stop: threading.Event = field(default_factory=threading.Event)
    leading: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.facts = WatchedFacts()
        self.cluster_policies = ClusterPolicySource()
        self.store = PolicyStore([DirectorySource(list(self.options.policy_paths) or [str(default_policy_dir())]),
                                  self.cluster_policies])
        self.cluster_exceptions = ClusterExceptionSource()
        self.exceptions = ExceptionStore(self.cluster_exceptions)
        self.state: AuditState | None = None
        api = api_client(self.options.kubeconfig, self.options.in_cluster)
        self.reach = Reachability(server_of(api))
        self.get = api_get(self.options.kubeconfig, self.options.in_cluster, api=api, reach=self.reach)
        transport = kube_transport(api=api, reach=self.reach)
        self.write: Transport = rate_limited(transport, self.options.write_qps, self.options.write_burst)
        self.transport = transport
        self.events = Bucket(self.options.event_qps, self.options.event_burst)
        self.watched: dict[str, Reflector] = {}
        self.policy_watches: list[Reflector] = []
        self.facts_changed: set[str] = set()  # namespaces whose labels changed; "*": any other fact
        self.started = time.monotonic()
        self._last_judged: datetime | None = None  # the clock of the last round's exceptions
        self.full_pass_from: float | None = self.started
        self.kinds_due = False  # the policy set changed and its kinds are not all watched yet

    def not_ready(self) -> str | None:
        """None when ready (the API server answers and the cluster's policies are listed), else why not."""
        problem = self.reach.problem
        if problem is not None:
            return problem
        if not all(w.synced.is_set() for w in self.policy_watches):
            return "cluster policies not listed yet"
        return None

    # --- watches -----------------------------------------------------------------------------------

    def start_watches(self) -> None:
        for kind, path in FACT_PATHS.items():
            Reflector(kind, path, self.get, self._facts_replace, self._facts_event, self.stop,
                      on_unserved=self.facts.unserved).start()
        for kind, path in POLICIES.items():
            watch = Reflector(kind, path, self.get, self.cluster_policies.replace, self.cluster_policies.apply,
                              self.stop)
            self.policy_watches.append(watch)
            watch.start()
        for kind, path in EXCEPTIONS.items():  # an exception in force, or one that expired, changes verdicts
            watch = Reflector(kind, path, self.get, self.cluster_exceptions.replace, self.cluster_exceptions.apply,
                              self.stop)
            self.policy_watches.append(watch)
            watch.start()

    def _excepting(self, now: datetime) -> bool:
        """True when the exceptions in force changed since the last round: one was added, edited or deleted,
        or the instant one of them expires has passed."""
        changed = self.exceptions.refresh()
        expiries = [e.expires_at for e in self.exceptions.current]
        passed = any(self._last_judged <= at <= now for at in expiries) if self._last_judged else False
        self._last_judged = now
        return changed or passed

    def _facts_replace(self, kind: str, items: Sequence[Mapping[str, Any]]) -> None:
        self.facts.replace(kind, items)
        with self.lock:
            self.facts_changed.add("*")

    def _facts_event(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        self.facts.apply(kind, event_type, obj)
        with self.lock:
            self.facts_changed.add(str((obj.get("metadata") or {}).get("name")) if kind == "Namespace" else "*")

    def watch_kinds(self, policies: PolicySet) -> None:
        """Start a watch for every kind of the policy set's catalog the API server serves and none watches yet."""
        found, _ = served(self.get, wanted_kinds(policies.kinds))
        for kind in found:
            name = f"{kind.api_version}/{kind.kind}"
            if name not in self.watched:
                self.watched[name] = self._reflector(name, kind)
                self.watched[name].start()

    def _reflector(self, name: str, kind: Served) -> Reflector:
        def replace(_: str, items: Sequence[Mapping[str, Any]]) -> None:
            with self.lock:
                if self.state is not None:
                    self.state.replace(name, [_typed(i, kind) for i in items])

        def event(_: str, event_type: str, obj: Mapping[str, Any]) -> None:
            with self.lock:
                if self.state is not None:
                    self.state.apply(name, event_type, _typed(obj, kind))

        return Reflector(name, kind.path(), self.get, replace, event, self.stop)

    # --- the loop ----------------------------------------------------------------------------------

    def round(self) -> None:
        """Reload policies, judge a batch, and while leading write what changed."""
        started = time.monotonic()
        if not all(w.synced.is_set() for w in self.policy_watches):
            return  # the files alone are not the policies in force: judging now would be judging twice
        if self.store.refresh() and self.store.current is not None:
            policies = self.store.current
            with self.lock:
                if self.state is None:
                    self.state = AuditState(policies.kinds, self.options.report_api)
                self.state.catalog = policies.kinds
                self.state.everything_changed()
                self.full_pass_from = self.full_pass_from or started
            self.kinds_due = True
        if self.kinds_due and self.store.current is not None:
            self.watch_kinds(self.store.current)  # raises while the API server does not answer: due next round
            self.kinds_due = False
        policies = self.store.current
        if policies is None or self.state is None or not self.facts.known:
            return
        now = datetime.now(UTC)
        excepting = self._excepting(now)
        exceptions = self.exceptions.at(now)
        with self.lock:
            state = self.state
            changed, self.facts_changed = self.facts_changed, set()
            if "*" in changed or excepting:
                state.everything_changed()
            for namespace in changed - {"*"}:
                state.namespace_changed(namespace)
            judged = state.judge(lambda obj: evaluate(obj, policies, facts=self.facts, exceptions=exceptions),
                                 self.facts, limit=JUDGE_BATCH)
            self.metrics.judged.inc(judged)
            self.metrics.objects.set(len(state.objects))
            self.metrics.source = list(state.results.values())
            # reports wait for the backlog: 5,000 objects judged in 10 batches must not write each report 10 times
            drained = not state.dirty
            writes, deletes = state.reports(datetime.now(UTC)) if self.leading.is_set() and drained else ([], [])
        self._write_reports(writes, deletes)
        if self.leading.is_set():
            self._tell(state)
        synced = len(state.synced) >= len(self.watched)
        if synced and not state.dirty and not state.dirty_namespaces and self.leading.is_set():
            self.metrics.last_sync.set(time.time())  # a failed write left its namespace dirty: no sync
        if synced and not state.dirty and not state.dirty_namespaces and self.leading.is_set() \
                and self.full_pass_from is not None:
            self.metrics.full_pass_seconds.set(time.monotonic() - self.full_pass_from)
            log.info("audit: every object judged and reported in %.1fs", time.monotonic() - self.full_pass_from)
            self.full_pass_from = None
        self.metrics.pass_seconds.observe(time.monotonic() - started)

    def _write_reports(self, writes: Sequence[dict[str, Any]], deletes: Sequence[tuple[str, str]]) -> None:
        """Apply and delete in turn; when a request gets no answer, its namespace and those not yet written are
        built again next round (they left `dirty_namespaces` when the reports were built)."""
        todo: list[tuple[str, Callable[[], None]]] = [
            (str(r["metadata"].get("namespace") or ""), functools.partial(self._apply, r)) for r in writes]
        todo += [(namespace, functools.partial(self._delete, namespace, name)) for namespace, name in deletes]
        for index, (_, write) in enumerate(todo):
            try:
                write()
            except Exception:
                with self.lock:
                    assert self.state is not None
                    self.metrics.write_errors.inc()
                    for namespace, _ in todo[index:]:
                        self.state.failed(namespace)
                raise

    def _apply(self, report: dict[str, Any]) -> None:
        meta = report["metadata"]
        namespace = str(meta.get("namespace") or "")
        status, data = self.write("PATCH", _report_path(report["apiVersion"], report["kind"], namespace, meta["name"]),
                                  {"fieldManager": FIELD_MANAGER, "force": "true"}, report,
                                  "application/apply-patch+yaml")
        assert self.state is not None
        with self.lock:
            if 200 <= status < 300:
                self.metrics.writes.labels("apply").inc()
                self.state.wrote(report)
                log.info("report %s/%s written", namespace, meta["name"])  # only on a change: one line per write
            else:
                self.metrics.write_errors.inc()
                self.state.failed(namespace)
                log.warning("report %s/%s: %s %s", namespace, meta["name"], status, data[:200].decode(errors="replace"))

    def _delete(self, namespace: str, name: str) -> None:
        namespaced, cluster = KINDS_BY_API[self.options.report_api]
        kind = namespaced if namespace else cluster
        status, _ = self.write("DELETE", _report_path(self.options.report_api, kind, namespace, name), {}, None,
                               "application/json")
        assert self.state is not None
        with self.lock:
            if 200 <= status < 300 or status == 404:
                self.metrics.writes.labels("delete").inc()
                self.state.deleted(namespace, name)
                log.info("report %s/%s deleted", namespace, name)
            else:
                self.metrics.write_errors.inc()
                self.state.failed(namespace)

    def _tell(self, state: AuditState) -> None:
        """Warning Events for the objects whose results turned to fail, as many as the bucket allows now; the
        rest stay due for the next rounds."""
        with self.lock:
            granted = self.events.take(len(state.events_due), time.monotonic()) if state.events_due else 0
            due = state.take_events(granted)
        now = datetime.now(UTC)
        for _, judged in due:
            event = warning_event(judged, now, self.options.identity)
            status, data = self.transport("POST", event_path(event), {}, event, "application/json")
            if 200 <= status < 300:
                self.metrics.events.inc()
            else:  # best effort, as client-go's recorder: an event is not worth a retry loop
                self.metrics.event_errors.inc()
                log.warning("event on %s %s/%s: %s %s", judged.ref.kind, judged.ref.namespace, judged.ref.name,
                            status, data[:200].decode(errors="replace"))

    def seed_written(self) -> bool:
        """On becoming leader: the stored reports' digests, so an unchanged report is not written again. False when
        the API server did not answer: nothing is known of what is stored yet, so this replica may not lead."""
        from mlgate.reports import digest

        namespaced, cluster = KINDS_BY_API[self.options.report_api]
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        stored: list[dict[str, Any]] = []
        for kind in (namespaced, cluster):
            path = _report_path(self.options.report_api, kind, "", "").rstrip("/")
            try:
                stored += list(list_items(self.get, path, {"labelSelector": selector}))
            except ApiError as exc:  # an answer (e.g. 404: the report CRDs are not installed): nothing stored
                log.warning("listing %s: %s", kind, exc)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                log.warning("listing %s: cannot reach the API server: %s", kind, describe(exc))
                return False
        with self.lock:
            if self.state is None:
                return True
            self.state.forget_written()
            for report in stored:
                meta = report.get("metadata") or {}
                self.state.written[(str(meta.get("namespace") or ""), str(meta.get("name")))] = digest(report)
            self.state.seed_failing(_failing_in(stored))
        return True

    def _seeded(self, backoff: Backoff) -> bool:
        """`seed_written()`, tried again after a backoff while the API server does not answer; False once stopped."""
        while not self.stop.is_set():
            if self.seed_written():
                backoff.reset()
                return True
            self.stop.wait(backoff.next())
        return False

    def lead(self) -> None:
        """The Lease loop (or, without --leader-elect, leading from the start once the stored reports are read)."""
        backoff = Backoff()
        if not self.options.leader_elect:
            if self._seeded(backoff):
                self.leading.set()
                self.metrics.leader.set(1)
            return
        from mlgate_reconciler.client import KubeClient  # type: ignore[import-not-found,unused-ignore]

        elector = LeaderElector(KubeClient(self.transport), self.options.lease_namespace, self.options.lease_name,
                                self.options.identity)
        while not self.stop.is_set():
            if not elector.acquire(self.stop):
                break
            if not self.seed_written():  # still holding the Lease: acquire() renews it after the wait
                self.stop.wait(backoff.next())
                continue
            backoff.reset()
            self.leading.set()
            self.metrics.leader.set(1)
            held = elector.hold(self.stop)
            self.leading.clear()
            self.metrics.leader.set(0)
            if held:
                elector.release()

    def _lead_always(self) -> None:
        """`lead()`, started again after a backoff if it fails: a replica whose lease loop died would never lead."""
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                return self.lead()
            except Exception:
                self.leading.clear()
                self.metrics.leader.set(0)
                log.exception("audit lease loop failed; starting it again")
                self.stop.wait(backoff.next())

    def run(self) -> None:
        self.start_watches()
        threading.Thread(target=self._lead_always, name="audit-lease", daemon=True).start()
        next_resync = time.monotonic() + self.options.resync
        backoff = Backoff()
        while not self.stop.is_set():
            if time.monotonic() >= next_resync and self.state is not None:
                with self.lock:
                    self.state.everything_changed()
                next_resync = time.monotonic() + self.options.resync
            try:
                self.round()
                backoff.reset()
            except Exception as exc:  # one bad round must not end the audit; the next one retries
                if not unreachable(exc):
                    log.exception("audit round failed")
                    backoff.reset()
                else:
                    delay = backoff.next()
                    log.warning("audit round: cannot reach the API server: %s; next round in %.1fs", describe(exc),
                                delay)
                    self.stop.wait(delay)
                    continue
            if self.state is None or not self.state.dirty:
                self.stop.wait(self.options.interval)


def _typed(obj: Mapping[str, Any], kind: Served) -> dict[str, Any]:
    """A listed or watched item with its apiVersion and kind (a LIST of built-in kinds leaves them out)."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, **{k: v for k, v in obj.items()
                                                                   if k not in ("apiVersion", "kind")}}


def _failing_in(reports: Sequence[Mapping[str, Any]]) -> set[Key]:
    """The objects stored reports list with a fail: already told, by this replica or the one before."""
    keys: set[Key] = set()
    for report in reports:
        for result in report.get("results") or []:
            if result.get("result") != "fail":
                continue
            for ref in result.get("resources") or []:
                keys.add((str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                          str(ref.get("namespace") or ""), str(ref.get("name") or "")))
    return keys


def _report_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    plural = kind.lower() + "s"  # policyreports, clusterpolicyreports, reports, clusterreports
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{api_version}{where}/{plural}/{name}"
