"""Log: offsets by timestamp, and retention by bytes, by time (largest timestamps, else the mtime), never of the active
segment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mover.storage.errors import OffsetOutOfRangeError
from mover.storage.log import Log, LogConfig
from mover.testing.batches import make_batch
from mover.testing.log_records import TP, fill, read_all, seg_names, values


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
