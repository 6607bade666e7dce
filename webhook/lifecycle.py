"""`mlgate webhook uninstall` and `mlgate webhook rotate-ca`: the objects `mlgate serve --self-managed` creates.

Those objects are owned by the install's ClusterRole, so deleting the install (`kubectl delete -k`, `helm
uninstall`) lets the garbage collector delete them; `uninstall` deletes them by name, for clusters or moments
where that does not happen (run it after the webhook's Deployment is gone, or its leader writes them again).

An API server that does not answer is one line naming it, exit 2, as for `mlgate validate --cluster`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from mlgate.kube.rest import Rest

DEFAULT_NAMESPACE = "mlgate-system"
kubeconfig_option = click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
                                 help="Default: $KUBECONFIG, else ~/.kube/config.")
namespace_option = click.option("-n", "--namespace", default=DEFAULT_NAMESPACE, show_default=True,
                                help="Where the webhook runs.")


@click.group()
def webhook() -> None:
    """The webhook's self-managed registration and certificates."""


@webhook.command()
@kubeconfig_option
@namespace_option
def uninstall(*, kubeconfig: str | None, namespace: str) -> None:
    """Delete the webhook configurations, the certificate Secret and the Lease the webhook created."""
    from mlgate.kube.rest import ApiError

    from .registration import CONFIG_PATHS, shipped_configurations
    from .selfmanaged import SelfManagedOptions

    rest, server = _rest(kubeconfig)
    options = SelfManagedOptions(namespace=namespace)
    paths = [f"{CONFIG_PATHS[c['kind']]}/{c['metadata']['name']}" for c in shipped_configurations()]
    paths += [f"/api/v1/namespaces/{namespace}/secrets/{options.secret}",
              f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{options.lease}"]
    failed = False
    for path in paths:
        what = "/".join(path.rsplit("/", 2)[-2:])
        try:
            with _answering(server):
                gone = rest("DELETE", path) is None
        except ApiError as exc:
            click.echo(f"mlgate: {what}: {exc}", err=True)
            failed = True
            continue
        click.echo(f"{what}: {'not found' if gone else 'deleted'}")
    sys.exit(1 if failed else 0)


@webhook.command("rotate-ca")
@kubeconfig_option
@namespace_option
def rotate_ca(*, kubeconfig: str | None, namespace: str) -> None:
    """Roll the webhook's CA over now: the leader adds a new CA to the caBundle, then issues from it."""
    from mlgate.kube.rest import ApiError
    from mlgate_certs.rotation import ROTATE_CA  # type: ignore[import-not-found,unused-ignore]

    from .selfmanaged import SelfManagedOptions

    secret = SelfManagedOptions(namespace=namespace).secret
    stamp = dt.datetime.now(dt.UTC).isoformat()
    rest, server = _rest(kubeconfig)
    try:
        with _answering(server):
            done = rest("PATCH", f"/api/v1/namespaces/{namespace}/secrets/{secret}",
                        {"metadata": {"annotations": {ROTATE_CA: stamp}}}, content_type="application/merge-patch+json")
    except ApiError as exc:
        raise click.ClickException(f"secrets/{secret} in {namespace}: {exc}") from None
    if done is None:
        raise click.ClickException(f"no Secret {secret} in {namespace}: is the webhook running with --self-managed?")
    click.echo(f"secrets/{secret}: CA rollover requested ({ROTATE_CA}={stamp})")


def _rest(kubeconfig: str | None) -> tuple[Rest, str]:
    """Requests through the kubeconfig's credentials, and the API server's URL they go to."""
    from mlgate.kube.rest import kube_rest
    from mlgate.kube.watch import api_client, server_of

    api = api_client(kubeconfig, False)
    return kube_rest(kubeconfig, False, api=api), server_of(api)


@contextlib.contextmanager
def _answering(server: str) -> Iterator[None]:
    """An API server that gives no answer ends the command: one line naming it, exit 2, no traceback."""
    from mlgate.cli.common import fail
    from mlgate.kube.reach import cannot_reach, unreachable

    try:
        yield
    except Exception as exc:
        if not unreachable(exc):
            raise
        fail(cannot_reach(server, exc))
