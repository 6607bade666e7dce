"""`mlgate audit` (also `python -m mlgate_audit`): run the background audit. Only click is imported here.

It watches every kind the engine knows that the API server serves, judges the stored objects with the policies
in force (files plus MLPolicy objects, hot reloaded) and, while holding the Lease, writes one PolicyReport per
namespace. On `--metrics-port`: /metrics, /healthz, and /readyz (503 and why while the API server cannot be
reached or the cluster's policies are not listed yet). SIGTERM stops it; the Lease is released.
"""

from __future__ import annotations

import os
import socket

import click


@click.command("audit")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
              help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--in-cluster", is_flag=True, help="Use the Pod's ServiceAccount.")
@click.option("-p", "--policies", "policy_paths", multiple=True, type=click.Path(exists=True),
              help="Policy file or directory (repeatable), beside the cluster's MLPolicies. Default: the shipped "
                   "policies/.")
@click.option("--resync", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds between judging every object again.")
@click.option("--write-qps", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Report writes per second at most (token bucket).")
@click.option("--write-burst", default=10, show_default=True, type=click.IntRange(1))
@click.option("--event-qps", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Warning Events per second at most, on objects whose results turn to fail.")
@click.option("--event-burst", default=20, show_default=True, type=click.IntRange(1))
@click.option("--report-api", type=click.Choice(["wgpolicyk8s.io/v1alpha2", "openreports.io/v1alpha1"]),
              default="wgpolicyk8s.io/v1alpha2", show_default=True)
@click.option("--leader-elect", is_flag=True, help="Write reports only while holding the Lease.")
@click.option("--lease-namespace", default="mlgate-system", show_default=True)
@click.option("--lease-name", default="mlgate-audit", show_default=True)
@click.option("--identity", default=lambda: f"{socket.gethostname()}_{os.getpid()}", show_default="hostname_pid")
@click.option("--metrics-port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Serve /metrics, /healthz and /readyz on this port (0: none).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def audit(*, metrics_port: int, log_level: str, **options: object) -> None:
    """Judge the stored objects in the background and write PolicyReports."""
    import logging
    import signal

    from mlgate.kube.reach import quiet_retries

    from .runner import Audit, Options

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_retries()
    opts = Options(**options)  # type: ignore[arg-type]
    if opts.kubeconfig and opts.in_cluster:
        raise click.UsageError("--kubeconfig and --in-cluster exclude each other")
    runner = Audit(opts)
    if metrics_port:
        from prometheus_client import generate_latest

        from mlgate_reconciler.metrics import serve_metrics  # type: ignore[import-not-found,unused-ignore]

        serve_metrics(lambda: generate_latest(runner.metrics.registry), "0.0.0.0", metrics_port, runner.not_ready)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    try:
        runner.run()
    except KeyboardInterrupt:
        runner.stop.set()
