"""Replica-lock hold time during swaps with concurrent appenders, and the worst append latency they saw.

Four appender threads write 1 KiB-record batches to 4 partitions while every partition is moved back and forth
N times (unthrottled). Prints lock hold p50 / p99 / max over all swaps (goal: p99 under 5 ms) and append latency
p50 / p99 / max; the anchor is the same appenders' latency with no moves running.

The appenders write up to 16 MiB/s per partition and retention is paused while a partition moves, so each move copies
more than the last; when the disk is shared (the test suite beside it) a copy can fall behind the appends and the
run grow without end (one such run was still going after 15 minutes, with 55 GB appended, and filled the disk the
suite beside it used). So the appenders stop after --max-append-mib; after --max-seconds they stop too, the moves in
flight finish, no new round starts, and the swaps done so far are reported.
Usage: python bench/lock_hold.py [--swaps 10] [--max-seconds 600] [--max-append-mib 4096]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, fill, manager, summary  # noqa: E402
from mover.storage.names import TopicPartition  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402

BATCH_KIB = 16


def appenders(m, tps, stop: threading.Event, max_batches: int) -> list[float]:  # noqa: ANN001
    lat: list[float] = []
    batch = make_batch([b"x" * 1024] * BATCH_KIB)

    def work(tp: TopicPartition) -> None:
        while not stop.is_set() and len(lat) < max_batches:
            t = time.perf_counter()
            m.append(tp, batch)
            lat.append(time.perf_counter() - t)
            time.sleep(0.001)

    ts = [threading.Thread(target=work, args=(tp,)) for tp in tps]
    for t in ts:
        t.start()
    return lat, ts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--swaps", type=int, default=10)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--max-append-mib", type=int, default=4096)
    args = ap.parse_args()
    root = bench_root()
    d1, d2 = root / "d1", root / "d2"
    m = manager([d1, d2], **{"num.replica.alter.log.dirs.threads": 4, "log.segment.bytes": 16 * 2**20})
    tps = [TopicPartition("t", p) for p in range(4)]
    for tp in tps:
        m.remembered[tp] = d1
    m.create_topic("t", 4)
    for tp in tps:
        fill(m, tp, args.mib * 2**20)
    try:
        max_batches = args.max_append_mib * 1024 // BATCH_KIB
        stop = threading.Event()
        base_lat, ts = appenders(m, tps, stop, max_batches)
        time.sleep(2)
        stop.set()
        for t in ts:
            t.join()
        stop = threading.Event()
        lat, ts = appenders(m, tps, stop, max_batches)
        holds = []
        deadline = time.monotonic() + args.max_seconds
        rounds = 0
        for i in range(args.swaps):
            if time.monotonic() > deadline:
                break
            target = d2 if i % 2 == 0 else d1
            messages: dict[TopicPartition, str] = {}
            codes, _ = m.alter_replica_log_dirs([(tp, str(target)) for tp in tps], messages=messages)
            if any(codes.values()):
                raise SystemExit(f"AlterReplicaLogDirs refused in round {i + 1}: {codes} {messages}")
            moves = [m.replicas[tp].move for tp in tps]
            for mv in moves:
                while mv is not None and not mv.wait(1.0):
                    if time.monotonic() > deadline:
                        stop.set()  # the copies catch up once nothing is appended
            holds += [mv.lock_hold_seconds for mv in moves if mv is not None and mv.lock_hold_seconds is not None]
            rounds += 1
        stop.set()
        for t in ts:
            t.join()
    finally:
        m.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    ended = "" if rounds == args.swaps else f" (stopped after {rounds} of {args.swaps} rounds: --max-seconds)"
    print(f"swaps: {len(holds)}{ended}; appended {len(lat) * BATCH_KIB / 1024:,.0f} MiB during the moves"
          f"{' (--max-append-mib reached)' if len(lat) >= max_batches else ''}")
    print(f"replica-lock hold during swaps: {summary(holds)} (goal p99 < 5 ms)")
    print(f"append latency during moves:    {summary(lat)}")
    print(f"append latency without moves:   {summary(base_lat)}")
    print(f"worst append latency ratio (moves / no moves): {max(lat) / max(base_lat):.1f}")


if __name__ == "__main__":
    main()
