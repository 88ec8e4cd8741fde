"""Log.open: a reopened log (rolled segments, a torn tail truncated, CRCs checked above the recovery point only), a
dir written by a real Kafka broker, and what opening reads (no index, no closed segment, its own descriptor)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from mover.storage.log import Log, LogConfig
from mover.storage.open_files import open_files
from mover.storage.record_batch import validate_batches
from mover.testing.batches import make_batch
from mover.testing.log_records import TP, fill, read_all, seg_names, values
from mover.testing.records import read_records

TEN_MB = 10 * 1024 * 1024


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
