"""Produce throughput and latency through a real moverd while the same partition is moved back and forth.

A kafka-python producer (acks=1, no idempotence, 1 KiB records) writes to one partition of a real moverd (the
daemon process, real sockets). Phase 1: alone for --seconds. Phase 2: the same, while the partition is moved
between the two log dirs continuously, unthrottled (--swaps moves). Prints records/s of both phases and their ratio
(goal: close to 1), and the send-to-acknowledgement latency p50 / p99 / max of both phases.
The partition is pre-filled with --mib MiB through raw Produce requests so each move copies real data.
Usage: python bench/produce_during_move.py [--seconds 5] [--swaps 20] [--mib 64]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaProducer  # noqa: E402

from bench.common import bench_root, summary  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import (  # noqa: E402
    RawClient,  # noqa: E402
    move,
    produce,
)
from mover.testing.records import dir_of  # noqa: E402

TOPIC = "bench"
RECORD = b"x" * 1024
# Records kept in flight by the producing loop before it waits for acknowledgements: enough to keep kafka-python's
# sender busy (its default buffer is 32 MiB), few enough that latency is not dominated by our own queueing.
WINDOW = 2000


def run_producer(bootstrap: str, stop: threading.Event) -> tuple[int, float, list[float]]:
    """Produce until `stop`; returns (records acknowledged, seconds, per-record latencies)."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, linger_ms=5,
                      batch_size=64 * 1024)
    lat: list[float] = []
    lock = threading.Lock()

    def acked(t0: float) -> object:
        def cb(_meta: object) -> None:
            with lock:
                lat.append(time.perf_counter() - t0)
        return cb

    t_start = time.perf_counter()
    sent = 0
    while not stop.is_set():
        for _ in range(WINDOW):
            p.send(TOPIC, RECORD).add_callback(acked(time.perf_counter()))
            sent += 1
        p.flush()
    elapsed = time.perf_counter() - t_start
    p.close()
    return len(lat), elapsed, lat


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds the process used so far, all threads (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--swaps", type=int, default=20)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    root = bench_root()
    try:
        with Moverd(root, props={"log.segment.bytes": 64 * 2**20}) as d:
            chunk = make_batch([b"x" * 1024] * 512)
            with RawClient(d.port) as c:
                for _ in range(args.mib * 2):
                    assert produce(c, TOPIC, 0, chunk, acks=1)["error_code"] == 0

            stop = threading.Event()
            timer = threading.Timer(args.seconds, stop.set)
            timer.start()
            pid = d.proc.pid
            c0 = cpu_seconds(pid)
            n0, t0, lat0 = run_producer(d.bootstrap, stop)
            c1 = cpu_seconds(pid)
            print(f"alone:        {n0 / t0:10.0f} records/s  ({n0} in {t0:.1f} s)")
            print(f"  moverd CPU per wall second: user {(c1[0] - c0[0]) / t0:.2f}, system {(c1[1] - c0[1]) / t0:.2f}")
            print(f"  latency {summary(lat0)}")

            stop = threading.Event()
            swap_times: list[float] = []

            def mover() -> None:
                with RawClient(d.port) as admin:
                    home = dir_of(d.dirs, TOPIC, 0)
                    other = next(p for p in d.dirs if p != home)
                    for i in range(args.swaps):
                        t = time.perf_counter()
                        move(admin, d.dirs, TOPIC, 0, other if i % 2 == 0 else home)
                        swap_times.append(time.perf_counter() - t)
                stop.set()

            mv = threading.Thread(target=mover)
            mv.start()
            c0 = cpu_seconds(pid)
            n1, t1, lat1 = run_producer(d.bootstrap, stop)
            c1 = cpu_seconds(pid)
            mv.join()
            print(f"during moves: {n1 / t1:10.0f} records/s  ({n1} in {t1:.1f} s, {len(swap_times)} swaps of "
                  f"~{args.mib} MiB+, mean {sum(swap_times) / len(swap_times):.2f} s per move)")
            print(f"  latency {summary(lat1)}")
            print(f"  moverd CPU per wall second: user {(c1[0] - c0[0]) / t1:.2f}, system {(c1[1] - c0[1]) / t1:.2f} "
                  f"(the moves' copies are system time; the producer shares the {os.cpu_count()} cores with it; load "
                  f"average {os.getloadavg()[0]:.1f})")
            # Each move logs how long its swap held the replica lock (appends to the partition wait on it).
            holds = [float(m) / 1000 for m in re.findall(r"replica lock held ([0-9.]+) ms",
                                                         d.log_file.read_text(errors="replace"))]
            if holds:
                print(f"  replica-lock hold per swap: {summary(holds)}")
            print(f"throughput ratio during/alone: {(n1 / t1) / (n0 / t0):.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
