"""Read a partition directory back with kafka-python's batch reader: an independent check of what we wrote."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from mover.storage.names import LOG_SUFFIX, parse_segment_file_name


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


def log_bytes(partition_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in segment_logs(partition_dir)}
