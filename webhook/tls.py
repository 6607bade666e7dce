"""TLS for the webhook: TLS 1.2 at least, and certificate rotation without a restart.

The server listens with one `SSLContext` whose `sni_callback` hands every new handshake the
context currently in force. When the certificate or key file changes, `check()` builds a
complete new context from the files and swaps one reference; a pair that does not load (a
key written before its certificate, a half-written file) is refused and the old pair stays
until the files change again. Connections already open keep the certificate they started
with, so no request is dropped.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
from pathlib import Path
from typing import Any

from cryptography import x509

from .metrics import Metrics
from .watch import signature

log = logging.getLogger("mlgate.webhook.tls")


def server_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])  # the server speaks HTTP/1.1 only; the API server follows ALPN
    context.load_cert_chain(cert_file, key_file)
    return context


def not_after(cert_file: str | Path) -> dt.datetime:
    return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).not_valid_after_utc


class CertReloader:
    def __init__(self, cert_file: str | Path, key_file: str | Path, metrics: Metrics | None = None):
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.metrics = metrics
        self.last_error = ""
        self._signature = signature([self.cert_file, self.key_file])
        self.listener = server_context(self.cert_file, self.key_file)  # a broken pair at start is fatal
        self.listener.sni_callback = self._select
        self._current = self.listener
        self.expires = not_after(self.cert_file)
        self._publish()

    def _select(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        current = self._current
        if current is not context:
            connection.context = current

    def check(self) -> bool:
        """Load the files again if they changed; True when a new certificate came into use."""
        current = signature([self.cert_file, self.key_file])
        if current == self._signature:
            return False
        self._signature = current
        try:
            context = server_context(self.cert_file, self.key_file)
            expires = not_after(self.cert_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            self.last_error = f"{self.cert_file}, {self.key_file}: {exc}"
            log.error("certificate not reloaded; the previous one stays in use: %s", self.last_error)
            if self.metrics:
                self.metrics.cert_reload_errors.inc()
            return False
        self._current, self.expires, self.last_error = context, expires, ""
        self._publish()
        log.info("certificate reloaded from %s; valid until %s", self.cert_file, expires.isoformat())
        return True

    def _publish(self) -> None:
        if self.metrics:
            self.metrics.cert_expiry.set(self.expires.timestamp())

    def status(self) -> dict[str, Any]:
        remaining = self.expires - dt.datetime.now(dt.UTC)
        return {"ready": remaining.total_seconds() > 0, "certFile": str(self.cert_file),
                "notAfter": self.expires.isoformat(), "lastError": self.last_error}
