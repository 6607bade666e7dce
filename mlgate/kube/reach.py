"""Whether the API server answers: decided here once, for every long-running loop and every command.

A request that got no HTTP answer at all (connection refused, no route, a name that does not resolve, a TLS
handshake that failed, a connection reset, a timeout) means "cannot reach the API server". An answer of any status,
even 500, is not: the server is there, and `ApiError` carries what it said. The Kubernetes client's HTTP library,
urllib3, wraps a refused connection in `MaxRetryError(NewConnectionError)` after its retries; a stream cut mid-watch
is a `ProtocolError`. Both derive from `urllib3.exceptions.HTTPError`.

Loops that cannot reach it wait by `Backoff`, client-go's reflector backoff (tools/cache/reflector.go:
`wait.NewExponentialBackoffManager(800*time.Millisecond, 30*time.Second, 2*time.Minute, 2.0, 1.0, clock)`, i.e.
0.8 s doubling to 30 s, each wait stretched by up to 100% jitter so replicas do not retry in step). `Reachability`
remembers the last outcome, so readiness can name why a process is not ready.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["Backoff", "Reachability", "cannot_reach", "describe", "quiet_retries", "unreachable"]

T = TypeVar("T")
_NETWORK: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, socket.gaierror, ssl.SSLError,
                                             http.client.HTTPException)


def _network_errors() -> tuple[type[BaseException], ...]:
    try:  # urllib3 comes with the Kubernetes client (mlgate[cluster]); without it no request was ever sent
        import urllib3.exceptions
    except ImportError:
        return _NETWORK
    return (*_NETWORK, urllib3.exceptions.HTTPError)


def unreachable(exc: BaseException) -> bool:
    """True when `exc` says a request got no HTTP answer (see the module's docstring)."""
    return isinstance(exc, _network_errors())


def describe(exc: BaseException) -> str:
    """One line: the innermost cause, e.g. "NewConnectionError: Failed to establish a new connection: [Errno 111]
    Connection refused", without urllib3's object reprs and its "Max retries exceeded" wrapper."""
    inner = exc
    while getattr(inner, "reason", None) is not None and isinstance(inner.reason, BaseException):  # type: ignore[attr-defined]
        inner = inner.reason  # type: ignore[attr-defined]
    text = str(inner).strip()
    if text.startswith("<") and ">: " in text:  # "<urllib3.connection.HTTPSConnection object at 0x…>: Failed …"
        text = text.split(">: ", 1)[1]
    lines = text.splitlines()
    return f"{type(inner).__name__}: {lines[0][:300] if lines else '(no message)'}"


def quiet_retries() -> None:
    """Silence urllib3's "Retrying (Retry(total=2, ...))" warnings, three per refused request: the line that
    counts is the one logged (or printed) after the last retry, from `describe`."""
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def cannot_reach(server: str, exc: BaseException) -> str:
    """The one line every command prints when the API server did not answer."""
    return f"{server}: cannot reach the API server: {describe(exc)}"


@dataclass
class Backoff:
    """Capped exponential waits: `initial`, doubling, at most `cap`, each stretched by up to `jitter` of itself;
    `reset()` after a success starts again from `initial`."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    random: Callable[[], float] = random.random
    failures: int = 0

    def next(self) -> float:
        """The wait before the next attempt (and one failure more counted)."""
        base = min(self.cap, self.initial * self.factor ** min(self.failures, 64))
        self.failures += 1
        return base * (1.0 + self.jitter * self.random())

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Reachability:
    """Whether this process's requests to the API server got an answer, as last seen; shared by its threads.

    `answered()` after any HTTP answer, `failed(exc)` after an exception (only those `unreachable` counts);
    `problem` is None while the last request got an answer, else "cannot reach the API server <server>: <why>".
    """

    server: str = "the API server"
    clock: Callable[[], float] = time.monotonic
    _problem: str | None = None
    _since: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self) -> None:
        with self._lock:
            self._problem = None

    def failed(self, exc: BaseException) -> bool:
        """Record `exc` if it says the API server did not answer; True if so."""
        if not unreachable(exc):
            return False
        with self._lock:
            if self._problem is None:
                self._since = self.clock()
            self._problem = f"cannot reach the API server {self.server}: {describe(exc)}"
        return True

    @property
    def problem(self) -> str | None:
        with self._lock:
            return self._problem

    def status(self) -> dict[str, Any]:
        """For a JSON /readyz: {"reachable": bool, and while not, "lastError" and "unreachableSeconds"}."""
        with self._lock:
            if self._problem is None:
                return {"reachable": True}
            return {"reachable": False, "lastError": self._problem,
                    "unreachableSeconds": round(self.clock() - self._since, 1)}

    def observe(self, call: Callable[[], T]) -> T:
        """`call()`, its outcome recorded: an HTTP answer (a result or an error with a status) or no answer."""
        try:
            result = call()
        except Exception as exc:
            if not self.failed(exc):
                self.answered()  # an ApiError or a bug: either way not a network failure
            raise
        self.answered()
        return result
