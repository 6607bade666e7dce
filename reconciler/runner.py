"""Wires the reconciler process together: policies, API client, metrics endpoint, leader election, controller.

Exit codes: 0 after a graceful stop (or a clean --once), 1 when leadership was lost or a --once pass failed,
2 when the policies do not load or the API server cannot be configured.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from mlgate.kube.reach import Reachability, cannot_reach, quiet_retries, unreachable
from mlgate.kube.watch import api_client, api_get, server_of
from mlgate.loading.policies import PolicyLoadError, default_policy_dir, load_policy_paths

from .client import KubeClient, kube_transport, rate_limited
from .controller import Controller, reconcile_once
from .leader import LeaderElector
from .metrics import ReconcilerMetrics, serve_metrics

__all__ = ["Options", "run"]

log = logging.getLogger("mlgate.reconciler")


@dataclass(frozen=True)
class Options:
    kubeconfig: str | None
    in_cluster: bool
    policy_paths: tuple[str, ...]
    namespace: str
    workers: int
    qps: float
    burst: int
    resync: float
    leader_elect: bool
    lease_namespace: str
    lease_name: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    metrics_address: str
    once: bool
    log_level: str


def run(opts: Options) -> int:
    logging.basicConfig(level=opts.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_retries()
    try:
        policies = load_policy_paths(opts.policy_paths or [default_policy_dir()])
    except PolicyLoadError as exc:
        print(f"mlgate operator: {exc}", file=sys.stderr)
        return 2
    try:
        api = api_client(opts.kubeconfig, opts.in_cluster)
    except Exception as exc:  # no kubeconfig, no in-cluster environment: say so, no traceback
        print(f"mlgate operator: cannot configure the Kubernetes client: {exc}", file=sys.stderr)
        return 2
    reach = Reachability(server_of(api))
    transport = kube_transport(api=api, reach=reach)
    get = api_get(opts.kubeconfig, opts.in_cluster, api=api, reach=reach)
    metrics = ReconcilerMetrics()
    client = KubeClient(rate_limited(transport, opts.qps, opts.burst), on_write=metrics.write)
    if opts.once:
        try:
            return 1 if reconcile_once(client, policies, opts.namespace) else 0
        except Exception as exc:
            if not unreachable(exc):
                raise
            print(f"mlgate operator: {cannot_reach(reach.server, exc)}", file=sys.stderr)
            return 2

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    controller = Controller(client, get, policies, metrics, namespace=opts.namespace, workers=opts.workers,
                            resync=opts.resync)
    server = _serve(metrics, opts.metrics_address,
                    lambda: reach.problem or (None if controller.synced() else "informers have not listed yet"))
    try:
        return _lead_and_run(opts, client, controller, metrics, stop)
    finally:
        if server is not None:
            server.shutdown()


def _lead_and_run(opts: Options, client: KubeClient, controller: Controller, metrics: ReconcilerMetrics,
                  stop: threading.Event) -> int:
    if not opts.leader_elect:
        metrics.leader.set(1)
        controller.serve(stop)
        return 0
    elector = LeaderElector(client, opts.lease_namespace, opts.lease_name, opts.identity,
                            lease_duration=opts.lease_duration, renew_deadline=opts.renew_deadline,
                            retry_period=opts.retry_period, on_change=metrics.leader.set)
    if not elector.acquire(stop):
        return 0  # stopped while a follower
    working = threading.Event()  # set: the controller must stop (shutdown or leadership lost)
    worker = threading.Thread(target=controller.serve, args=(working,), name="mlgate-controller", daemon=True)
    worker.start()
    kept = elector.hold(stop)
    working.set()
    if not kept:
        return 1  # another replica may lead already: stop at once, without draining, and let the restart decide
    worker.join()
    elector.release()
    log.info("stopped")
    return 0


def _serve(metrics: ReconcilerMetrics, address: str,
           not_ready: Callable[[], str | None]) -> ThreadingHTTPServer | None:
    if not address:
        return None
    host, _, port = address.rpartition(":")
    server = serve_metrics(metrics.render, host or "0.0.0.0", int(port), not_ready)
    log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", server.server_port)
    return server
