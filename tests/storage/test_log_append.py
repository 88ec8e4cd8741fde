"""Log: appends (offsets assigned or kept, bad batches refused) and reads (whole batches, range errors, reads racing
appends, reads that must not wait)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mover.storage.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.storage.record_batch import validate_batches
from mover.testing.batches import make_batch
from mover.testing.log_records import TP, fill, read_all, seg_names, values
from mover.testing.records import read_records
from mover.testing.wait import wait_for


def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig())
    assert (log.log_end_offset, log.log_start_offset, log.size) == (0, 0, 0)
    assert seg_names(log.dir) == ["00000000000000000000.log"]
    b1 = make_batch([b"a", b"b"], timestamp_ms=100)
    info = log.append(b1)
    assert (info.first_offset, info.last_offset, info.max_timestamp, info.log_append_time) == (0, 1, 100, -1)
    info = log.append(make_batch([b"c"], base_offset=999, timestamp_ms=200) + make_batch([b"d", b"e"]))
    assert (info.first_offset, info.last_offset) == (2, 4)
    assert log.log_end_offset == 5 == log.high_watermark
    assert log.size == (log.dir / "00000000000000000000.log").stat().st_size
    assert read_all(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert read_records(log.dir) == read_all(log)  # the independent reader agrees
    log.close()


def test_append_rejects_bad_batches_and_writes_nothing(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=1000, max_message_bytes=500))
    log.append(make_batch([b"ok"]))
    size = log.size
    bad = bytearray(make_batch([b"x"]))
    bad[-1] ^= 1
    for buf in (bytes(bad), make_batch([b"x"])[:-2], b""):
        with pytest.raises(CorruptRecordError):
            log.append(buf)
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch([b"x" * 600]))
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch([b"x" * 300]) * 4)
    assert (log.size, log.log_end_offset) == (size, 1)
    log.close()


def test_append_without_assigning_offsets(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig())
    log.append(make_batch([b"a", b"b"], base_offset=10), assign_offsets=False)
    assert log.log_end_offset == 12
    with pytest.raises(CorruptRecordError):
        log.append(make_batch([b"c"], base_offset=11), assign_offsets=False)
    log.close()


def test_read_returns_whole_batches_and_range_errors(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(index_interval_bytes=200))
    sizes = []
    for i in range(20):
        b = make_batch(values(3, i * 3, 50))
        sizes.append(len(b))
        log.append(b)
    # An offset inside a batch returns the whole batch holding it.
    sl = log.read(31, 1 << 20)
    assert sl.position == sum(sizes[:10]) and sl.length == sum(sizes[10:])
    assert validate_batches(sl.read())[0].base_offset == 30
    # max_bytes cuts at a batch boundary...
    sl = log.read(0, sizes[0] + sizes[1] + 5)
    assert sl.length == sizes[0] + sizes[1]
    # ...but at least one batch comes back unless min_one is off.
    assert log.read(0, 10).length == sizes[0]
    assert log.read(0, 10, min_one=False).length == 0
    # The log end offset reads as empty; beyond it, or below the start, is out of range.
    assert log.read(60, 100).length == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert read_all(log, 0, max_bytes=1) == [(i, v) for i, v in enumerate(values(60, 0, 50))]
    assert len(log.active_segment.offset_index) > 3  # the index was used
    log.close()


def test_concurrent_reads_see_only_whole_batches(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=20_000, index_interval_bytes=300))
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                leo = log.log_end_offset
                if leo:
                    data = log.read(max(leo - 7, 0), 4000).read()
                    validate_batches(data)
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        fill(log, 200, per_batch=3, size=30)
    finally:
        stop.set()
        t.join()
    assert errors == []
    log.close()


def test_reads_never_return_batches_at_or_past_the_published_log_end(tmp_path: Path) -> None:
    """An append grows the segment before it publishes the new log end offset. A read racing it must stop at the
    log end it saw, or a consumer gets offsets past the end the broker reports and its next fetch is out of
    range (kcat then resets to the end and skips records)."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=50_000, index_interval_bytes=300))
    stop = threading.Event()
    past_end: list[tuple[int, int]] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            leo = log.log_end_offset
            if not leo:
                continue
            data = log.read(max(leo - 3, 0), 1 << 20).read()
            after = log.log_end_offset  # the bound the read promises is the end offset it saw, so at most this
            for header in validate_batches(data):
                if header.last_offset >= after:
                    past_end.append((header.last_offset, after))
            reads += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        fill(log, 3000, per_batch=2, size=20)
    finally:
        stop.set()
        t.join()
    assert reads > 0
    assert past_end == [], f"{len(past_end)} of {reads} reads returned records past the log end, e.g. {past_end[0]}"
    log.close()


def test_reads_that_must_not_wait_read_only_memory_and_the_page_cache(tmp_path: Path) -> None:
    """nowait reads (Fetch on the event loop): the same slices as a normal read when everything is cached;
    WouldBlock (not an OSError, which would fail the dir) when an index is not in memory or a page is not cached."""
    from mover.storage.errors import WouldBlock
    from mover.storage.files import read_cached

    tp = TopicPartition("nw", 0)
    log = Log.open(tmp_path / str(tp), tp, LogConfig(index_interval_bytes=256))
    try:
        for i in range(300):  # small batches: the walk over their lengths reads pages, not a pread per batch
            log.append(make_batch([b"v%d" % i]))
        for offset, max_bytes in ((0, 1 << 20), (0, 500), (123, 1000), (299, 10)):
            plain = log.read(offset, max_bytes)
            cached = log.read(offset, max_bytes, nowait=True)
            assert (cached.position, cached.length) == (plain.position, plain.length)
            plain.close()
            cached.close()
        assert [o for o, _ in read_all(log)] == list(range(300))

        log.active_segment.forget_indexes()
        with pytest.raises(WouldBlock):
            log.read(150, 1000, nowait=True)
        log.read(150, 1000).close()  # a normal read loads the index; then the loop may read again
        log.read(150, 1000, nowait=True).close()

        path = log.active_segment.log_path
        fd = os.open(path, os.O_RDONLY)
        try:
            assert read_cached(fd, 61, 0) == os.pread(fd, 61, 0)
            os.fsync(fd)
            tail = os.fstat(fd).st_size - 61

            def evicted() -> bool:
                # DONTNEED skips pages still in another CPU's LRU batch (the process may have moved since the
                # write, as it does beside other test workers): asked again until the page is out of the cache.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                try:
                    read_cached(fd, 61, tail)
                except WouldBlock:
                    return True
                return False

            wait_for(evicted, message="a nowait read of a page out of the page cache to raise WouldBlock")
        finally:
            os.close(fd)
    finally:
        log.close()
