"""`mlgate serve` and `mlgate certs`. Only click is imported here; the rest inside the commands.

Register them on the main group with `cli.add_command(...)` for `serve`, `certs` and `admission_review`.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import click

DEFAULT_STATE_DIR = os.environ.get("MLGATE_STATE_DIR", ".state")
LOG_LEVELS = ["debug", "info", "warning", "error"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 in a Pod).")
@click.option("--port", default=8443, show_default=True, type=click.IntRange(0, 65535))
@click.option("--metrics-port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Serve GET /metrics, /healthz and /readyz over plain HTTP on this port too, on threads of its "
                   "own: Prometheus needs no TLS settings, and probes never wait behind admission work (0: none; "
                   "the TLS port serves them either way).")
@click.option("--cert-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Serving certificate (PEM). Reloaded when it changes. Default: dev certificates in the state dir.")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Private key of the serving certificate (PEM).")
@click.option("-p", "--policies", "policy_paths", multiple=True, type=click.Path(),
              help="Policy file or directory (repeatable), reloaded on change. Default: the shipped policies/.")
@click.option("--allow-empty-policies", is_flag=True,
              help="Let the policy files hold no policy (every request allowed, e.g. when all policies are "
                   "MLPolicy objects). Without it an empty or unreadable set is an error and the last good set "
                   "stays in force; at start, the webhook stays unready.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
              help="Watch cluster facts and MLPolicy objects through this kubeconfig.")
@click.option("--in-cluster", is_flag=True, help="Watch cluster facts and MLPolicy objects as the Pod's account.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_STATE_DIR,
              show_default=True, help="Where dev certificates are kept ($MLGATE_STATE_DIR).")
@click.option("--self-managed", is_flag=True,
              help="Register the webhook configurations (failurePolicy Ignore until a replica is ready; one "
                   "writer through a Lease), and keep a CA and the serving certificate in the Secret "
                   "mlgate-webhook-certs, renewed at 2/3 of their lifetime. Needs --in-cluster or --kubeconfig.")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --self-managed, --cert-file and --key-file: certificates issued elsewhere (cert-manager); "
                   "this file's CAs become the caBundle.")
@click.option("--webhooks-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --self-managed: the configurations to register (re-read when it changes). "
                   "Default: the shipped manifests/webhooks.yaml.")
@click.option("--namespace", help="With --self-managed: the namespace of the Service, Secret and Lease. "
                                  "Default: $POD_NAMESPACE, else the Pod's own, else mlgate-system.")
@click.option("--webhook-url", help="With --self-managed: register this https URL instead of the Service "
                                    "(a webhook outside the cluster); its host goes into the certificate.")
def serve(*, host: str, port: int, metrics_port: int, cert_file: Path | None, key_file: Path | None,
          policy_paths: tuple[str, ...], allow_empty_policies: bool, log_level: str, kubeconfig: str | None,
          in_cluster: bool, state_dir: Path, self_managed: bool, ca_file: Path | None, webhooks_file: Path | None,
          namespace: str | None, webhook_url: str | None) -> None:
    """Run the admission webhook: POST /validate and /mutate, GET /healthz, /readyz, /metrics."""
    if (cert_file is None) != (key_file is None):
        raise click.UsageError("give both --cert-file and --key-file, or neither for dev certificates")
    if kubeconfig and in_cluster:
        raise click.UsageError("--kubeconfig and --in-cluster exclude each other")
    if self_managed and not (kubeconfig or in_cluster):
        raise click.UsageError("--self-managed needs --in-cluster or --kubeconfig")
    if self_managed and (cert_file is None) != (ca_file is None):
        raise click.UsageError("--self-managed with --cert-file needs --ca-file (the caBundle), and without, neither")
    if (namespace or webhook_url or ca_file or webhooks_file) and not self_managed:
        raise click.UsageError("--namespace, --webhook-url, --ca-file and --webhooks-file go with --self-managed")
    if webhook_url and not webhook_url.startswith("https://"):
        raise click.UsageError(f"--webhook-url {webhook_url}: the API server calls webhooks over https only")
    from . import jsonlog
    from .server import ServeOptions, Webhook
    from .service import Settings

    jsonlog.configure(log_level)
    managed = None
    if self_managed:
        from .selfmanaged import SelfManagedOptions, default_namespace

        managed = SelfManagedOptions(namespace=namespace or default_namespace(), url=webhook_url, ca_file=ca_file,
                                     webhooks_file=webhooks_file)
    options = ServeOptions(host=host, port=port, cert_file=cert_file, key_file=key_file, policy_paths=policy_paths,
                          log_level=log_level, kubeconfig=kubeconfig, in_cluster=in_cluster, state_dir=state_dir,
                          settings=Settings(allow_empty_policies=allow_empty_policies),
                          metrics_port=metrics_port or None, self_managed=managed)
    try:
        webhook = Webhook(options)
    except (OSError, ValueError, TimeoutError) as exc:
        click.echo(f"mlgate: cannot start: {exc}", err=True)
        sys.exit(2)
    for error in webhook.store.errors:
        click.echo(f"mlgate: policy error: {error}", err=True)
    if webhook.dev_ca is not None:
        click.echo(f"mlgate: serving {webhook.url} with a dev certificate; trust it with --cacert {webhook.dev_ca}",
                   err=True)
    webhook.run()


@click.command()
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=f"{DEFAULT_STATE_DIR}/certs",
              show_default=True, help="Where ca.crt, ca.key, tls.crt and tls.key are written.")
@click.option("--service", default="mlgate-webhook", show_default=True, help="The webhook's Service name.")
@click.option("--namespace", default="mlgate-system", show_default=True, help="The webhook's namespace.")
@click.option("--san", "sans", multiple=True, help="Extra subjectAltName, DNS name or IP (repeatable).")
@click.option("--key-type", type=click.Choice(["ecdsa", "rsa"]), default="ecdsa", show_default=True,
              help="ECDSA P-256 or RSA 2048.")
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 3650),
              help="Validity of the serving certificate.")
@click.option("--ca-days", default=3650, show_default=True, type=click.IntRange(1, 36500), help="Validity of a new CA.")
@click.option("--new-ca", is_flag=True, help="Make a new CA even if the out dir has a valid one.")
@click.option("--patch", "patch_files", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Webhook configuration YAML to copy into the out dir with the CA in its caBundle lines "
                   "(repeatable); the file itself is left as it is.")
def certs(*, out_dir: Path, service: str, namespace: str, sans: tuple[str, ...], key_type: str, days: int,
          ca_days: int, new_ca: bool, patch_files: tuple[Path, ...]) -> None:
    """Make a CA and a serving certificate for the webhook Service, and print the caBundle (or write patched
    copies of webhook configurations). Not needed with `mlgate serve --self-managed`, the shipped default."""
    from mlgate_certs.bundle import (  # type: ignore[import-not-found,unused-ignore]
        CertFiles,
        ca_bundle,
        issue_serving,
        patch_ca_bundle,
        write_atomic,
    )
    from mlgate_certs.pki import service_dns_names, split_sans  # type: ignore[import-not-found,unused-ignore]

    try:
        dns, ips = split_sans(sans)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--san") from None
    files = CertFiles(out_dir)
    ca, server = issue_serving(files, service_dns_names(service, namespace) + dns, ips, new_ca=new_ca, days=days,
                               ca_days=ca_days, key_type="rsa" if key_type == "rsa" else "ecdsa")
    bundle = ca_bundle(ca.cert_pem())
    if server.not_after.date() < (dt.datetime.now(dt.UTC) + dt.timedelta(days=days - 1)).date():
        click.echo(f"mlgate: the CA in {files.ca_cert} expires on {ca.not_after:%Y-%m-%d}, so the serving "
                   f"certificate does too; --new-ca makes a new CA (and a new caBundle)", err=True)
    click.echo(f"mlgate: wrote {files.ca_cert}, {files.cert}, {files.key} (valid until "
               f"{server.not_after:%Y-%m-%d}); put the pair in the Secret with\n"
               f"  kubectl create namespace {namespace} --dry-run=client -o yaml | kubectl apply -f -\n"
               f"  kubectl -n {namespace} create secret tls {service}-tls --cert={files.cert} --key={files.key}",
               err=True)
    for path in patch_files:
        text, count = patch_ca_bundle(path.read_text(encoding="utf-8"), bundle)
        if count == 0:
            click.echo(f"mlgate: {path}: no caBundle line to patch", err=True)
            sys.exit(2)
        copy = out_dir / path.name  # never the source: it may be a tracked file (manifests/webhooks.yaml)
        if copy.resolve() == path.resolve():
            raise click.UsageError(f"--patch {path}: that is in --out-dir; give a file from elsewhere")
        write_atomic(copy, text.encode("utf-8"))
        click.echo(f"mlgate: wrote {copy}: {path} with the caBundle in {count} place(s); apply it with\n"
                   f"  kubectl apply -f {copy}", err=True)
    if not patch_files:
        click.echo(bundle)


@click.command("admission-review")
@click.option("--operation", type=click.Choice(["CREATE", "UPDATE", "DELETE"]), default="CREATE", show_default=True)
@click.option("--old", "old_path", type=click.Path(exists=True, dir_okay=False),
              help="The object as stored before, for UPDATE (and DELETE).")
@click.option("-n", "--namespace", help="Namespace of the request. Default: the object's, else default.")
@click.option("--dry-run", is_flag=True, help="Mark the request as dryRun, as `kubectl apply --dry-run=server`.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
def admission_review(*, operation: str, old_path: str | None, namespace: str | None, dry_run: bool,
                     path: str) -> None:
    """Print the AdmissionReview the API server would send for the object in PATH (e.g. to curl it to
    `mlgate serve`)."""
    import json

    from mlgate.loading.documents import InputError, read_documents

    from .review import make_review

    def first_object(source: str) -> dict[str, object]:
        try:
            documents = list(read_documents([source]))
        except InputError as exc:
            raise click.UsageError(str(exc)) from None
        if len(documents) > 1:  # one review is one object: the API server never sends several
            raise click.UsageError(f"{source}: {len(documents)} documents; an AdmissionReview holds one object, "
                                   "give a file with one")
        if not documents or documents[0].data is None:
            where = f"{source}:{documents[0].error_line or documents[0].line}" if documents else source
            raise click.UsageError(f"{where}: {documents[0].error if documents else 'no Kubernetes object'}")
        return documents[0].data

    obj = None if operation == "DELETE" else first_object(path)
    old = first_object(old_path) if old_path else (first_object(path) if operation == "DELETE" else None)
    if operation == "UPDATE" and old is None:
        raise click.UsageError("UPDATE needs --old, the object as stored before")
    click.echo(json.dumps(make_review(obj, operation, old=old, namespace=namespace, dry_run=dry_run), indent=2))
