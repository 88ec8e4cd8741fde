"""The LRU of open segment and index files: bounded descriptors, reopen on demand, slices and renames stay correct."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mover.storage import open_files as of
from mover.storage.dir_health import is_resource_limit
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch


@pytest.fixture
def small_cache() -> object:
    files = of.open_files()
    old = files.capacity
    files.set_capacity(of.MIN_CAPACITY)
    yield files
    files.set_capacity(old)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_logs_hold_bounded_descriptors_and_reopen(tmp_path: Path, small_cache: of.OpenFiles) -> None:
    before = _open_fds()
    logs = []
    for p in range(200):
        lg = Log.open(tmp_path / f"t-{p}", TopicPartition("t", p), LogConfig(index_interval_bytes=1))
        lg.append(bytearray(make_batch([b"a" * 100, b"b"])))
        lg.append(bytearray(make_batch([f"p{p}".encode()])))  # an index entry: the .index and .timeindex open too
        logs.append(lg)
    # 200 partitions of 3 files each; the cache keeps its capacity (plus nothing pinned).
    assert len(small_cache) <= small_cache.capacity
    assert _open_fds() - before <= small_cache.capacity + 2
    for p, lg in enumerate(logs):
        # Every file was closed by the LRU at some point; a read reopens it.
        with lg.read(0, 1 << 20) as sl:
            assert f"p{p}".encode() in sl.read()
        lg.flush()  # fsync through a reopened descriptor
        assert lg.recovery_point == 3
    for lg in logs:
        lg.close()
    assert _open_fds() <= before + 1


def test_slice_owns_its_descriptor_across_eviction(tmp_path: Path, small_cache: of.OpenFiles) -> None:
    lg = Log.open(tmp_path / "t-0", TopicPartition("t", 0), LogConfig())
    lg.append(bytearray(make_batch([b"payload"])))
    sl = lg.read(0, 1 << 20)
    small_cache.shrink(0)  # every idle file closed, and their numbers free for the kernel to reuse
    assert not lg.active_segment.file.is_open
    other = os.open(tmp_path / "t-0" / "00000000000000000000.log", os.O_RDONLY)
    try:
        assert b"payload" in sl.read()
    finally:
        os.close(other)
        sl.close()
    lg.close()


def test_rename_with_pinned_files_never_reopens_a_stale_path(tmp_path: Path, small_cache: of.OpenFiles) -> None:
    lg = Log.open(tmp_path / "t-0", TopicPartition("t", 0), LogConfig())
    lg.append(bytearray(make_batch([b"x"])))
    small_cache.shrink(0)
    with lg.pin_files():
        os.rename(tmp_path / "t-0", tmp_path / "t-0.gone")
        # A lock-free reader between the rename and rename_dir: the pinned descriptor answers.
        with lg.read(0, 100) as sl:
            assert b"x" in sl.read()
        lg.rename_dir(tmp_path / "t-0.gone")
    small_cache.shrink(0)
    with lg.read(0, 100) as sl:  # reopened by the new path
        assert b"x" in sl.read()
    lg.close()


def test_retired_segment_stays_readable_after_unlink(tmp_path: Path, small_cache: of.OpenFiles) -> None:
    lg = Log.open(tmp_path / "t-0", TopicPartition("t", 0), LogConfig(segment_bytes=200, retention_bytes=0))
    for i in range(4):
        lg.append(bytearray(make_batch([f"r{i}".encode() * 20])))
    first = lg.segments()[0]
    assert lg.delete_retained_segments() >= 1
    small_cache.shrink(0)
    with first.read(0, 1 << 20) as sl:  # a reader holding the old snapshot
        assert b"r0" in sl.read()
    lg.close()


def test_resource_limits_are_not_disk_errors() -> None:
    assert is_resource_limit(OSError(errno.EMFILE, "Too many open files"))
    assert is_resource_limit(OSError(errno.ENFILE, "Too many open files in system"))
    assert is_resource_limit(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert not is_resource_limit(OSError(errno.EIO, "Input/output error"))
    assert not is_resource_limit(OSError(errno.ENOSPC, "No space left on device"))


def _idle_files(tmp_path: Path, n: int) -> tuple[of.OpenFiles, list[of.OpenFile]]:
    """A cache holding `n` files, each opened once and now idle (open in the cache, not in use)."""
    files = of.OpenFiles(capacity=1000)
    handles = [of.OpenFile(tmp_path / f"f{i}", create=True, files=files) for i in range(n)]
    for h in handles:
        with h:
            pass
    return files, handles


def test_out_of_descriptors_gives_back_idle_files(tmp_path: Path) -> None:
    files, handles = _idle_files(tmp_path, 40)
    assert len(files) == 40
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    spare = []
    try:
        # Fill the process's descriptor table, then ask for one more file: the cache closes idle ones and retries.
        resource.setrlimit(resource.RLIMIT_NOFILE, (_open_fds() + 8, hard))
        try:
            while True:
                spare.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as e:
            assert e.errno == errno.EMFILE
        extra = of.OpenFile(tmp_path / "extra", create=True, files=files)
        with extra:
            pass
        assert len(files) < 40
    finally:
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for h in handles:
            h.close()


def test_eviction_closes_the_least_recently_used_idle_files_and_skips_pinned_ones(tmp_path: Path) -> None:
    files, handles = _idle_files(tmp_path, 40)
    with handles[0], handles[1]:  # a read in flight on each
        for h in handles[2:]:
            with h:
                pass  # used again: the two pinned files are now the least recently used
        before = _open_fds()
        assert files.shrink(30) == 10
        assert handles[0].is_open and handles[1].is_open
        assert [h.is_open for h in handles[2:12]] == [False] * 10
        assert all(h.is_open for h in handles[12:])
        assert _open_fds() == before - 10, "the evicted descriptors are closed, not only forgotten"
    files.set_capacity(of.MIN_CAPACITY)  # 32 with 30 open: the third reopen below is one too many
    for h in handles[2:5]:
        with h:
            pass
    assert len(files) == of.MIN_CAPACITY
    assert not handles[0].is_open and handles[1].is_open, "the least recently used went, now that it is idle"
    assert files.evictions == 11
    for h in handles:
        h.close()
    assert len(files) == 0
