"""Partitions on disk, written and read back independently of the broker: `write_partition` lays down a partition
before a daemon starts (it finds it at start-up, as Kafka does) with batches built by kafka-python; `read_records`
reads a partition directory back with kafka-python's batch reader, checking every CRC; `batch_ends` walks a segment's
batches with struct."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from kafka.record.default_records import DefaultRecordBatch

from mover.storage.log import Log, LogConfig
from mover.storage.names import LOG_SUFFIX, TopicPartition, parse_segment_file_name
from mover.testing.batches import make_batch

# A 1 MiB segment makes a few-MB partition span several segments, as a real one does, without writing gigabytes.
SEGMENT_BYTES = 1 << 20
RECORD_BYTES = 1000
RECORDS_PER_BATCH = 10


class WrittenPartition(NamedTuple):
    path: Path  # the partition directory, <log dir>/<topic>-<partition>
    size: int  # bytes of its .log files, as DescribeLogDirs reports them
    values: list[bytes]  # every record value written, in offset order


def write_partition(log_dir: Path, tp: TopicPartition, batches: int, *, records_per_batch: int = RECORDS_PER_BATCH,
                    record_bytes: int = RECORD_BYTES, segment_bytes: int = SEGMENT_BYTES) -> WrittenPartition:
    """Append `batches` batches of `records_per_batch` values to `<log_dir>/<tp>` (created or extended) of a stopped
    daemon, flushed. Each value is unique, `<batch>-<record>` padded with "v" to `record_bytes`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = Log.open(log_dir / str(tp), tp, LogConfig(segment_bytes=segment_bytes))
    try:
        values: list[bytes] = []
        for b in range(batches):
            vs = [f"{b}-{i}".encode().ljust(record_bytes, b"v") for i in range(records_per_batch)]
            log.append(make_batch(vs))
            values += vs
        log.flush()
        return WrittenPartition(log.dir, log.size, values)
    finally:
        log.close()


def segment_logs(partition_dir: Path) -> list[Path]:
    names = []
    for name in os.listdir(partition_dir):
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            names.append((parsed[0], partition_dir / name))
    return [p for _, p in sorted(names)]


def read_records(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(offset, value) of every record, checking every batch's CRC-32C and that offsets only grow."""
    out: list[tuple[int, bytes]] = []
    for path in segment_logs(partition_dir):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            assert pos + 12 <= len(data), f"torn batch header in {path} at {pos}"
            (length,) = struct.unpack_from(">i", data, pos + 8)
            end = pos + 12 + length
            assert end <= len(data), f"torn batch in {path} at {pos}"
            batch = DefaultRecordBatch(bytes(data[pos:end]))
            assert batch.validate_crc(), f"bad CRC in {path} at {pos}"
            for record in batch:
                assert not out or record.offset > out[-1][0], f"offsets go backwards in {path}"
                out.append((record.offset, bytes(record.value)))
            pos = end
    return out


def batch_ends(segment: Path, base_offset: int) -> list[tuple[int, int]]:
    """(position after, offset after) of every batch of a segment file, from (0, base_offset): read with struct from
    the v2 layout (base_offset i64, batch_length i32 at 8, last_offset_delta i32 at 23), not by our reader."""
    data = segment.read_bytes()
    out, pos = [(0, base_offset)], 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        pos += 12 + length
        out.append((pos, base + delta + 1))
    return out


def last_whole_batch_end(ends: list[tuple[int, int]], limit: int) -> tuple[int, int]:
    """Of `batch_ends`' list, the (position, offset) after the last whole batch within the first `limit` bytes."""
    return max(e for e in ends if e[0] <= limit)


def log_bytes(partition_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in segment_logs(partition_dir)}


def dir_of(dirs: list[Path], topic: str, partition: int) -> Path:
    """The log dir holding the live copy of the partition (exactly one may)."""
    found = [d for d in dirs if (d / f"{topic}-{partition}").is_dir()]
    assert len(found) == 1, found
    return found[0]
