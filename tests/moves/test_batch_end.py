"""batch_end.BatchEnd: the offset after the last whole batch in a segment's first bytes, found from the offset index and
a few batch headers, on real segment files. Checked against an independent walk of every batch (struct, not our
reader) at every position, with moverd's own index, Kafka's (one entry per multi-batch append), a preallocated one,
a stale one and none; and that the index keeps it to a few reads whatever the distance."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from mover.moves import batch_end
from mover.moves.batch_end import BatchEnd
from mover.storage.log import Log, LogConfig
from mover.storage.names import INDEX_SUFFIX, TopicPartition
from mover.testing.batches import make_batch
from mover.testing.records import batch_ends, last_whole_batch_end, segment_logs

TP = TopicPartition("t", 0)


def write_segment(tmp_path: Path, batches: int, per_batch: int = 1, value: int = 40,
                  interval: int = 4096) -> tuple[Path, list[tuple[int, int]]]:
    log = Log.open(tmp_path / str(TP), TP, LogConfig(index_interval_bytes=interval))
    batch = make_batch([b"v" * value] * per_batch)  # the offsets differ: the log assigns them
    try:
        for _ in range(batches):
            log.append(batch)
        log.flush()
    finally:
        log.close()
    (segment,) = segment_logs(tmp_path / str(TP))
    return segment, batch_ends(segment, 0)


def advance(segment: Path, end: BatchEnd, limit: int) -> None:
    fd = os.open(segment, os.O_RDONLY)
    try:
        end.advance(fd, segment.with_suffix(INDEX_SUFFIX), limit)
    finally:
        os.close(fd)


def check_every_chunk(segment: Path, ends: list[tuple[int, int]], chunk: int) -> None:
    size = ends[-1][0]
    end = BatchEnd(0)
    for limit in [*range(0, size, chunk), size]:
        advance(segment, end, limit)
        assert (end.position, end.offset) == last_whole_batch_end(ends, limit), f"at byte {limit}"


@pytest.mark.parametrize("chunk", [97, 4096, 65536, 300_000])
def test_moverd_index(tmp_path: Path, chunk: int) -> None:
    segment, ends = write_segment(tmp_path, 2000, per_batch=3)
    assert segment.with_suffix(INDEX_SUFFIX).stat().st_size > 0
    check_every_chunk(segment, ends, chunk)


def test_kafka_index_one_entry_per_multi_batch_append(tmp_path: Path) -> None:
    """Kafka's LogSegment.append writes one entry per append: the position of its first batch and the last offset of
    its last (a follower's append is many batches)."""
    segment, ends = write_segment(tmp_path, 3000)
    entries = []
    for i in range(1, len(ends) - 10, 37):  # appends of 10 batches, an entry every 37 batches
        position = ends[i][0]
        last = ends[i + 10][1] - 1
        entries.append(struct.pack(">ii", last, position))
    # Preallocated as Kafka does: zeros after the entries.
    segment.with_suffix(INDEX_SUFFIX).write_bytes(b"".join(entries) + bytes(8 * 1000))
    check_every_chunk(segment, ends, 70_000)


def test_stale_or_missing_index_only_costs_reads(tmp_path: Path) -> None:
    segment, ends = write_segment(tmp_path, 1500)
    index = segment.with_suffix(INDEX_SUFFIX)
    # Entries pointing inside batches, and at batches with other offsets: never trusted.
    index.write_bytes(b"".join(struct.pack(">ii", 5 * n, 1000 * n + 7) for n in range(1, 60))
                      + b"".join(struct.pack(">ii", 10 * n, ends[n][0]) for n in range(600, 700)))
    check_every_chunk(segment, ends, 65_536)
    index.unlink()
    check_every_chunk(segment, ends, 65_536)


def test_a_torn_or_corrupt_header_stops_short(tmp_path: Path) -> None:
    segment, ends = write_segment(tmp_path, 200)
    size = ends[-1][0]
    end = BatchEnd(0)
    advance(segment, end, size - 1)  # the last batch not whole yet
    assert (end.position, end.offset) == ends[-2]
    position = ends[100][0]
    with open(segment, "r+b") as f:
        f.seek(position + 16)
        f.write(b"\x07")  # magic 7
    end = BatchEnd(0)
    index = segment.with_suffix(INDEX_SUFFIX)
    index.unlink()
    advance(segment, end, size)
    assert (end.position, end.offset) == ends[100], "the walk stops before the batch it cannot read"


def test_the_index_keeps_it_to_a_few_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """40,000 small batches (~2.6 MB): one advance over all of them reads a few dozen times, not once per batch."""
    segment, ends = write_segment(tmp_path, 40_000, value=1)
    reads = 0
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        nonlocal reads
        reads += 1
        return real(fd, n, offset)

    monkeypatch.setattr(batch_end.os, "pread", counting)
    end = BatchEnd(0)
    limit = ends[-1][0] - 5
    advance(segment, end, limit)
    assert (end.position, end.offset) == last_whole_batch_end(ends, limit)
    assert reads < 200, f"{reads} reads for {len(ends) - 1} batches"
