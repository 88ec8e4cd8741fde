from __future__ import annotations

import struct
from pathlib import Path

from mover.storage.offset_index import OffsetIndex
from mover.storage.time_index import TimeIndex

TEN_MB = 10 * 1024 * 1024


def test_offset_index_append_lookup_reload(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100)
    assert idx.lookup(150) is None
    for rel, pos in ((5, 400), (10, 900), (20, 2000)):
        idx.append_entry(100 + rel, pos)
    assert idx.lookup(99) is None
    assert idx.lookup(104) is None
    assert idx.lookup(105) == (105, 400)
    assert idx.lookup(119) == (110, 900)
    assert idx.lookup(10**9) == (120, 2000)
    idx.flush()
    idx.close()
    assert path.read_bytes() == struct.pack(">iiiiii", 5, 400, 10, 900, 20, 2000)
    again = OffsetIndex(path, 100)
    assert again.entries() == [(5, 400), (10, 900), (20, 2000)]


def test_preallocated_index_ends_at_the_zeros_and_is_not_truncated(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.write(struct.pack(">iiii", 3, 100, 7, 300))
        f.truncate(TEN_MB)
    idx = OffsetIndex(path, 0)
    assert idx.entries() == [(3, 100), (7, 300)]
    assert idx.lookup(6) == (3, 100)
    assert path.stat().st_size == TEN_MB  # reading never trims Kafka's file
    idx.append_entry(9, 500)  # written in place over the zeros
    idx.close()
    assert path.stat().st_size == TEN_MB
    assert OffsetIndex(path, 0).entries() == [(3, 100), (7, 300), (9, 500)]


def test_entries_end_at_the_first_non_increasing_one(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiiiii", 3, 100, 7, 300, 5, 400) + b"\0" * 64)
    assert OffsetIndex(path, 0).entries() == [(3, 100), (7, 300)]
    empty = tmp_path / "empty.index"
    empty.write_bytes(b"\0" * 4096)
    assert OffsetIndex(empty, 0).entries() == []
    assert OffsetIndex(tmp_path / "missing.index", 0).entries() == []


def test_truncate_cuts_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, 0)
    for rel, pos in ((1, 10), (2, 20), (3, 30)):
        idx.append_entry(rel, pos)
    idx.truncate_from_position(20)
    assert idx.entries() == [(1, 10)]
    idx.close()
    assert path.stat().st_size == 8


def test_time_index(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    idx = TimeIndex(path, 50)
    idx.maybe_append(1000, 55)
    idx.maybe_append(1000, 56)  # not larger: skipped, as in Kafka
    idx.maybe_append(2000, 60)
    assert idx.entries() == [(1000, 5), (2000, 10)]
    assert idx.lookup(999) is None
    assert idx.lookup(1500) == (1000, 55)
    idx.close()
    with open(path, "r+b") as f:
        f.truncate(TEN_MB)
    again = TimeIndex(path, 50)
    assert again.largest_timestamp() == 2000
    assert path.stat().st_size == TEN_MB
    trimmed = tmp_path / "t2.timeindex"
    trimmed.write_bytes(struct.pack(">qiqi", 10, 1, 20, 2))
    assert TimeIndex(trimmed, 0).largest_timestamp() == 20
