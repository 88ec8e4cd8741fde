"""Small durable-file helpers shared by the storage modules.

Crash-safety invariants:
* `atomic_write` leaves either the old content or the new content at `path`, never a mix or an empty file:
  the new bytes are written to `<path>.tmp` and fsynced before the rename publishes them, and the directory
  is fsynced after the rename so the new name survives a crash.
* A crash can leave a stray `<path>.tmp`; readers never look at it and the next write truncates it.
* `sync_filesystem` (syncfs) makes every name created on a file system so far durable in one call; a bulk create
  relies on it instead of fsyncing each new directory, and answers only after it returned.
* Opens that hit the descriptor limit first ask the LRU of open files to close idle ones (open_files.py).
* Writers of one path in this process are serialised (they share `<path>.tmp`); two threads checkpointing
  one dir at once would otherwise rename each other's tmp away.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import threading
from pathlib import Path

from mover.storage.errors import WouldBlock
from mover.storage.names import TMP_SUFFIX
from mover.storage.open_files import open_transient


def open_dir(path: Path) -> int:
    """A descriptor of a directory, for an fsync later (it follows the dir through a rename); the caller closes it."""
    return open_transient(path, os.O_RDONLY | os.O_DIRECTORY)


def fsync_dir(path: Path) -> None:
    """fsync a directory, making the renames, creations and unlinks in it durable."""
    fd = open_dir(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """syncfs(2) on the file system holding `path`: every dirty page and directory entry on it reaches the disk in
    one call. A bulk create of thousands of partitions makes their names durable this way, once per file system,
    instead of two directory fsyncs per partition (each a journal commit). Falls back to sync(2) without syncfs."""
    fd = open_transient(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs is None:
            os.sync()
            return
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


# sync_file_range(2) flag: start writeback of the dirty pages in the range and return without waiting.
_SYNC_FILE_RANGE_WRITE = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    _sync_file_range.restype = ctypes.c_int
_syncfs = getattr(_libc, "syncfs", None)
if _syncfs is not None:
    _syncfs.argtypes = (ctypes.c_int,)
    _syncfs.restype = ctypes.c_int


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a freshly written range to disk now. It returns once the range's writeback is
    submitted, which waits for the device's queue when that is full: meant for writers slower than the disk (a
    throttled move), whose backlog it keeps from piling up for their final fsync. Best effort: a no-op where the
    call does not exist, and errors are left for the real fsync to report."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """pwrite every byte (pwrite may write less than asked, e.g. on a signal)."""
    done = os.pwrite(fd, data, position)
    if done == len(data):
        return  # nearly always: the loop's view and slices are for the rare short write
    with memoryview(data) as mv:
        while done < len(mv):
            done += os.pwrite(fd, mv[done:], position + done)


def read_exactly(fd: int, length: int, position: int) -> bytes:
    """pread up to `length` bytes; shorter only at end of file."""
    chunks: list[bytes] = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, position + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_cached(fd: int, length: int, position: int) -> bytes:
    """pread `length` bytes only if the page cache holds them (preadv2 RWF_NOWAIT): else WouldBlock, having waited
    for no disk. For reads on the event loop; the caller knows the bytes exist (below a published size)."""
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], position, _RWF_NOWAIT) if _RWF_NOWAIT else -1
    except BlockingIOError:
        got = -1
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        got = -1  # a file system without RWF_NOWAIT: do not guess, read in a thread
    if got != length:
        raise WouldBlock(f"{length} bytes at {position} not in the page cache")
    return bytes(buf)


_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)

_path_locks: dict[Path, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _path_locks_guard:
        lock = _path_locks.get(path)
        if lock is None:
            lock = _path_locks[path] = threading.Lock()
        return lock


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content, whole. Thread-safe."""
    with _lock_for(path):
        _atomic_write(path, data)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = open_transient(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data, 0)
        # The content must be on disk before the rename can make it visible under the real name.
        os.fsync(fd)
    except OSError:
        # A full disk fails here: give back what the torn tmp holds (the old file is untouched), so the dir is not
        # left fuller than before the try. Recovery deletes a tmp a crash leaves.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    # rename(2) is atomic: readers and a crash see either the old file or the complete new one.
    os.rename(tmp, path)
    # Make the rename itself durable; without this a crash could bring back the old file.
    fsync_dir(path.parent)
