"""TLS for the webhook: TLS 1.2 at least, and certificate rotation without a restart.

The server listens with one `SSLContext` whose `sni_callback` hands every new handshake the
context currently in force. When the certificate or key file changes, `check()` builds a
complete new context from the files and swaps one reference; a pair that does not load (a
key written before its certificate, a half-written file) is refused and the old pair stays
until the files change again. Connections already open keep the certificate they started
with, so no request is dropped.

TLS 1.2 offers only the AEAD suites of Mozilla's "intermediate" profile (ECDHE with AES-GCM or
ChaCha20-Poly1305); TLS 1.3 suites are all AEAD. No CBC suite, no RSA key exchange.

The listener also counts connections (`ConnectionGate`): from accept, through the handshake, to
close. Above the limit a new connection is closed at accept, before a byte of TLS, so idle
sockets cannot run the process out of file descriptors or memory.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509

from .metrics import Metrics
from .watch import signature

log = logging.getLogger("mlgate.webhook.tls")


# Mozilla's "intermediate" TLS 1.2 suites without DHE: ECDHE key exchange, AEAD ciphers only.
TLS12_CIPHERS = ":".join((
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
))
REFUSAL_LOG_INTERVAL = 10.0  # seconds between two log lines about refused connections
_Context = TypeVar("_Context", bound=ssl.SSLContext)


def server_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    return _configure(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert_file, key_file)


def _configure(context: _Context, cert_file: str | Path, key_file: str | Path) -> _Context:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)  # TLS 1.2 only; the TLS 1.3 suites are set apart, and all AEAD
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])  # the server speaks HTTP/1.1 only; the API server follows ALPN
    context.load_cert_chain(cert_file, key_file)
    return context


def not_after(cert_file: str | Path) -> dt.datetime:
    return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).not_valid_after_utc


class ConnectionGate:
    """At most `limit` connections at once, counted from accept to close.

    A connection past its TLS handshake is uvicorn's (`open_connections()`, its set of
    connections, which it leaves only once the socket is closed). One still in the handshake is
    counted here, from accept until the handshake ends, or for `handshake_timeout` seconds when
    it never does: the loop aborts it then (or it went away earlier and is counted a little
    too long, which errs on the safe side).

    Everything here runs on the event loop's thread.
    """

    def __init__(self, limit: int, handshake_timeout: float, open_connections: Callable[[], int],
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.handshake_timeout = handshake_timeout
        self.open_connections = open_connections
        self.metrics = metrics
        self.clock = clock
        self._handshaking: dict[ssl.SSLObject, float] = {}  # in accept order, so in deadline order
        self._refused = 0
        self._logged_at = -REFUSAL_LOG_INTERVAL

    def count(self) -> int:
        """Connections open now: in the handshake, and past it."""
        now = self.clock()
        handshaking = self._handshaking
        while handshaking:
            first, deadline = next(iter(handshaking.items()))
            if deadline > now:
                break
            handshaking.pop(first, None)
        return len(handshaking) + self.open_connections()

    def admit(self) -> None:
        """Called at accept, before any TLS; raises when the limit is reached (the loop then closes the socket)."""
        if self.count() < self.limit:
            return
        self._refused += 1
        if self.metrics:
            self.metrics.connections_refused.inc()
        now = self.clock()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL:
            log.warning("connection limit of %d reached: new connections are closed at accept "
                        "(%d refused so far)", self.limit, self._refused)
            self._logged_at = now
        # an OSError: uvloop and asyncio close the socket and log it only in debug mode
        raise ConnectionRefusedError(f"{self.limit} connections are open, the limit")

    def handshaking(self, connection: ssl.SSLObject) -> None:
        self._handshaking[connection] = self.clock() + self.handshake_timeout

    def handshake_ended(self, connection: ssl.SSLObject) -> None:
        self._handshaking.pop(connection, None)


class _CountedSSLObject(ssl.SSLObject):
    """A server-side TLS connection that tells its gate when its handshake ends, done or failed."""

    gate: ConnectionGate | None = None

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise  # not over: waiting for the peer
        except BaseException:
            self._ended()
            raise
        self._ended()

    def _ended(self) -> None:
        if self.gate is not None:
            self.gate.handshake_ended(self)
            self.gate = None


class ListenerContext(ssl.SSLContext):
    """The listening socket's context: every accepted connection passes its `gate` first.

    The loop calls `wrap_bio` once per accepted connection, before reading from it; an exception
    there closes the socket at once.
    """

    gate: ConnectionGate | None = None

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None, session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        gate = self.gate
        if gate is None or not server_side:
            return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        gate.admit()
        connection = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if isinstance(connection, _CountedSSLObject):
            connection.gate = gate
            gate.handshaking(connection)
        return connection


class CertReloader:
    def __init__(self, cert_file: str | Path, key_file: str | Path, metrics: Metrics | None = None):
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.metrics = metrics
        self.last_error = ""
        self._signature = signature([self.cert_file, self.key_file])
        # a broken pair at start is fatal
        self.listener = _configure(ListenerContext(ssl.PROTOCOL_TLS_SERVER), self.cert_file, self.key_file)
        self.listener.sslobject_class = _CountedSSLObject
        self.listener.sni_callback = self._select
        self._current: ssl.SSLContext = self.listener
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
