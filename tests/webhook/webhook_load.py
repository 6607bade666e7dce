"""Continuous requests on background threads, for rotation and reload tests (bounded in time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

MAX_SECONDS = 30.0  # a runaway loop stops here even if the test forgets to


@dataclass
class Load:
    """Threads that each send `request` in a loop until `stop()`; every outcome is kept."""

    make_client: Callable[[], httpx.Client]
    request: Callable[[httpx.Client], httpx.Response]
    fresh_connections: bool = False  # a new TLS handshake for every request
    threads: int = 2
    outcomes: list[httpx.Response | Exception] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        self._workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self._workers:
            worker.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + MAX_SECONDS
        client = self.make_client()
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                if self.fresh_connections:
                    client.close()
                    client = self.make_client()
                try:
                    self.outcomes.append(self.request(client))
                except Exception as exc:
                    self.outcomes.append(exc)
        finally:
            client.close()

    def stop(self) -> Load:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=MAX_SECONDS)
        return self

    @property
    def failures(self) -> list[str]:
        return [repr(o) if isinstance(o, Exception) else f"HTTP {o.status_code}: {o.text[:200]}"
                for o in self.outcomes if isinstance(o, Exception) or o.status_code != 200]


def wait_until(condition: Callable[[], bool], seconds: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(0.02)
