"""PathGuard: one Log's files are reached by path only under it, and its directory is renamed only under it.

A Log's segment and index files are mostly used through descriptors, which follow a file through a rename of its
directory. Whatever reaches a file *by name* instead (a roll creating the next segment, a reopen of a file the LRU
of open files closed, a lazy index load, a producer snapshot, a retention unlink, a stat) must not read the old
directory name after the directory was renamed and before the Log learned the new one: the old name is gone, or
(after a swap's promotion) names the *other* copy of the partition. So:

* `Log.rename_to` holds the guard from the on-disk rename to the last path updated in memory;
* every path-based operation holds it from reading the path to the system call that uses it (not longer: an fsync
  through a descriptor opened under it runs outside, the descriptor follows the rename).

A plain append to an open descriptor takes no guard: a swap's renames run outside the replica lock while appends go
on. An append that must open or create a file (a roll, a reopen) waits for a rename in progress, holding the replica
lock meanwhile (docs/data-path.md).

Reentrant: a roll holds it while it creates a segment, whose OpenFile takes it again. No crash-safety invariant of
its own: it orders operations in memory; what each rename and fsync is for is said where they happen.
"""

from __future__ import annotations

import threading


class PathGuard:
    __slots__ = ("_lock", "waiting")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # Threads blocked on the guard right now (approximate under races; for tests and logs, never for decisions).
        self.waiting = 0

    def __enter__(self) -> PathGuard:
        if not self._lock.acquire(blocking=False):
            self.waiting += 1
            try:
                self._lock.acquire()
            finally:
                self.waiting -= 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
