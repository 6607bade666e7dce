"""`mlgate serve --self-managed`: the webhook keeps its own certificates and registration.

Every replica, every poll: try to take or renew the Lease; read the Secret; write its serving pair to files that
`tls.CertReloader` reloads (key first: a reloader that sees a new key with the old certificate waits).
The leader, besides: takes the one certificate step that is due (`mlgate_certs.rotation`), writes the Secret
(with its resourceVersion, so a stale leader's write fails), then writes the caBundle and the failure policies
into the webhook configurations (`registration`).

With `--ca-file` (cert-manager, or any issuer that writes files) the certificates are not managed here: the
leader only writes that file's CAs as the caBundle, and the server reloads its files as always.

Everything created is owned by the ClusterRole the install ships (an ownerReference), so `kubectl delete -k` and
`helm uninstall`, which delete that ClusterRole, let the garbage collector delete the rest; `mlgate webhook
uninstall` deletes it by name where no garbage collector runs.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from mlgate.kube.lease import Lease
from mlgate.kube.reach import describe, unreachable
from mlgate.kube.rest import ApiError, Rest
from mlgate_certs.bundle import CertFiles, write_atomic  # type: ignore[import-not-found,unused-ignore]
from mlgate_certs.pki import service_dns_names  # type: ignore[import-not-found,unused-ignore]
from mlgate_certs.rotation import (  # type: ignore[import-not-found,unused-ignore]
    ROTATE_CA,
    CertState,
    Lifetimes,
    dump,
    load,
    next_state,
)

from .registration import desired, shipped_configurations, stored_enforcing, sync
from .watch import signature

__all__ = ["SelfManaged", "SelfManagedOptions", "default_namespace"]

log = logging.getLogger("mlgate.webhook.selfmanaged")
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
MANAGED_BY = {"app.kubernetes.io/managed-by": "mlgate", "app.kubernetes.io/name": "mlgate-webhook"}


def default_namespace() -> str:
    """$POD_NAMESPACE, else the Pod's service account namespace, else mlgate-system."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SA_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "mlgate-system"
    except OSError:
        return "mlgate-system"


@dataclass
class SelfManagedOptions:
    namespace: str = "mlgate-system"
    service: str = "mlgate-webhook"
    secret: str = "mlgate-webhook-certs"
    lease: str = "mlgate-webhook"
    owner: str = "mlgate-webhook"  # the ClusterRole that owns what is created
    url: str | None = None  # register this URL instead of the Service (a webhook outside the cluster, tests)
    identity: str = field(default_factory=lambda: os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}")
    lifetimes: Lifetimes = field(default_factory=Lifetimes)
    webhooks_file: Path | None = None  # default: the shipped manifests/webhooks.yaml; re-read when it changes
    ca_file: Path | None = None  # the caBundle from this file (certificates issued elsewhere); None: the Secret's

    def names(self) -> tuple[list[str], list[str]]:
        """(DNS names, IPs) of the serving certificate: the Service's names, and the URL's host."""
        dns, ips = service_dns_names(self.service, self.namespace), []
        host = urlsplit(self.url).hostname if self.url else None
        if host:
            try:
                ips.append(str(ipaddress.ip_address(host)))
            except ValueError:
                dns.append(host)
        return dns, ips


