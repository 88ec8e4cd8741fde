"""Shared helpers for the benchmarks: build partitions fast, time things, print ratios."""

from __future__ import annotations

import os
import statistics
import struct
import tempfile
import time
from pathlib import Path

import crc32c

from mover.config import BrokerConfig
from mover.log_manager import LogManager
from mover.storage.names import TopicPartition


def raw_batch(payload_size: int, records: int = 1) -> bytes:
    """A valid v2 record batch of about payload_size bytes, built directly (kafka-python is too slow for GiBs)."""
    per = max(1, payload_size // records)
    body = bytearray()
    value = b"x" * per
    for i in range(records):
        rec = bytearray()
        rec += b"\x00"  # attributes
        rec += _varint(0)  # timestamp delta
        rec += _varint(i)  # offset delta
        rec += _varint(-1)  # key length: null
        rec += _varint(len(value)) + value
        rec += _varint(0)  # headers
        body += _varint(len(rec)) + rec
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 0, records - 1, now, now, -1, -1, -1, records) + body
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def _varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def bench_root() -> Path:
    base = Path(os.environ.get("BENCH_DIR", "/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="jbod-bench-", dir=base))


def manager(dirs: list[Path], **props: object) -> LogManager:
    p = {"log.dirs": ",".join(map(str, dirs)), "log.segment.delete.delay.ms": 0}
    p.update(props)
    m = LogManager(BrokerConfig.from_properties({k: str(v) for k, v in p.items()}))
    m.startup()
    return m


def fill(m: LogManager, tp: TopicPartition, total_bytes: int, batch_bytes: int = 1 << 20) -> None:
    batch = raw_batch(batch_bytes)
    written = 0
    while written < total_bytes:
        m.append(tp, batch)
        written += len(batch)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def summary(values: list[float]) -> str:
    return (f"p50 {pct(values, 50) * 1000:.3f} ms, p99 {pct(values, 99) * 1000:.3f} ms, "
            f"max {max(values) * 1000:.3f} ms (n={len(values)}, mean {statistics.mean(values) * 1000:.3f} ms)")


def drop_caches() -> None:
    """Cold-cache runs where allowed (root on a real machine); silently warm otherwise."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass
