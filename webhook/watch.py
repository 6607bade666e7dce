"""Polling for file changes: no inotify dependency, and it sees Kubernetes' symlink swaps.

ConfigMap and Secret volumes update by pointing a `..data` symlink at a new hidden directory;
`stat` follows the link, so (mtime, size, inode) of every file changes with the swap. Policy
files are small, so they are compared by checksum, which also catches two same-size writes
within one timestamp tick.
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from mlgate.loading.documents import MANIFEST_SUFFIXES

Signature = tuple[tuple[str, int, int, int] | tuple[str], ...]
log = logging.getLogger("mlgate.webhook")


def signature(paths: Iterable[str | Path]) -> Signature:
    """What changes when any of the files changes, appears or disappears."""
    out: list[tuple[str, int, int, int] | tuple[str]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((str(path),))
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def content_signature(paths: Iterable[str | Path]) -> tuple[tuple[str, int | None], ...]:
    """A checksum of every file: sees a same-size rewrite within the file system's timestamp granularity."""
    out: list[tuple[str, int | None]] = []
    for path in paths:
        try:
            out.append((str(path), zlib.crc32(Path(path).read_bytes())))
        except OSError:
            out.append((str(path), None))
    return tuple(out)


def manifest_files(paths: Iterable[str | Path]) -> list[str]:
    """Policy files under the given paths, sorted, skipping hidden entries.

    A mounted ConfigMap holds every file twice: `gpu.yaml` (a symlink) and
    `..2024_01_01_00_00_00.1/gpu.yaml`; only the first is the one to read.
    """
    files: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            files.append(str(path))
            continue
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            files.extend(os.path.join(root, n) for n in sorted(names)
                         if n.endswith(MANIFEST_SUFFIXES) and not n.startswith("."))
    return files


class Poller:
    """Calls `check` every `interval` seconds on a daemon thread; an exception is logged, never fatal."""

    def __init__(self, name: str, check: Callable[[], object], interval: float):
        self.name = name
        self.check = check
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mlgate-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(1.0, self.interval * 2))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:
                log.exception("%s: check failed; retrying in %.1fs", self.name, self.interval)
