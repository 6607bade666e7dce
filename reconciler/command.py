"""`mlgate operator` (also `python -m mlgate_reconciler`): run the reconciler. Only click is imported here.

Without --once it runs the controller (controller.py): informers, the work queue, `--workers` passes at a time,
at most `--qps` API requests per second, metrics and probes on `--metrics-address`. With --leader-elect only the
holder of the Lease `--lease-namespace/--lease-name` reconciles; the others wait (safe with 2 replicas).
SIGTERM or SIGINT stops it gracefully: no new passes, running ones finish, the Lease is released, exit 0.
Leadership lost (a renewal missed its deadline) exits 1 at once, so a Deployment restarts it as a follower.
`--runtimes FILE` (or $MLGATE_RUNTIMES) adds or overrides model-server runtimes by name (runtimes.py); a file
that does not load exits 2 with its file, line and field.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _lease_namespace_default() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return "mlgate-system"


@click.command("operator")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
              help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--in-cluster", is_flag=True, help="Use the Pod's ServiceAccount.")
@click.option("-p", "--policies", "policy_paths", multiple=True, type=click.Path(exists=True),
              help="Policy file or directory for the pre-flight check (repeatable). Default: the shipped policies/.")
@click.option("--namespace", default="", help="Only this namespace (default: every namespace).")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), help="Passes run at once.")
@click.option("--qps", default=20.0, show_default=True, type=click.FloatRange(min=0.1),
              help="API requests per second (token bucket).")
@click.option("--burst", default=30, show_default=True, type=click.IntRange(1), help="API request burst.")
@click.option("--resync", default=300.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds between re-queuing every known object.")
@click.option("--leader-elect", is_flag=True, help="Reconcile only while holding the Lease.")
@click.option("--lease-namespace", default=_lease_namespace_default, show_default="the Pod's namespace")
@click.option("--lease-name", default="mlgate-reconciler", show_default=True)
@click.option("--identity", default=lambda: f"{socket.gethostname()}_{os.getpid()}",
              show_default="hostname_pid", help="This candidate's name in the Lease.")
@click.option("--lease-duration", default=15.0, show_default=True, type=click.FloatRange(min=1))
@click.option("--renew-deadline", default=10.0, show_default=True, type=click.FloatRange(min=0.5))
@click.option("--retry-period", default=2.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--metrics-address", default="127.0.0.1:8080", show_default=True,
              help="HOST:PORT of /metrics, /healthz and /readyz (port 0: any free port; empty: none).")
@click.option("--runtimes", "runtimes_file", type=click.Path(exists=True, dir_okay=False), envvar="MLGATE_RUNTIMES",
              help="YAML file of model-server runtimes that add to or override the shipped ones, by name.")
@click.option("--once", is_flag=True, help="One pass over every object, then exit (1 if a pass failed).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def operator(**options: object) -> None:
    """Run the reconciler: TrainingJobs and InferenceServices become pods, services and deployments."""
    from .runner import Options, run
    from .runtimes import RuntimesError, load_runtimes, use_runtimes

    runtimes_file = options.pop("runtimes_file", None)
    try:
        use_runtimes(load_runtimes(Path(str(runtimes_file)) if runtimes_file else None))
    except RuntimesError as exc:
        print(f"mlgate operator: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    opts = Options(**options)  # type: ignore[arg-type]
    if opts.kubeconfig and opts.in_cluster:
        raise click.UsageError("--kubeconfig and --in-cluster exclude each other")
    if opts.renew_deadline >= opts.lease_duration:
        raise click.UsageError("--renew-deadline must be shorter than --lease-duration")
    raise SystemExit(run(opts))
