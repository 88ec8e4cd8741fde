"""Records through one Log (mover.storage.log) for its tests (tests/storage/test_log_*.py): numbered values, batches
of them appended, and every record read back through `Log.read`, whole batches decoded by kafka-python (an
independent reader: mover.testing.records reads the files themselves).

    log = Log.open(tmp_path / "topic-0", TP, LogConfig())
    written = fill(log, 10)                  # 10 batches of 5 values of 100 bytes
    assert read_all(log) == list(enumerate(written))
    seg_names(log.dir)                       # ["00000000000000000000.log", ...]
"""

from __future__ import annotations

import os
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from mover.storage.log import Log
from mover.storage.names import TopicPartition
from mover.storage.record_batch import validate_batches
from mover.testing.batches import make_batch

TP = TopicPartition("topic", 0)


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
