"""Polling for file changes: no inotify dependency, and it sees Kubernetes' symlink swaps.

ConfigMap and Secret volumes update by pointing a `..data` symlink at a new hidden directory;
`stat` follows the link, so (mtime, size, inode) of every file changes with the swap.

Policy files are read whole on every poll (they are small) into a `Snapshot`: every file's bytes,
and every failure to list a directory or to read a file. A failure is part of the snapshot, never
"no files": under file-descriptor exhaustion `os.walk` silently yields nothing, which read as an
empty policy set. A mounted ConfigMap's files are read through its `..data` link, resolved once, so
that one read never mixes two updates. `Settler` decides when a snapshot may be loaded (see there).
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from mlgate.kube.reach import Backoff, describe, unreachable
from mlgate.loading.documents import MANIFEST_SUFFIXES

Signature = tuple[tuple[str, int, int, int] | tuple[str], ...]
ListDir = Callable[[str], list[os.DirEntry[str]]]  # os.scandir, whole; a test may pass one that fails
DATA_LINK = "..data"  # a ConfigMap, Secret or projected volume: the link kubelet swaps atomically
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


def list_dir(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as entries:
        return list(entries)


@dataclass(frozen=True)
class Root:
    """What one given path (file or directory) held when read."""

    path: str
    files: tuple[tuple[str, bytes], ...]  # (the name to show, its bytes), in `os.walk` order
    errors: tuple[tuple[str, str], ...]  # (where, what): "cannot list: ...", "cannot read: ..."
    atomic: bool  # every file came from a `..data` directory, read without a swap in between
    newest_mtime_ns: int  # of the files read; 0 when none


@dataclass(frozen=True)
class Snapshot:
    roots: tuple[Root, ...]

    @cached_property
    def signature(self) -> Hashable:
        return tuple((r.path, r.errors, tuple((name, len(data), hashlib.blake2b(data, digest_size=16).digest())
                                              for name, data in r.files)) for r in self.roots)

    @property
    def atomic(self) -> bool:
        return all(r.atomic for r in self.roots)

    def quiet_for(self, seconds: float) -> bool:
        """No file in it was modified within the last `seconds` (by its mtime)."""
        newest = max((r.newest_mtime_ns for r in self.roots), default=0)
        return newest <= time.time_ns() - int(seconds * 1e9)


def read_snapshot(paths: Iterable[str], listdir: ListDir = list_dir) -> Snapshot:
    return Snapshot(tuple(_RootReader(listdir).read(path) for path in paths))


class _Swapped(Exception):
    """A `..data` link changed while its files were read."""


class _RootReader:
    """Reads one given path; a failure to list or read anything is recorded, never skipped."""

    def __init__(self, listdir: ListDir):
        self.listdir = listdir
        self.files: list[tuple[str, bytes]] = []
        self.errors: list[tuple[str, str]] = []
        self.newest = 0
        self.atomic = True

    def read(self, path: str) -> Root:
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            is_dir = False  # read as a file, which says why it cannot be
        try:
            if is_dir:
                self._dir(path, path, in_data=False)
            else:
                self.atomic = False
                self._file(path, path)
        except _Swapped:  # kubelet swapped the volume during the read: discarded, the next poll reads the new one
            return Root(path, (), ((path, "changed while being read"),), False, time.time_ns())
        return Root(path, tuple(self.files), tuple(self.errors), self.atomic and not self.errors, self.newest)

    def _dir(self, directory: str, shown: str, *, in_data: bool) -> None:
        """Manifest files under `directory` in `os.walk` order, hidden entries skipped; `shown` names it in errors.

        A directory with a `..data` link (a mounted ConfigMap) is read through the link, resolved once:
        the files of one update, never some of the old and some of the new, nor the old set of names
        while kubelet is still relinking them. Symlinked directories are not followed, as in `os.walk`."""
        try:
            entries = sorted(self.listdir(directory), key=lambda e: e.name)
            data = next((e for e in entries if e.name == DATA_LINK and e.is_symlink()), None)
            target = os.readlink(data.path) if data is not None else None
        except OSError as exc:
            self.errors.append((shown, f"cannot list: {exc.strerror or exc}"))
            return
        if data is not None and target is not None:
            self._dir(os.path.join(directory, target), shown, in_data=True)
            try:
                swapped = os.readlink(data.path) != target
            except OSError:
                swapped = True
            if swapped:
                raise _Swapped
            entries = [e for e in entries if not _links_into_data(e)]  # anything else is read as usual
        visible: list[tuple[os.DirEntry[str], bool]] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                visible.append((entry, entry.is_dir(follow_symlinks=False)))
            except OSError as exc:
                self.errors.append((os.path.join(shown, entry.name), f"cannot list: {exc.strerror or exc}"))
        if (data is None and not in_data) or (data is not None and visible):
            self.atomic = False  # a plain directory, or entries beside a volume's own links
        for entry, is_dir in visible:
            if not is_dir and entry.name.endswith(MANIFEST_SUFFIXES) and not _is_symlinked_dir(entry):
                self._file(entry.path, os.path.join(shown, entry.name))
        for entry, is_dir in visible:
            if is_dir:
                self._dir(entry.path, os.path.join(shown, entry.name), in_data=in_data)

    def _file(self, path: str, shown: str) -> None:
        try:
            with open(path, "rb") as handle:
                mtime = os.fstat(handle.fileno()).st_mtime_ns
                data = handle.read()
        except OSError as exc:
            self.errors.append((shown, f"cannot read: {exc.strerror or exc}"))
            return
        self.files.append((shown, data))
        self.newest = max(self.newest, mtime)


def _links_into_data(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() and os.readlink(entry.path).startswith(DATA_LINK + "/")
    except OSError:
        return False


def _is_symlinked_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() and entry.is_dir()
    except OSError:
        return False


class Settler:
    """Hands out a snapshot only once it has settled, so that a file caught mid-write is never loaded.

    A snapshot settles when the same content (and the same errors) is read on two consecutive polls
    at least `settle` seconds apart; what it read in between does not matter, only that nothing
    changed. A ConfigMap's `..data` swap is atomic, so its snapshot settles when first read. On the
    first poll of all, files last modified at least `settle` seconds ago count as settled; newer
    ones are read once more after `settle` seconds (that first poll waits).

    A file's change is therefore loaded `settle` to `settle` + one poll interval after its last
    write (2 to 4 s with the defaults), a ConfigMap swap within one poll interval.
    """

    def __init__(self, read: Callable[[], Snapshot], settle: float):
        self.read = read
        self.settle = settle
        self.settled: Snapshot | None = None
        self._candidate: Snapshot | None = None
        self._since = 0.0
        self._first = True

    def poll(self) -> Snapshot | None:
        """The latest settled snapshot (None until one has)."""
        snapshot, now = self.read(), time.monotonic()
        first, self._first = self._first, False
        if first and not (snapshot.atomic or snapshot.quiet_for(self.settle)):
            self._candidate, self._since, first = snapshot, now, False
            time.sleep(self.settle)
            snapshot, now = self.read(), time.monotonic()
        same = self._candidate is not None and snapshot.signature == self._candidate.signature
        if first or snapshot.atomic or (same and now - self._since >= self.settle):
            self.settled = snapshot
        if not same:
            self._candidate, self._since = snapshot, now
        return self.settled


class Poller:
    """Calls `check` every `interval` seconds on a daemon thread; an exception is logged, never fatal. While the API
    server does not answer (mlgate/kube/reach.py) the next call waits longer, up to 30 s, and the log says so in
    one line."""

    def __init__(self, name: str, check: Callable[[], object], interval: float):
        self.name = name
        self.check = check
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mlgate-{name}", daemon=True)
        self._backoff = Backoff(initial=interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(1.0, self.interval * 2))

    def _run(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            wait = self.interval
            try:
                self.check()
                self._backoff.reset()
            except Exception as exc:
                if not unreachable(exc):
                    log.exception("%s: check failed; retrying in %.1fs", self.name, self.interval)
                    continue
                wait = max(self.interval, self._backoff.next())
                log.warning("%s: cannot reach the API server: %s; retrying in %.1fs", self.name, describe(exc), wait)
