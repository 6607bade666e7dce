"""`python -m mlgate_reconciler --kubeconfig K --policies DIR [--once]`: reconcile every TrainingJob.

This is the simple runner: a POLLING loop. Each round lists the TrainingJobs (all namespaces, or one with
--namespace) and runs one reconcile pass per job, one after another; then it sleeps --interval seconds.
Because each pass is level-triggered, a missed change is picked up by the next round. Watches with a resync,
a deduplicating work queue, leader election and metrics are not implemented yet (issue 5).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Sequence

from mlgate.engine import PolicySet
from mlgate.loading.policies import load_policy_paths

from .client import KubeClient, kube_transport
from .reconcile import JOB_API, JOB_KIND, reconcile_training_job

log = logging.getLogger("mlgate.reconciler")


def reconcile_all(client: KubeClient, policies: PolicySet, namespace: str = "") -> int:
    """One round over every TrainingJob; returns how many passes failed."""
    errors = 0
    for job in client.list(JOB_API, JOB_KIND, namespace):
        meta = job.get("metadata") or {}
        try:
            outcome = reconcile_training_job(client, str(meta["namespace"]), str(meta["name"]), policies)
        except Exception as exc:  # one broken job or a dropped connection never stops the loop
            errors += 1
            log.error("reconcile %s/%s failed: %s", meta.get("namespace"), meta.get("name"), exc)
            continue
        if outcome.created or outcome.deleted or outcome.status_written or outcome.finalized:
            log.info("%s/%s: created %s, deleted %s, status written %s, finalized %s", meta["namespace"],
                     meta["name"], outcome.created, outcome.deleted, outcome.status_written, outcome.finalized)
    return errors


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlgate_reconciler", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--in-cluster", action="store_true", help="use the pod's ServiceAccount")
    parser.add_argument("--policies", action="append", required=True, help="policy file or directory (repeatable)")
    parser.add_argument("--namespace", default="", help="only this namespace (default: all)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between polling rounds")
    parser.add_argument("--once", action="store_true", help="run one round and exit (1 if a pass failed)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    policies = load_policy_paths(args.policies)
    client = KubeClient(kube_transport(args.kubeconfig, args.in_cluster))
    if args.once:
        return 1 if reconcile_all(client, policies, args.namespace) else 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        try:
            reconcile_all(client, policies, args.namespace)
        except Exception as exc:  # e.g. the API server is unreachable: try again next round
            log.error("listing TrainingJobs failed: %s", exc)
        stop.wait(args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
