"""Unthrottled move of a 2 GiB partition against `cp -r` of the same dir on the same file system, alternately
(which of the two goes first in a run alternates too).

Prints each run and the throughput ratio (mover / cp); the goal is at least 0.9.
Usage: python bench/move_vs_cp.py [--gib 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, drop_caches, fill, manager  # noqa: E402
from mover.storage.names import TopicPartition  # noqa: E402
from mover.testing.log_manager import alter_replica_log_dir, pending_deletes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    root = bench_root()
    d1, d2 = root / "d1", root / "d2"
    m = manager([d1, d2])
    tp = TopicPartition("big", 0)
    m.remembered[tp] = d1
    m.create_topic("big", 1)
    total = int(args.gib * 2**30)
    fill(m, tp, total)
    m.log_dirs.flush_all()
    size = m.replicas[tp].log.size
    print(f"partition: {size / 2**30:.2f} GiB in {len(m.replicas[tp].log.segment_files())} segments")
    mover_rates, cp_rates = [], []
    try:
        for run in range(args.runs):
            src = m.replicas[tp].log_dir
            dst = d2 if src == d1 else d1

            def move_once(dst: Path = dst) -> float:
                drop_caches()
                t0 = time.perf_counter()
                assert alter_replica_log_dir(m, tp, str(dst)) == 0
                move = m.replicas[tp].move
                move.wait()
                dt = time.perf_counter() - t0
                assert move.state.value == "completed", move.error
                m.log_dirs.flush_all()
                while pending_deletes(m):
                    time.sleep(0.05)
                return dt

            def cp_once() -> float:
                # The partition's dir as it is now (before or after this run's move: the same bytes).
                cp_dst = root / "cp-copy"
                drop_caches()
                t0 = time.perf_counter()
                subprocess.run(["cp", "-r", str(m.replicas[tp].log_dir / "big-0"), str(cp_dst)], check=True)
                subprocess.run(["sync", "-f", str(cp_dst)], check=True)
                dt = time.perf_counter() - t0
                shutil.rmtree(cp_dst)
                return dt

            if run == 0:
                # Not timed: on this VM the first 2 GiB written in a run land in page cache the machine must map
                # afresh (docs/data-path.md, "Seventh round"), which made whichever went first 20-45% slower (cp
                # too: 650 against 820-930 MiB/s when it went first).
                cp_once()
            # And the order alternates, so neither always writes first after the other's deletes.
            if run % 2 == 0:
                dt, dt_cp = move_once(), cp_once()
            else:
                dt_cp, dt = cp_once(), move_once()
            mover_rates.append(size / dt)
            cp_rates.append(size / dt_cp)
            first = "mover" if run % 2 == 0 else "cp"
            print(f"run {run + 1}: mover {size / dt / 2**20:8.1f} MiB/s   cp -r {size / dt_cp / 2**20:8.1f} MiB/s"
                  f"   ({first} first)")
    finally:
        m.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    ratio = (sum(mover_rates) / len(mover_rates)) / (sum(cp_rates) / len(cp_rates))
    print(f"throughput ratio mover/cp: {ratio:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
