"""Worker processes for the CLI, the same on Linux, macOS and Windows.

How many: the CPUs this process may use, `os.process_cpu_count()` (Python 3.13+), else the affinity mask
`os.sched_getaffinity` (Linux and a few BSDs only), else `os.cpu_count()`.

How they start: `fork` on Linux, where workers inherit the loaded policies for free. Everywhere else `spawn`:
Windows has no `fork`, and macOS offers it but CPython made `spawn` its default there in 3.8 because system
libraries that start threads can crash a forked child (bpo-33725, Doc/library/multiprocessing.rst, "Contexts and
start methods"). A spawned worker receives what it judges with once, through the pool's initializer, never per
file. `MLGATE_START_METHOD` forces one of the methods the platform offers, which is how the tests run `spawn` and
`forkserver` on Linux.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from mlgate.loading.documents import InputError

START_METHOD_ENV = "MLGATE_START_METHOD"
LOGGER = "mlgate"  # the logger whose handlers workers rebuild (a rule that raises logs one line there)

T = TypeVar("T")
R = TypeVar("R")


def usable_cpus() -> int:
    """The CPUs this process may run on, on any platform."""
    counter: Callable[[], int | None] | None = getattr(os, "process_cpu_count", None)  # 3.13+, affinity-aware
    if counter is not None:
        return counter() or 1
    affinity: Callable[[int], set[int]] | None = getattr(os, "sched_getaffinity", None)  # Linux, some BSDs
    if affinity is not None:
        return len(affinity(0)) or 1
    return os.cpu_count() or 1


def start_method() -> str:
    """`fork` on Linux, `spawn` elsewhere, or what `MLGATE_START_METHOD` names; InputError for a method this
    platform does not offer."""
    offered = multiprocessing.get_all_start_methods()
    forced = os.environ.get(START_METHOD_ENV)
    if forced:
        if forced not in offered:
            raise InputError(START_METHOD_ENV, f"{forced!r} is not a start method this platform offers "
                                               f"({', '.join(offered)})")
        return forced
    return "fork" if sys.platform == "linux" and "fork" in offered else "spawn"


def pool_map(function: Callable[[T], R], items: Iterable[T], workers: int, *,
             initializer: Callable[..., None], initargs: tuple[Any, ...], chunksize: int = 1) -> Iterator[R]:
    """`function` over `items` in `workers` processes, results in input order. `initializer(*initargs)` runs once
    in each worker: under `fork` the arguments are inherited, under `spawn` pickled once per worker."""
    logger = logging.getLogger(LOGGER)
    handlers = tuple(type(h) for h in logger.handlers)
    context = multiprocessing.get_context(start_method())
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start,
                             initargs=(handlers, logger.level, initializer, initargs)) as pool:
        yield from pool.map(function, items, chunksize=chunksize)


def _start(handlers: tuple[type[logging.Handler], ...], level: int, initializer: Callable[..., None],
           initargs: tuple[Any, ...]) -> None:
    # A spawned worker starts with logging unconfigured, and logging's last resort would print a traceback where
    # the parent prints one line; the parent's handlers are rebuilt by class (replacing the ones a fork inherits).
    logger = logging.getLogger(LOGGER)
    logger.handlers = [handler() for handler in handlers]
    logger.setLevel(level)
    initializer(*initargs)
