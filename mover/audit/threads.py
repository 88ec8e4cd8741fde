"""The driver's second thread: the machine's other core, which the audit of a snapshot uses (its replicas read on two
threads), was idle for most of a forecast's append (mover/audit/forecast/). numpy's work on whole arrays (its
arithmetic, sorts and partitions) and pyarrow's reads run without the interpreter's lock, so two threads of them
take less time (docs/forecast-performance.md, "Two threads"); what holds the lock only waits its turn. Nothing here
shares an array being written: each batch writes its own rows, and a job run ahead only reads.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
MOST = 2  # a local[2] master's cores: no more threads than the forecast's master has
# pa.Table.from_pandas's threads for the driver's frames (the forecast's outputs, the history's dirs): the caller's
# alone. pyarrow converts a frame of more than 100 rows a column to a thread of its own; the columns are Python
# objects (names, lists) converted under the interpreter's lock, so its threads took the lock in turns with the
# forecast's: the outputs' table of a 20M append took 0.45-0.77 s that way, 0.25 s on one thread
# (docs/forecast-performance.md, "Strided projections, pyarrow's threads, and the outputs beside the history's write").
FROM_PANDAS = 1


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def workers() -> int:
    """Threads for the forecast's batches: cores(), at most MOST."""
    return max(1, min(MOST, cores()))


def each(items: Iterable[T], work: Callable[[T], R]) -> list[R]:
    """work(item) of every item, in their order, on workers() threads. Each call must write only what is its own
    (its rows of an output): the calls run at once. An error is raised once every call has ended."""
    todo = list(items)
    if workers() < 2 or len(todo) < 2:
        return [work(item) for item in todo]
    with ThreadPoolExecutor(workers(), thread_name_prefix="forecast") as pool:
        futures = [pool.submit(work, item) for item in todo]
    return [f.result() for f in futures]


def ahead(work: Callable[..., R], *args: Any) -> Future[R]:
    """work(*args) started on a thread of its own now; its result (or its error) is the future's. Nothing need wait
    for it: unread, it ends on its own."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="forecast-ahead")
    try:
        return pool.submit(work, *args)
    finally:
        pool.shutdown(wait=False)  # the thread ends when its one job has


@contextlib.contextmanager
def behind(work: Callable[..., Any], *args: Any) -> Iterator[Future[Any]]:
    """work(*args) on a thread while the body runs; the block is not left before it has ended (a write under a
    lock the caller holds is never left running past it); its error is raised there when the body ended without
    one of its own."""
    with ThreadPoolExecutor(1, thread_name_prefix="forecast-behind") as pool:
        future = pool.submit(work, *args)
        yield future
    future.result()


class Shared:
    """work(item) of every item, started now on one thread of its own; the caller joins in when it has nothing else
    to do (done): both then take the items left, one at a time, in their order. Each call must write only what is
    its own, as each's. With a single core nothing is started: done() runs every item."""

    def __init__(self, items: Iterable[T], work: Callable[[T], R]) -> None:
        self._todo = list(items)
        self._results: list[Any] = [None] * len(self._todo)
        self._next = 0
        self._lock = threading.Lock()
        self._work = work
        self._future = ahead(self._take) if workers() > 1 and len(self._todo) > 1 else None

    def _take(self) -> None:
        while True:
            with self._lock:
                i = self._next
                if i >= len(self._todo):
                    return
                self._next += 1
            try:
                self._results[i] = self._work(self._todo[i])
            except BaseException:
                with self._lock:  # the other thread takes no more: the call fails anyway
                    self._next = len(self._todo)
                raise

    def cancel(self) -> None:
        """No item is started past the one running: the results are not wanted (done() is not called)."""
        with self._lock:
            self._next = len(self._todo)

    def done(self) -> list[Any]:
        """Every item's result, in their order, once every call has ended (the caller taking items meanwhile);
        the first error, once both threads have stopped."""
        try:
            self._take()
        finally:
            if self._future is not None:
                self._future.result()
        return self._results
