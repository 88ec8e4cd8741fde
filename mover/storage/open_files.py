"""OpenFiles: the broker's bounded set of open segment and index files (an LRU of file descriptors).

Kafka keeps every segment's files open (three or four descriptors per segment); at 10,000 partitions that is more
than the usual `ulimit -n`. Here a file is an `OpenFile`: opened on first use, and closed again by the broker-wide
LRU when more than `capacity` are open and it is not in use. An idle partition then holds no descriptor at all, and
the daemon's descriptor count is bounded by the capacity (sized from RLIMIT_NOFILE at start-up) plus what requests
in flight hold, whatever the number of partitions.

Using a file: `with handle as fd: os.pread(fd, ...)`. The fd is pinned for the `with` block only: never keep it
past the block (a file slice that outlives it takes its own `os.dup`, see log_segment.FileSlice).

Crash-safety invariants:
* Closing a descriptor loses nothing: written bytes are in the page cache and belong to the inode, and an fsync
  through a descriptor opened later covers them (fsync(2) flushes the file, not the descriptor). So a segment
  closed while dirty is fsynced by reopening it (LogSegment.flush), and the recovery point still only moves after
  that fsync returns.
* A file is reopened by its current path, read under the owning Log's PathGuard (path_guard.py), which the renamer
  of its directory (a swap, a topic delete) holds from the rename to the last path updated: no reopen uses a stale
  path. The renamer also pins the .log files open across the rename (`Pinned`), so that readers need no reopen, and
  so do not wait for the guard, meanwhile.
* Opening never creates a file unless the handle was made with `create=True` (index files appear on first entry).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from mover.storage.dir_health import is_resource_limit
from mover.storage.path_guard import PathGuard

log = logging.getLogger(__name__)

# Used until the daemon sizes it from the descriptor limit (tests and tools that open logs directly).
DEFAULT_CAPACITY = 1024
# The least the cache is allowed: below this, partitions would thrash on every request.
MIN_CAPACITY = 32


class OpenFiles:
    """The LRU of open `OpenFile`s. Thread-safe; one per process (`open_files()`)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(capacity, MIN_CAPACITY)
        self._open: OrderedDict[OpenFile, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opens = 0  # files opened (first use and reopens), for benches and tests
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(capacity, MIN_CAPACITY)
            victims = self._evict_locked(self.capacity)
        _close_all(victims)

    def shrink(self, keep: int) -> int:
        """Close unpinned files until at most `keep` are open; returns how many were closed."""
        with self._lock:
            victims = self._evict_locked(keep)
        _close_all(victims)
        return len(victims)

    def _evict_locked(self, keep: int) -> list[int]:
        """Take the least recently used unpinned files out until at most `keep` are open. Returns their descriptors,
        which the caller closes once it released the lock: a close lets other threads run, and each of them then
        waited for this lock (eight threads opening logs at start-up spent half their time so). Walks only as far
        as it must: one eviction per open once the LRU is full, so copying the whole LRU each time made every open
        cost O(capacity)."""
        excess = len(self._open) - keep
        if excess <= 0:
            return []
        victims: list[tuple[OpenFile, int]] = []
        for f in self._open:
            if f._pins == 0 and f._fd is not None:
                victims.append((f, f._fd))
                if len(victims) == excess:
                    break
        for f, _ in victims:  # not while iterating: an OrderedDict must not change under its iterator
            f._fd = None
            del self._open[f]
        self.evictions += len(victims)
        return [fd for _, fd in victims]

    def _acquire(self, f: OpenFile) -> int:
        with self._lock:
            f._pins += 1
            fd = f._fd
            if fd is not None:
                self._open.move_to_end(f)
                return fd
        # Opened outside the lock: a cold open waits for disk reads (directory blocks), and start-up opens
        # partitions on several threads at once. The pin taken above keeps the LRU from closing it meanwhile.
        try:
            fd = self._open_fd(f)
        except BaseException:
            with self._lock:
                f._pins -= 1
            raise
        with self._lock:
            if f._fd is not None:  # another thread opened it first: keep theirs
                victims = [fd]
                self._open.move_to_end(f)
                fd = f._fd
            else:
                f._fd = fd
                self._open[f] = None
                self.opens += 1
                victims = self._evict_locked(self.capacity)
        _close_all(victims)
        return fd

    def _open_fd(self, f: OpenFile) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if f.create else 0)
        # The path read and opened under the guard: a rename of the directory in progress finishes first.
        with f.guard:
            try:
                return os.open(f.path, flags, 0o644)
            except OSError as e:
                if not is_resource_limit(e):
                    raise
                # Out of descriptors (connections, other requests): give back half of our idle ones and try once more.
                if self.shrink(len(self._open) // 2) == 0:
                    raise
                return os.open(f.path, flags, 0o644)

    def _release(self, f: OpenFile) -> None:
        with self._lock:
            f._pins -= 1

    def _forget(self, f: OpenFile) -> None:
        with self._lock:
            fd, f._fd = f._fd, None
            self._open.pop(f, None)
        if fd is not None:
            os.close(fd)


def _close_all(fds: list[int]) -> None:
    """Close descriptors the LRU took out (outside its lock): no OpenFile refers to them any more."""
    for fd in fds:
        os.close(fd)


_OPEN_FILES = OpenFiles()


def open_files() -> OpenFiles:
    return _OPEN_FILES


def capacity_for_limit(nofile: int) -> int:
    """Half the descriptor limit goes to files, the rest to connections, dir locks and requests in flight."""
    return max(MIN_CAPACITY, nofile // 2)


def open_transient(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open for a descriptor closed again right after use; out of descriptors, the LRU gives back half of its
    idle files and the open is tried once more."""
    try:
        return os.open(path, flags | os.O_CLOEXEC, mode)
    except OSError as e:
        if not is_resource_limit(e) or _OPEN_FILES.shrink(len(_OPEN_FILES) // 2) == 0:
            raise
        return os.open(path, flags | os.O_CLOEXEC, mode)


def read_whole_file(path: Path) -> bytes:
    fd = open_transient(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


class OpenFile:
    """One file opened on demand through the process's OpenFiles. `with f as fd:` pins it open for the block.
    `guard`: the owning Log's PathGuard, held while the file is (re)opened by its path."""

    __slots__ = ("path", "create", "guard", "_fd", "_pins", "_files")

    def __init__(self, path: Path, *, create: bool = False, fd: int | None = None,
                 files: OpenFiles | None = None, guard: PathGuard | None = None) -> None:
        self.path = path
        self.create = create
        self.guard = guard if guard is not None else PathGuard()
        self._files = files if files is not None else _OPEN_FILES
        self._fd: int | None = None
        self._pins = 0
        if fd is not None:
            # A descriptor the caller just opened (a new segment): adopt it into the LRU.
            with self._files._lock:
                self._fd = fd
                self._files._open[self] = None
                self._files.opens += 1
                victims = self._files._evict_locked(self._files.capacity)
            _close_all(victims)

    def __enter__(self) -> int:
        return self._files._acquire(self)

    def __exit__(self, *exc: object) -> None:
        self._files._release(self)

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def dup(self) -> int:
        """A descriptor of the caller's own for this file (close it): it stays valid whatever the LRU does."""
        with self as fd:
            try:
                return os.dup(fd)
            except OSError as e:
                if not is_resource_limit(e) or self._files.shrink(len(self._files) // 2) == 0:
                    raise
                return os.dup(fd)

    def close(self) -> None:
        self._files._forget(self)

    def __repr__(self) -> str:
        return f"OpenFile({self.path}, {'open' if self._fd is not None else 'closed'})"


class Pinned:
    """Files held open across a directory rename: `with Pinned(files): rename; update paths`. `create`: files made
    with create=True (index files) are pinned too, created empty if absent; otherwise they are skipped."""

    def __init__(self, files: Iterable[OpenFile], create: bool = False) -> None:
        self._files = list(files)
        self._create = create
        self._held: list[OpenFile] = []

    def __enter__(self) -> Pinned:
        try:
            for f in self._files:
                if f.create and not self._create:
                    # Pinning would create an index file a segment does not have; a reopen of one waits for the
                    # renamer's PathGuard instead.
                    continue
                f.__enter__()
                self._held.append(f)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._held:
            f.__exit__()
        self._held = []


def fd_count() -> int:
    """Descriptors this process has open (Linux /proc), for the start-up warning and benches."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return -1
        raise