class SelfManaged:
    def __init__(self, options: SelfManagedOptions, rest: Rest, directory: Path,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)):
        self.options = options
        self.rest = rest
        self.files = CertFiles(directory)
        self.clock = clock
        self.lease = Lease(rest, options.namespace, options.lease, options.identity)
        self.shipped = shipped_configurations(options.webhooks_file)  # a broken file at start is fatal
        self._shipped_signature = signature([options.webhooks_file]) if options.webhooks_file else ()
        self.ready: Callable[[], bool] = lambda: False  # set by the server once its service exists
        self.leading = False
        self.enforcing = False
        self._owner: dict[str, Any] | None = None
        self._owner_looked_up = False
        self._lock = threading.Lock()

    @property
    def secret_path(self) -> str:
        return f"/api/v1/namespaces/{self.options.namespace}/secrets/{self.options.secret}"

    def bootstrap(self, timeout: float = 60.0, interval: float = 1.0) -> CertFiles:
        """Tick until the Secret has a serving pair on disk; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.tick()
            except ApiError as exc:
                log.warning("secret %s/%s: %s", self.options.namespace, self.options.secret, exc)
            except Exception as exc:  # not there yet (e.g. started with the control plane): try again until timeout
                if not unreachable(exc):
                    raise
                log.warning("secret %s/%s: cannot reach the API server: %s", self.options.namespace,
                            self.options.secret, describe(exc))
            if self.files.cert.exists() and self.files.key.exists():
                return self.files
            if time.monotonic() > deadline:
                raise TimeoutError(f"no serving certificate in the Secret {self.options.namespace}/"
                                   f"{self.options.secret} after {timeout:g}s (the leader writes it; see its log)")
            time.sleep(interval)

    def tick(self) -> None:
        with self._lock:
            self.lease.owner = self._owner_reference()
            leading = self.lease.try_acquire_or_renew()
            if leading != self.leading:
                log.info("%s %s the webhook lease", self.options.identity, "holds" if leading else "no longer holds")
                self.leading = leading
            if self.options.ca_file is not None:
                if leading:
                    self._register(self.options.ca_file.read_bytes())
                return
            secret = self.rest("GET", self.secret_path)
            if leading:
                secret = self._lead(secret)
            if secret is not None:
                self._write_files(secret)

    def stop(self) -> None:
        if self.leading:
            self.lease.release()

    def _lead(self, secret: dict[str, Any] | None) -> dict[str, Any] | None:
        annotations = dict(((secret or {}).get("metadata") or {}).get("annotations") or {})
        data = {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}
        state = load(data, annotations)
        dns, ips = self.options.names()
        step = next_state(state, dns, ips, self.clock(), lifetimes=self.options.lifetimes,
                          rotate_request=annotations.get(ROTATE_CA, ""))
        if step is not None:
            state, why = step
            stored = self._store(secret, state, annotations)
            if stored is None:
                return secret  # lost a race (409): the next tick reads the winner's
            secret = stored
            log.info("certificates: %s (caBundle: %d CA(s))", why, len(state.bundle))
        self._register(state.bundle_pem())
        return secret

    def _register(self, bundle_pem: bytes) -> None:
        self._reread_shipped()
        if not self.enforcing:
            self.enforcing = stored_enforcing(self.rest, self.shipped) or self.ready()
        bundle = base64.b64encode(bundle_pem).decode()
        configs = desired(self.shipped, namespace=self.options.namespace, ca_bundle=bundle, enforcing=self.enforcing,
                          url=self.options.url, owner=self._owner_reference())
        for line in sync(self.rest, configs):
            log.info("webhook configuration %s (enforcing: %s)", line, self.enforcing)

    def _reread_shipped(self) -> None:
        """A mounted ConfigMap's new content (kept out until it reads whole and right)."""
        if self.options.webhooks_file is None:
            return
        current = signature([self.options.webhooks_file])
        if current == self._shipped_signature:
            return
        self._shipped_signature = current
        try:
            self.shipped = shipped_configurations(self.options.webhooks_file)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            log.error("%s not re-read; the configurations stay as they are: %s", self.options.webhooks_file, exc)

    def _store(self, secret: dict[str, Any] | None, state: CertState,
               annotations: dict[str, str]) -> dict[str, Any] | None:
        data, ours = dump(state)
        metadata: dict[str, Any] = {"name": self.options.secret, "namespace": self.options.namespace,
                                    "labels": MANAGED_BY, "annotations": {**annotations, **ours}}
        # ownerReferences are set at creation only: changing them needs delete permission (OwnerReferences-
        # PermissionEnforcement)
        owner = self._owner_reference()
        refs = secret["metadata"].get("ownerReferences") if secret is not None else [owner] if owner else None
        if refs:
            metadata["ownerReferences"] = refs
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        try:
            if secret is None:
                return self.rest("POST", self.secret_path.rsplit("/", 1)[0], body)
            metadata["resourceVersion"] = secret["metadata"]["resourceVersion"]
            return self.rest("PUT", self.secret_path, body)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    def _owner_reference(self) -> dict[str, Any] | None:
        if not self._owner_looked_up:  # once answered: a missing ClusterRole or permission is logged, not retried
            try:
                role = self.rest("GET", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{self.options.owner}")
            except ApiError as exc:
                log.warning("ClusterRole %s: %s; what mlgate creates will not be deleted with it", self.options.owner,
                            exc)
                role = None
            self._owner_looked_up = True
            if role is not None:
                self._owner = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                               "name": self.options.owner, "uid": role["metadata"]["uid"]}
        return self._owner

    def _write_files(self, secret: dict[str, Any]) -> None:
        data = secret.get("data") or {}
        if "tls.crt" not in data or "tls.key" not in data:
            return
        cert, key = base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])
        if _read(self.files.cert) == cert and _read(self.files.key) == key:
            return
        write_atomic(self.files.key, key, private=True)
        write_atomic(self.files.cert, cert)
        write_atomic(self.files.ca_cert, base64.b64decode(data.get("ca-bundle.crt", "")))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
