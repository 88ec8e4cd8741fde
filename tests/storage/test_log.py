from __future__ import annotations

import os
import shutil
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from mover.storage import log as log_module
from mover.storage.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.storage.open_files import open_files
from mover.storage.record_batch import validate_batches
from mover.testing.batches import make_batch
from mover.testing.records import read_records
from mover.testing.wait import wait_for

TP = TopicPartition("topic", 0)
TEN_MB = 10 * 1024 * 1024


def values(n: int, start: int = 0, size: int = 10) -> list[bytes]:
    return [f"{i:0{size}d}".encode() for i in range(start, start + n)]


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    """Every record from `start` through read(): whole batches, decoded by kafka-python."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes]] = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).read()
        assert data, f"empty read at {offset}"
        for h in validate_batches(data):  # whole batches, every CRC valid
            for record in DefaultRecordBatch(bytearray(data[:h.size])):
                if record.offset >= offset:
                    out.append((record.offset, bytes(record.value)))
            data = data[h.size:]
        offset = out[-1][0] + 1
    return out


def fill(log: Log, batches: int, per_batch: int = 5, size: int = 100, ts: int = 1000) -> list[bytes]:
    written = []
    for b in range(batches):
        vs = values(per_batch, b * per_batch, size)
        log.append(make_batch(vs, timestamp_ms=ts))
        written += vs
    return written


def seg_names(d: Path, suffix: str = ".log") -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(suffix))


# ---------------------------------------------------------------------- append and read


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


def test_roll_and_reopen(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=500)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    written = fill(log, 30)
    assert len(seg_names(log.dir)) > 5
    for seg in log.segment_files()[:-1]:
        assert seg.size <= 2000
        assert seg.log_path.stat().st_size == seg.size
    assert log.size == sum(s.size for s in log.segment_files())
    leo, size = log.log_end_offset, log.size
    assert log.recovery_point == log.segment_files()[-1].base_offset  # rolled segments are fsynced
    log.flush()
    assert log.recovery_point == leo
    log.close()
    again = Log.open(tmp_path / "topic-0", TP, cfg, recovery_point=leo)
    assert (again.log_end_offset, again.size) == (leo, size)
    assert read_all(again) == list(enumerate(written))
    assert read_records(again.dir) == list(enumerate(written))
    fill(again, 2)
    assert read_all(again)[-1][0] == leo + 9
    again.close()


def test_reopen_never_scans_closed_segments(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    fill(log, 20)
    files = log.segment_files()
    log.close()
    # Garbage in a closed segment is not noticed at open: only its size is taken.
    with open(files[0].log_path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 50)
    again = Log.open(tmp_path / "topic-0", TP, cfg)
    assert again.size == sum(f.size for f in files)
    again.close()


@pytest.mark.parametrize("damage", ["garbage", "half_batch", "zeros", "bad_crc"])
def test_torn_tail_is_truncated(tmp_path: Path, damage: str) -> None:
    cfg = LogConfig(segment_bytes=100_000, index_interval_bytes=100)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    fill(log, 10)
    good_size, good_leo = log.size, log.log_end_offset
    log.flush()
    last = make_batch(values(5, 1000, 100))
    log.append(last)
    index_entries = len(log.active_segment.offset_index)
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    with open(path, "r+b") as f:
        if damage == "garbage":
            f.truncate(good_size)
            f.seek(good_size)
            f.write(os.urandom(333))
        elif damage == "half_batch":
            f.truncate(good_size + len(last) // 2)
        elif damage == "zeros":
            f.truncate(good_size)
            f.truncate(good_size + 4096)  # a preallocated or lost tail reads as zeros
        elif damage == "bad_crc":
            f.seek(good_size + len(last) - 1)
            f.write(b"\x00" if last[-1] else b"\x01")
    reopened = Log.open(tmp_path / "topic-0", TP, cfg, recovery_point=good_leo)
    assert (reopened.log_end_offset, reopened.size) == (good_leo, good_size)
    assert path.stat().st_size == good_size
    assert len(reopened.active_segment.offset_index) <= index_entries
    assert all(p < good_size for _, p in reopened.active_segment.offset_index.entries())
    assert [o for o, _ in read_all(reopened)] == list(range(good_leo))
    # Appends continue where the valid data ends.
    assert reopened.append(make_batch([b"next"])).first_offset == good_leo
    reopened.close()
    assert read_records(tmp_path / "topic-0")[-1] == (good_leo, b"next")


def test_crc_is_not_checked_below_the_recovery_point(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig())
    fill(log, 3)
    leo = log.log_end_offset
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size - 1)
        f.write(b"?")
    assert Log.open(tmp_path / "topic-0", TP, LogConfig(), recovery_point=leo).log_end_offset == leo
    assert Log.open(tmp_path / "topic-0", TP, LogConfig(), recovery_point=0).log_end_offset == leo - 5


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


# ---------------------------------------------------------------------- timestamps and retention


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=600, index_interval_bytes=100))
    for i in range(30):
        log.append(make_batch([b"x" * 20, b"y" * 20], timestamps=[1000 + 10 * i, 1005 + 10 * i]))
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (1, 1005)
    assert log.offset_for_timestamp(1006) == (2, 1010)
    assert log.offset_for_timestamp(1153) == (31, 1155)
    assert log.offset_for_timestamp(1295) == (59, 1295)
    assert log.offset_for_timestamp(1296) is None
    assert log.offset_for_timestamp(-1) == (60, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)
    log.close()
    again = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=600))
    assert again.offset_for_timestamp(1153) == (31, 1155)
    again.close()


def test_retention_by_bytes(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2000, retention_bytes=5000, retention_ms=-1)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    written = fill(log, 40)
    before = log.segment_files()
    deleted = log.delete_retained_segments(10**15)
    assert deleted > 0
    after = log.segment_files()
    assert after == before[deleted:]
    assert log.size == sum(s.size for s in after) and log.size <= 5000 + after[0].size
    assert log.size - after[0].size < 5000
    assert log.log_start_offset == after[0].base_offset
    for s in before[:deleted]:
        assert not s.log_path.exists() and not s.log_path.with_suffix(".index").exists()
    assert seg_names(log.dir) == [s.log_path.name for s in after]
    assert read_all(log) == [(i, v) for i, v in enumerate(written) if i >= log.log_start_offset]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.delete_retained_segments(10**15) == 0
    log.close()


def test_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(retention_bytes=0, retention_ms=0))
    fill(log, 3)
    assert log.delete_retained_segments(10**15) == 0
    assert log.log_end_offset == 15
    log.close()


def test_retention_by_time(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1000, retention_ms=1000)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    for i in range(20):
        log.append(make_batch(values(3, size=50), timestamp_ms=10_000 + i * 100))
    segs = log.segment_files()
    assert len(segs) > 4
    assert log.delete_retained_segments(now_ms=10_000) == 0
    # Only segments whose largest timestamp is older than now - retention go, oldest first.
    n = log.delete_retained_segments(now_ms=11_500)
    assert 0 < n < len(segs) - 1
    assert log.log_start_offset == segs[n].base_offset
    assert log.delete_retained_segments(now_ms=10**9) == len(segs) - 1 - n
    assert len(log.segment_files()) == 1
    log.close()
    # Largest timestamps of closed segments come from the time index after a reopen.
    log = Log.open(tmp_path / "topic-1", TP, cfg)
    for i in range(20):
        log.append(make_batch(values(3, size=50), timestamp_ms=10_000 + i * 100))
    log.close()
    log = Log.open(tmp_path / "topic-1", TP, cfg)
    assert log.delete_retained_segments(now_ms=11_500) == n
    log.close()


def test_retention_falls_back_to_mtime(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=500, retention_ms=60_000)
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    fill(log, 5, per_batch=1, size=200, ts=-1)  # no timestamps at all
    log.close()
    segs = Log.open(tmp_path / "topic-0", TP, cfg).segment_files()
    os.utime(segs[0].log_path, (1, 1))
    log = Log.open(tmp_path / "topic-0", TP, cfg)
    mtime_ms = int(segs[1].log_path.stat().st_mtime * 1000)
    assert log.delete_retained_segments(now_ms=mtime_ms) == 1
    log.close()


# ---------------------------------------------------------------------- moves


def test_reload_after_copy(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=300)
    src = Log.open(tmp_path / "d1" / "topic-0", TP, cfg)
    written = fill(src, 10)
    (src.dir / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    shutil.copytree(src.dir, tmp_path / "d2" / "topic-0.move")
    # The copy is opened early (as a move does), then the source grows and rolls, then the rest is copied.
    future = Log.open(tmp_path / "d2" / "topic-0.move", TP, cfg)
    written += [b"more-%d" % i for i in range(36)]
    for i in range(12):
        src.append(make_batch(written[50 + 3 * i:53 + 3 * i]))
    for name in os.listdir(src.dir):
        shutil.copyfile(src.dir / name, future.dir / name)
    (tmp_path / "d2" / "topic-0.move").rename(tmp_path / "d2" / "topic-0")
    future.rename_dir(tmp_path / "d2" / "topic-0")
    future.reload_after_copy(src)
    assert (future.log_end_offset, future.size, future.log_start_offset, future.recovery_point) == (
        src.log_end_offset, src.size, src.log_start_offset, src.recovery_point)
    assert [(s.base_offset, s.size) for s in future.segment_files()] == [
        (s.base_offset, s.size) for s in src.segment_files()]
    assert future.segment_files()[0].log_path.parent == tmp_path / "d2" / "topic-0"
    assert read_all(future) == list(enumerate(written))
    more = make_batch([b"after"])
    future.append(more)
    src.append(more)
    for s, f in zip(src.segment_files(), future.segment_files(), strict=True):
        assert s.log_path.read_bytes() == f.log_path.read_bytes()
    src.close()
    future.close()
    reopened = Log.open(tmp_path / "d2" / "topic-0", TP, cfg)
    assert reopened.log_end_offset == src.log_end_offset
    assert (reopened.dir / "partition.metadata").exists()
    reopened.close()


def test_rename_dir_keeps_working(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=1000))
    fill(log, 5)
    new = tmp_path / "topic-0.0123456789abcdef0123456789abcdef.delete"
    os.rename(log.dir, new)
    log.rename_dir(new)
    assert all(s.log_path.parent == new for s in log.segment_files())
    fill(log, 5)
    assert [o for o, _ in read_all(log)] == list(range(50))
    log.close()


def _race_inside_rename(monkeypatch: pytest.MonkeyPatch, log: Log, new_dir: Path, work: Callable[[], object]) -> dict:
    """Rename `log`'s dir with `rename_to`, and run `work` on another thread inside the window between the rename on
    disk and the paths updated in memory; wait there until `work` either finished or blocked on the PathGuard.
    Returns {"result": ...} or {"error": ...}. Without the guard, a path-based `work` finishes inside the window,
    using the old name."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = work()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e

    t = threading.Thread(target=run)

    def rename_then_race(src: Path, dst: Path) -> None:
        os.rename(src, dst)
        t.start()
        wait_for(lambda: log.path_guard.waiting or not t.is_alive(), message="the racing operation to block or end")
        out["finished_inside_window"] = not t.is_alive()

    monkeypatch.setattr(log_module, "_rename", rename_then_race)
    log.rename_to(new_dir)
    t.join(30)
    assert not t.is_alive()
    return out


