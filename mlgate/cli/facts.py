"""The command-line side of reading a cluster: `validate --cluster` options and `mlgate facts dump`.

Imported by main.py at start-up, so it imports click only; the Kubernetes client (mlgate[cluster]) is imported
when a command reads a cluster.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from mlgate.cli.cluster import Connection
    from mlgate.cli.review import Record, Render

F = TypeVar("F", bound=Callable[..., Any])

kubeconfig_option = click.option("--kubeconfig", type=click.Path(dir_okay=False),
                                 help="The kubeconfig to read the cluster with (default: $KUBECONFIG, ~/.kube/config).")
context_option = click.option("--context", help="The kubeconfig context (default: its current context).")


def cluster_options(command: F) -> F:
    """`--cluster` and what goes with it, for `mlgate validate`."""
    for option in reversed([
        click.option("--cluster", is_flag=True,
                     help="Judge the objects stored in a cluster instead of files: every kind mlgate knows that the "
                          "API server serves, with that cluster's facts. Only reads. Needs mlgate[cluster]."),
        kubeconfig_option,
        context_option,
        click.option("-A", "--all-namespaces", is_flag=True,
                     help="With --cluster: every namespace, and the cluster-scoped kinds (default: -n, else the "
                          "context's namespace)."),
        click.option("--kinds", "kind_names", help="With --cluster: only these kinds, comma-separated "
                                                   "(Job: every kind named Job; Job.batch: batch's only)."),
    ]):
        command = option(command)
    return command


def cluster_review(options: dict[str, Any], *, paths: Sequence[str], facts: str | None,
                   policy_paths: Sequence[str], crd_paths: Sequence[str], namespace: str,
                   render: Render | None, exception_paths: Sequence[str] = ()) -> Iterator[Record] | None:
    """`validate`'s records for the stored objects with --cluster; None without it (the files are judged).
    Exit 2 when --cluster meets what it excludes, or its options come without it."""
    from mlgate.cli.common import fail

    cluster = bool(options.get("cluster"))
    given = [f"--{name.replace('_', '-')}" for name in ("kubeconfig", "context", "all_namespaces")
             if options.get(name)] + (["--kinds"] if options.get("kind_names") else [])
    if cluster and paths:
        fail("--cluster reads the cluster: give no PATHS with it")
    if cluster and facts:
        fail("--cluster reads the facts from the cluster: --facts goes with files (`mlgate facts dump` writes one)")
    if not cluster and not paths:
        fail("no PATHS given: name files or directories, - for stdin, or --cluster")
    if not cluster:
        if given:
            fail(f"{given[0]} goes with --cluster")
        return None
    source = click.get_current_context().get_parameter_source("namespace")
    chosen: str | None = namespace if source is click.core.ParameterSource.COMMANDLINE else None
    if options.get("all_namespaces"):
        if chosen is not None:
            fail("-n and -A: choose one namespace or all of them")
        chosen = ""
    return _review_cluster(policy_paths=policy_paths, crd_paths=crd_paths, namespace=chosen,
                           kubeconfig=options.get("kubeconfig"), context=options.get("context"),
                           kind_names=options.get("kind_names"), render=render, exception_paths=exception_paths)


def _review_cluster(*, policy_paths: Sequence[str], crd_paths: Sequence[str], namespace: str | None,
                    kubeconfig: str | None, context: str | None, kind_names: str | None,
                    render: Render | None, exception_paths: Sequence[str] = ()) -> Iterator[Record]:
    """Records for the stored objects; `namespace` None: the context's; "": every namespace (-A)."""
    from mlgate.cli import cluster as live
    from mlgate.cli.common import fail, load_policies, load_schemas, one_line_logs
    from mlgate.cli.exceptions import load_exceptions
    from mlgate.cli.review import Settings
    from mlgate.workloads.catalog import SHIPPED

    one_line_logs()
    policies = load_policies(policy_paths)
    schemas = load_schemas(crd_paths)
    connection = _connect(kubeconfig, context)
    kinds = [k.strip() for k in (kind_names or "").split(",") if k.strip()]
    chosen = connection.namespace if namespace is None else namespace or None
    try:
        local = [k for k in policies.kinds.kinds if k not in SHIPPED.kinds]
        policies = live.cluster_policies(connection, policies, local)
        served = live.served_kinds(connection, policies, kinds)
        facts = live.cluster_facts(connection)
        excepted = load_exceptions(exception_paths, policies)  # judged at this instant, as for files
        settings = Settings(policies, facts, chosen or "default", schemas=schemas, exceptions=excepted)
        yield from live.review_cluster(connection, settings, served, chosen, render=render)
    except live.ClusterError as exc:
        _notes(connection)
        fail(str(exc))
    _notes(connection)


def _connect(kubeconfig: str | None, context: str | None) -> Connection:
    from mlgate.cli import cluster as live
    from mlgate.cli.common import fail

    missing = live.missing_client()
    if missing is not None:
        fail(f"reading a cluster needs {missing}, which comes with mlgate[{live.EXTRA}]: "
             f"pip install 'mlgate[{live.EXTRA}]'")
    try:
        return live.connect(kubeconfig, context)
    except live.ClusterError as exc:
        fail(str(exc))


def _notes(connection: Connection) -> None:
    for note in connection.notes:
        click.echo(f"mlgate: note: {note}", err=True)
    connection.notes.clear()


@click.group()
def facts() -> None:
    """Cluster facts for `validate --facts`."""


@facts.command()
@kubeconfig_option
@context_option
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              show_default=True, help="The file to write (- for stdout).")
def dump(kubeconfig: str | None, context: str | None, output: str) -> None:
    """Write the cluster's facts, exactly what `mlgate validate --facts` reads and nothing secret: namespaces and
    their labels, claims, volumes, storage classes, nodes, quotas, limit ranges, priority classes, Trainer
    runtimes. `validate --facts FILE` then judges as `validate --cluster` did. Only reads the cluster."""
    from mlgate.cli import cluster as live
    from mlgate.cli.common import fail

    connection = _connect(kubeconfig, context)
    try:
        if output == "-":
            count = live.dump_facts(connection, sys.stdout)
        else:
            with click.open_file(output, "w", encoding="utf-8", atomic=True) as out:
                count = live.dump_facts(connection, out)
    except live.ClusterError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{output}: {exc.strerror or exc}")
    _notes(connection)
    click.echo(f"mlgate: {count} fact object(s) from {connection.server}", err=True)
