"""Shared helpers for the benchmarks: build partitions fast, time things, print ratios."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch


def bench_root() -> Path:
    base = Path(os.environ.get("BENCH_DIR", "/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="jbod-bench-", dir=base))


@contextmanager
def scratch_root() -> Iterator[Path]:
    """bench_root(), removed when the bench ends, however it ends."""
    root = bench_root()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def manager(dirs: list[Path], **props: object) -> LogManager:
    p = {"log.dirs": ",".join(map(str, dirs)), "log.segment.delete.delay.ms": 0}
    p.update(props)
    m = LogManager(BrokerConfig.from_properties({k: str(v) for k, v in p.items()}))
    m.startup()
    return m


def fill(m: LogManager, tp: TopicPartition, total_bytes: int, batch_bytes: int = 1 << 20) -> None:
    batch = make_batch([b"x" * batch_bytes])
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
