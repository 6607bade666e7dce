"""A work queue of keys, as client-go's: deduplicated, one worker per key at a time, delayed and backed-off adds.

- `add(key)` while the key waits is a no-op (deduplication); while a worker holds it, the key is marked dirty and
  queued again when the worker calls `done(key)`, so two workers never reconcile the same object at once and no
  change is lost.
- `add_after(key, seconds)` queues it later (a deadline, a TTL, a requeue after a conflict).
- `retry(key)` queues it after an exponential per-key backoff (`BASE_DELAY` doubling up to `MAX_DELAY`);
  `forget(key)` resets the backoff after a successful pass.
- `shut_down()` wakes every waiting `get()`, which then returns None.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["BASE_DELAY", "MAX_DELAY", "WorkQueue"]

K = TypeVar("K", bound=Hashable)
BASE_DELAY = 0.5
MAX_DELAY = 60.0


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._queue: list[K] = []
        self._waiting: set[K] = set()  # in _queue
        self._processing: set[K] = set()
        self._dirty: set[K] = set()  # added again while processing
        self._later: list[tuple[float, int, K]] = []  # (due, tie-breaker, key)
        self._order = itertools.count()
        self._failures: dict[K, int] = {}
        self._closed = False

    def add(self, key: K) -> None:
        with self._lock:
            self._add(key)

    def _add(self, key: K) -> None:
        if self._closed or key in self._waiting:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        self._waiting.add(key)
        self._queue.append(key)
        self._lock.notify()

    def add_after(self, key: K, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        with self._lock:
            if not self._closed:
                heapq.heappush(self._later, (time.monotonic() + seconds, next(self._order), key))
                self._lock.notify()

    def retry(self, key: K) -> float:
        """Queue the key after its backoff; returns the delay."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(MAX_DELAY, BASE_DELAY * float(2**failures))
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key (the caller must call `done` with it), or None on shut-down or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                self._promote()
                if self._closed:
                    return None
                if self._queue:
                    key = self._queue.pop(0)
                    self._waiting.discard(key)
                    self._processing.add(key)
                    return key
                wait = self._later[0][0] - time.monotonic() if self._later else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._lock.wait(wait)

    def _promote(self) -> None:
        now = time.monotonic()
        while self._later and self._later[0][0] <= now:
            _, _, key = heapq.heappop(self._later)
            self._add(key)

    def done(self, key: K) -> None:
        with self._lock:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add(key)

    def shut_down(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def __len__(self) -> int:
        """Keys ready or waiting for their time (the queue-depth metric)."""
        with self._lock:
            return len(self._queue) + len(self._later)
