"""Start-up with 10,000 partitions over 4 log dirs, 100 of them mid-move: time until the LogManager is ready.

Goal: under 5 s (a real Kafka 2.3.0 broker took 12.4 s to restart with 10,000 partitions,
docs/kafka-compat.md#a-real-kafka-230-brokers-figures-the-bench-anchors). The
anchor, run in the same process on the same files, is `du -s` of the log dirs: the cost of merely looking at
every file once.
Usage: python bench/startup.py [--partitions 10000] [--moving 100]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.config import BrokerConfig  # noqa: E402
from mover.log_manager import LogManager  # noqa: E402
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
        m = LogManager(config)
        t0 = time.perf_counter()
        m.startup()
        ready = time.perf_counter() - t0
        resumed = len(m.moves())
        m.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.partitions} partitions over 4 dirs, {args.moving} mid-move ({resumed} moves resumed)")
    print(f"time until ready: {ready:.2f} s (goal < 5 s; Kafka 2.3.0: 12.4 s)")
    print(f"anchor du -s of the same dirs: {du:.2f} s; ratio start-up / du: {ready / du:.1f}")


if __name__ == "__main__":
    main()