def test_a_roll_inside_a_rename_window_waits_and_lands_in_the_new_dir(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A swap renames a dir outside the replica lock while appends go on: an append that rolls (a new segment
    file and a dir fsync, by path) in that window must wait for the rename and create its file by the new name."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=2000))
    written = fill(log, 3)
    old_dir, new_dir = log.dir, tmp_path / "topic-0.0123456789abcdef0123456789abcdef-delete"
    big = values(10, 100, 150)  # does not fit what is left of the active segment: this append rolls
    out = _race_inside_rename(monkeypatch, log, new_dir, lambda: log.append(make_batch(big)))
    assert "error" not in out, out.get("error")
    assert not out["finished_inside_window"], "the roll did not wait for the rename"
    assert not old_dir.exists()
    assert len(seg_names(new_dir)) == 2 and log.active_segment.log_path.parent == new_dir
    assert [v for _, v in read_all(log)] == written + big
    log.close()


def test_a_rename_right_after_a_roll_takes_the_new_segment_along(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A roll fsyncs the dir for its new segment outside the PathGuard: a rename may come right then, and must find
    the new segment in the list (it joins under the guard), or its paths stay stale and its first index entry is
    created by the old name."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=2000, index_interval_bytes=1))
    written = fill(log, 3)
    new_dir = tmp_path / "topic-0-moved"
    real_fsync = os.fsync

    def fsync_then_rename(fd: int) -> None:
        real_fsync(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode) and not new_dir.exists():
            log.rename_to(new_dir)  # the roll's dir fsync: the guard is free, the segment made

    monkeypatch.setattr(os, "fsync", fsync_then_rename)
    big = values(10, 100, 150)
    log.append(make_batch(big))  # rolls
    monkeypatch.undo()
    assert new_dir.exists() and log.active_segment.log_path.parent == new_dir
    more = fill(log, 3)  # index entries for the new segment: its index file is created by path
    assert [v for _, v in read_all(log)] == written + big + more
    assert len(seg_names(new_dir, ".index")) == len(log.segments()) >= 2
    log.close()


def test_an_index_load_inside_a_rename_window_reads_the_renamed_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch's lazy index load reads the file by path: inside a rename window it waits and reads the renamed
    file, instead of taking a missing file for an empty index (which the next append would then overwrite)."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=4000, index_interval_bytes=100))
    fill(log, 20)
    assert len(log.segments()) > 2
    index = log.segments()[0].offset_index  # a rolled segment's, as a fetch of older records loads it
    entries = index.entries()
    assert len(entries) >= 3
    index.forget()  # as a swap's copy or a restart leaves it: loaded again on first use
    out = _race_inside_rename(monkeypatch, log, tmp_path / "topic-0-moved", index.entries)
    assert "error" not in out, out.get("error")
    assert not out["finished_inside_window"], "the index load did not wait for the rename"
    assert out["result"] == entries
    log.close()


# ---------------------------------------------------------------------- a dir written by a real Kafka broker


def kafka_partition_dir(d: Path) -> dict[str, bytes]:
    """Lay out a partition dir the way a Kafka broker leaves it after an unclean shutdown: a closed segment
    with trimmed indexes, an active one with preallocated 10 MB zero-filled indexes, and Kafka's other
    files."""
    d.mkdir(parents=True)

    def batch(i: int, ts: int) -> bytes:
        return make_batch(values(2, i * 2), base_offset=i * 2, timestamp_ms=ts)

    first = b"".join(batch(i, 5000 + i) for i in range(5))
    second = b"".join(batch(i, 6000 + i) for i in range(5, 9))
    (d / "00000000000000000000.log").write_bytes(first)
    hs = validate_batches(first)
    (d / "00000000000000000000.index").write_bytes(
        struct.pack(">ii", hs[2].last_offset, sum(h.size for h in hs[:2])))
    (d / "00000000000000000000.timeindex").write_bytes(struct.pack(">qi", 5004, 9))
    (d / "00000000000000000010.log").write_bytes(second)
    hs2 = validate_batches(second)
    with open(d / "00000000000000000010.index", "wb") as f:
        f.write(struct.pack(">ii", hs2[2].last_offset - 10, hs2[0].size + hs2[1].size))
        f.truncate(TEN_MB)
    with open(d / "00000000000000000010.timeindex", "wb") as f:
        f.write(struct.pack(">qi", 6007, hs2[2].last_offset - 10))
        f.truncate(TEN_MB)
    foreign = {
        "partition.metadata": b"version: 0\ntopic_id: rEr1mdP9SJGJr8Kvm1ugIA\n",
        "leader-epoch-checkpoint": b"0\n1\n0 0\n",
        "00000000000000000000.snapshot": b"\x00\x01snapshot-bytes",
        "00000000000000000010.snapshot": b"\x00\x01more",
    }
    for name, data in foreign.items():
        (d / name).write_bytes(data)
    return foreign


def test_opens_a_kafka_written_dir_and_keeps_its_files(tmp_path: Path) -> None:
    d = tmp_path / "topic-0"
    foreign = kafka_partition_dir(d)
    index_before = (d / "00000000000000000000.index").read_bytes()
    log = Log.open(d, TP, LogConfig(index_interval_bytes=100), recovery_point=10, log_start_offset=0)
    assert (log.log_end_offset, log.log_start_offset) == (18, 0)
    assert [s.base_offset for s in log.segment_files()] == [0, 10]
    assert (d / "00000000000000000010.index").stat().st_size == TEN_MB  # untouched by opening
    assert read_all(log) == [(i, v) for i, v in enumerate(values(18))]
    assert log.read(15, 1 << 20).position > 0
    assert log.offset_for_timestamp(5003) == (6, 5003)
    assert log.offset_for_timestamp(6006) == (12, 6006)
    assert log.offset_for_timestamp(6007) == (14, 6007)
    info = log.append(make_batch(values(2, 18)) + make_batch(values(2, 20)) + make_batch(values(2, 22)))
    assert (info.first_offset, info.last_offset) == (18, 23)
    log.flush()
    log.close()
    for name, data in foreign.items():
        assert (d / name).read_bytes() == data
    assert (d / "00000000000000000000.index").read_bytes() == index_before
    assert (d / "00000000000000000010.index").stat().st_size == TEN_MB  # appended in place, not trimmed
    assert read_records(d) == [(i, v) for i, v in enumerate(values(24))]
    again = Log.open(d, TP, LogConfig(), recovery_point=24)
    assert again.log_end_offset == 24
    entries = again.active_segment.offset_index.entries()
    kafka_entry = struct.unpack(">ii", (d / "00000000000000000010.index").read_bytes()[:8])
    assert entries[0] == kafka_entry and len(entries) > 1  # Kafka's entry kept, ours appended after it
    again.close()


def test_log_start_offset_is_clamped(tmp_path: Path) -> None:
    d = tmp_path / "topic-0"
    kafka_partition_dir(d)
    assert Log.open(d, TP, LogConfig(), log_start_offset=0).log_start_offset == 0
    assert Log.open(d, TP, LogConfig(), log_start_offset=12).log_start_offset == 12
    assert Log.open(d, TP, LogConfig(), log_start_offset=99).log_start_offset == 18
    empty = Log.open(tmp_path / "topic-1", TP, LogConfig(), log_start_offset=7)
    assert (empty.log_start_offset, empty.log_end_offset) == (7, 7)
    assert seg_names(empty.dir) == ["00000000000000000007.log"]


def test_open_and_reload_read_no_index_and_no_closed_segment(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening 10,000 partitions must be cheap, and reload_after_copy runs under the replica lock."""
    from mover.storage import log_segment
    from mover.storage.index_file import IndexFile

    d = tmp_path / "topic-0"
    kafka_partition_dir(d)

    def no_index(self: IndexFile) -> None:
        raise AssertionError(f"{self.path} was read")

    monkeypatch.setattr(IndexFile, "_read_entries", no_index)
    log = Log.open(d, TP, LogConfig(), recovery_point=18)
    assert log.log_end_offset == 18
    copy = tmp_path / "copy" / "topic-0"
    shutil.copytree(d, copy)
    future = Log.open(copy, TP, LogConfig(), recovery_point=18)

    def no_recover(self: object, *args: object) -> int:
        raise AssertionError("reload scanned a segment")

    monkeypatch.setattr(log_segment.LogSegment, "recover", no_recover)
    monkeypatch.setattr(log_segment, "read_exactly", no_recover)
    future.reload_after_copy(log)
    assert (future.log_end_offset, future.size) == (log.log_end_offset, log.size)
    log.close()
    future.close()


def test_open_walks_the_last_segment_through_a_descriptor_of_its_own(tmp_path: Path) -> None:
    """Start-up opens every partition once: the walk of its last segment must not go through the broker's LRU of open
    files, which would only close the files again (and whose lock the opening threads would queue for)."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig())
    fill(log, 3)
    leo = log.log_end_offset
    log.close()
    files = open_files()
    opens = files.opens
    again = Log.open(tmp_path / "topic-0", TP, LogConfig())  # recovery point 0: every batch CRC-checked
    assert (again.log_end_offset, again.size) == (leo, log.size)
    assert not again.active_segment.file.is_open
    assert files.opens == opens
    assert read_all(again)[-1][0] == leo - 1  # the first read opens it through the LRU
    assert again.active_segment.file.is_open
    again.close()


def test_open_of_a_file_raises_os_error(tmp_path: Path) -> None:
    (tmp_path / "topic-0").write_text("not a dir")
    with pytest.raises(OSError):
        Log.open(tmp_path / "topic-0", TP, LogConfig())


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
