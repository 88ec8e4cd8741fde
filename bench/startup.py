"""Start-up with 10,000 partitions over 4 log dirs, 100 of them mid-move: time until the LogManager is ready, the
resident memory it added and the descriptors it holds open (bounded by the LRU of open files, not the partitions).

Goal: under 5 s (a real Kafka 2.3.0 broker took 12.4 s to restart with 10,000 partitions,
docs/kafka-compat.md#a-real-kafka-230-brokers-figures-the-bench-anchors). The
anchor, run in the same process on the same files, is `du -s` of the log dirs: the cost of merely looking at
every file once.
Usage: python bench/startup.py [--partitions 10000] [--moving 100]; 100,000 partitions: --partitions 100000 (building
them takes minutes on a busy disk).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.config import BrokerConfig  # noqa: E402
from mover.log_manager import LogManager  # noqa: E402
from mover.storage.open_files import capacity_for_limit, fd_count, open_files  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402


def build(dirs: list[Path], partitions: int, moving: int) -> None:
    batch = bytearray(make_batch([b"x" * 128] * 4))
    for d in dirs:
        d.mkdir(parents=True)
    for p in range(partitions):
        d = dirs[p % len(dirs)]
        pdir = d / f"topic{p // 100}-{p % 100}"
        pdir.mkdir()
        seg = bytearray()
        for i in range(8):
            batch[0:8] = (i * 4).to_bytes(8, "big")
            seg += batch
        (pdir / "00000000000000000000.log").write_bytes(seg)
        (pdir / "00000000000000000000.index").write_bytes(b"")
        (pdir / "00000000000000000000.timeindex").write_bytes(b"")
        if p < moving:
            mdir = dirs[(p + 1) % len(dirs)] / f"topic{p // 100}-{p % 100}.move"
            mdir.mkdir()
            (mdir / "00000000000000000000.log").write_bytes(seg[: len(seg) // 2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--moving", type=int, default=100)
    ap.add_argument("--nofile", type=int, default=4096,
                    help="run under this soft descriptor limit and append to / read every partition once")
    args = ap.parse_args()
    root = bench_root()
    dirs = [root / f"d{i}" for i in range(1, 5)]
    build(dirs, args.partitions, args.moving)
    config = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs)),
                                           "intra.broker.throttled.rate": "1"})
    try:
        t0 = time.perf_counter()
        subprocess.run(["du", "-s", *map(str, dirs)], check=True, capture_output=True)
        du = time.perf_counter() - t0
        rss0, fds0 = _rss_mb(), fd_count()
        m = LogManager(config)
        t0 = time.perf_counter()
        m.startup()
        ready = time.perf_counter() - t0
        rss, fds = _rss_mb() - rss0, fd_count() - fds0
        resumed = len(m.moves())
        capacity = open_files().capacity
        touched, peak = _touch_all(m, args.nofile)
        m.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.partitions} partitions over 4 dirs, {args.moving} mid-move ({resumed} moves resumed)")
    print(f"time until ready: {ready:.2f} s (goal < 5 s; Kafka 2.3.0: 12.4 s)")
    print(f"anchor du -s of the same dirs: {du:.2f} s; ratio start-up / du: {ready / du:.1f}")
    print(f"resident memory added: {rss:.0f} MB ({rss * 1024 / args.partitions:.1f} KB per partition); "
          f"descriptors held open: {fds} (LRU capacity {capacity}; Kafka: one or more per segment)")
    print(f"under ulimit -n {args.nofile}: appended to and read {touched} partitions, at most {peak} descriptors open "
          f"(LRU capacity {capacity_for_limit(args.nofile)})")


def _touch_all(m: LogManager, nofile: int) -> tuple[int, int]:
    """Under a soft limit of `nofile` descriptors (the LRU sized from it, as moverd does), append a batch to every
    partition and read it back: every partition's files opened, closed by the LRU, reopened. Returns (partitions
    touched, the most descriptors the process held)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    open_files().set_capacity(capacity_for_limit(nofile))
    data = make_batch([b"touch"])
    peak = 0
    try:
        for i, tp in enumerate(list(m.replicas)):
            if m.replicas[tp].move is not None:
                continue
            info = m.append(tp, data)
            _, found = m.read(tp, info.first_offset, 1 << 20)
            found.close()
            if i % 500 == 0:
                peak = max(peak, fd_count())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return len(m.replicas), max(peak, fd_count())


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    main()
