"""Produce throughput and latency through a real moverd while the same partition is moved back and forth.

A kafka-python producer (acks=1, no idempotence, 1 KiB records) writes to one partition of a real moverd (the
daemon process, real sockets) without pause for the whole run. Meanwhile, --rounds times: a gap that counts for
nothing (what a burst left behind settles), an "alone" window of --alone seconds, then a burst of --per-round moves
of the partition between the two log dirs, unthrottled, as the "moving" window. Every acknowledgement is counted in
the window its arrival time falls in, so each pair compares the same producer over two adjacent stretches of time,
and a drift of the machine's speed (other work, the host) falls on both. Prints records/s of both kinds of
window, the ratio of their totals with a 95% bootstrap interval over the pairs (goal: at
least 0.9), the send-to-acknowledgement latency p50 / p99 / max of both, and the CPU each process used and waited
for. `--control` runs the same schedule with a child that only sleeps as long as a burst: the ratio it prints is
the method's own noise and bias (it should be 1.00 within its interval).

What makes the two kinds of window differ only in the moves: one producer, never stopped or flushed at a window's
edge; the windows alternate and are adjacent; and the moves are driven from a child process that blocks on a pipe
between bursts, so the producer's process runs the same threads in both (a move is awaited by polling the log dirs
every 10 ms: in the producer's process that poller took the GIL from kafka-python's threads ~100 times a second
during the moves only). A move is awaited until the source copy is gone, so its deletion is inside the burst.
The partition is pre-filled with --mib MiB through raw Produce requests so each move copies real data.
Usage: python bench/produce_during_move.py [--rounds 30] [--per-round 8] [--alone 1.5] [--gap 0.5] [--mib 64]
       [--control]
"""

from __future__ import annotations

import argparse
import bisect
import multiprocessing
import os
import random
import re
import shutil
import statistics
import sys
import threading
import time
from multiprocessing.connection import Connection
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


class Acks:
    """Arrival time and latency of every acknowledged record, in arrival order (callbacks run on the sender)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.lat: list[float] = []

    def count(self, t0: float, t1: float) -> int:
        return bisect.bisect_left(self.times, t1) - bisect.bisect_left(self.times, t0)

    def latencies(self, t0: float, t1: float) -> list[float]:
        return self.lat[bisect.bisect_left(self.times, t0):bisect.bisect_left(self.times, t1)]


def produce_until(p: KafkaProducer, stop: threading.Event, acks: Acks) -> None:
    def acked(t0: float) -> object:
        def cb(_meta: object) -> None:
            t = time.perf_counter()
            acks.times.append(t)
            acks.lat.append(t - t0)
        return cb

    while not stop.is_set():
        for _ in range(WINDOW):
            p.send(TOPIC, RECORD).add_callback(acked(time.perf_counter()))
        p.flush()


def mover(port: int, dirs: list[Path], conn: Connection, control: float | None) -> None:
    """The child process: for each count received, that many moves back and forth (or, as --control, sleeps of
    `control` seconds in all); sends back (start, end) of each, on the clock the parent's perf_counter reads."""
    with RawClient(port) as admin:
        home = dir_of(dirs, TOPIC, 0)
        other = next(p for p in dirs if p != home)
        i = 0
        while (n := conn.recv()) is not None:
            spans = []
            for _ in range(n):
                t = time.perf_counter()
                if control is not None:
                    time.sleep(control / n)
                else:
                    move(admin, dirs, TOPIC, 0, other if i % 2 == 0 else home)
                spans.append((t, time.perf_counter()))
                i += 1
            conn.send(spans)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds the process used so far, all threads (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def sched_seconds(pid: int) -> tuple[float, float]:
    """(on a CPU, runnable but waiting for one) seconds so far, summed over the process's threads (schedstat)."""
    run = wait = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                r, w, _ = f.read().split()
        except (OSError, ValueError):
            continue  # a thread that ended, or a kernel without schedstat
        run, wait = run + int(r), wait + int(w)
    return run / 1e9, wait / 1e9


def snapshot(moverd: int) -> list[float]:
    return [*cpu_seconds(moverd), *sched_seconds(os.getpid()), *sched_seconds(moverd)]


class Phase:
    """One kind of window, summed over the rounds."""

    def __init__(self) -> None:
        self.records = 0
        self.seconds = 0.0
        self.lat: list[float] = []
        self.use = [0.0] * 6  # moverd user, system; producer run, wait; moverd run, wait

    def add(self, acks: Acks, t0: float, t1: float, use0: list[float], use1: list[float]) -> tuple[int, float]:
        n = acks.count(t0, t1)
        self.records += n
        self.seconds += t1 - t0
        self.lat += acks.latencies(t0, t1)
        self.use = [a + y - x for a, x, y in zip(self.use, use0, use1, strict=True)]
        return n, t1 - t0

    def report(self, label: str) -> str:
        s, u = self.seconds, self.use
        return (f"{label}: {self.records / s:10.0f} records/s  ({self.records} in {s:.1f} s)\n"
                f"  latency {summary(self.lat)}\n"
                f"  moverd CPU per wall second: user {u[0] / s:.2f}, system {u[1] / s:.2f}\n"
                f"  per wall second, producer process: on CPU {u[2] / s:.2f}, waiting for one {u[3] / s:.2f}; "
                f"moverd: on CPU {u[4] / s:.2f}, waiting for one {u[5] / s:.2f}")


def pooled(pairs: list[tuple[float, float, float, float]]) -> float:
    """Records/s of the moving windows over records/s of the alone ones, from (alone records, seconds, moving
    records, seconds) pairs."""
    an, as_, mn, ms = (sum(p[i] for p in pairs) for i in range(4))
    return (mn / ms) / (an / as_)


def bootstrap(pairs: list[tuple[float, float, float, float]], rng: random.Random,
              n: int = 2000) -> tuple[float, float]:
    """95% interval of the pooled ratio, resampling whole pairs (a pair shares the machine's state of the moment)."""
    r = sorted(pooled(rng.choices(pairs, k=len(pairs))) for _ in range(n))
    return r[int(0.025 * n)], r[int(0.975 * n) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30, help="bursts of moves, each paired with an alone window")
    ap.add_argument("--per-round", type=int, default=8, help="moves in each burst")
    ap.add_argument("--alone", type=float, default=1.5, help="seconds of each window without moves")
    ap.add_argument("--gap", type=float, default=0.5, help="seconds after a burst that count for neither window")
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--control", action="store_true", help="the child sleeps instead of moving (noise floor)")
    args = ap.parse_args()
    root = bench_root()
    load0 = os.getloadavg()[0]
    try:
        # Retention keeps the partition near --mib + one segment: without it the producer (30 MiB/s) grows it during
        # every move, each move copies more and takes longer, and a long run never ends (a move that slows under
        # load grows the next one more).
        with Moverd(root, props={"log.segment.bytes": 64 * 2**20, "log.retention.bytes": max(args.mib, 64) * 2**20,
                                 "log.retention.check.interval.ms": 1000}) as d:
            chunk = make_batch([b"x" * 1024] * 512)
            with RawClient(d.port) as c:
                for _ in range(args.mib * 2):
                    assert produce(c, TOPIC, 0, chunk, acks=1)["error_code"] == 0

            ctx = multiprocessing.get_context("spawn")
            ours, theirs = ctx.Pipe()
            control = args.alone if args.control else None
            child = ctx.Process(target=mover, args=(d.port, d.dirs, theirs, control))
            child.start()
            producer = KafkaProducer(bootstrap_servers=d.bootstrap, acks=1, enable_idempotence=False, linger_ms=5,
                                     batch_size=64 * 1024)
            acks = Acks()
            stop = threading.Event()
            sender = threading.Thread(target=produce_until, args=(producer, stop, acks))
            alone, moving = Phase(), Phase()
            pairs: list[tuple[float, float, float, float]] = []
            spans: list[tuple[float, float]] = []
            try:
                sender.start()
                # A first stretch that counts for neither: the producer's connections, metadata and buffers warm up.
                time.sleep(2.0)
                for _ in range(args.rounds):
                    time.sleep(args.gap)
                    u0, a0 = snapshot(d.proc.pid), time.perf_counter()
                    time.sleep(args.alone)
                    u1, a1 = snapshot(d.proc.pid), time.perf_counter()
                    ours.send(args.per_round)
                    burst = ours.recv()
                    u2 = snapshot(d.proc.pid)
                    spans += burst
                    # The CPU snapshots bracket the burst within the pipe's round trip (well under a millisecond).
                    n0, s0 = alone.add(acks, a0, a1, u0, u1)
                    n1, s1 = moving.add(acks, burst[0][0], burst[-1][1], u1, u2)
                    pairs.append((n0, s0, n1, s1))
            finally:
                stop.set()
                sender.join(60)
                ours.send(None)
                child.join(30)
                producer.close()
            print(alone.report("alone       "))
            print(moving.report("during moves"))
            kind = "sleeps (--control)" if args.control else f"moves of ~{args.mib} MiB+"
            print(f"  {len(spans)} {kind} in {args.rounds} bursts, mean "
                  f"{sum(e - s for s, e in spans) / len(spans):.2f} s each; {os.cpu_count()} cores, load average "
                  f"{load0:.1f} -> {os.getloadavg()[0]:.1f}")
            log = d.log_file.read_text(errors="replace")
            # Each move logs how long its swap held the replica lock (appends to the partition wait on it).
            holds = [float(h) / 1000 for h in re.findall(r"replica lock held ([0-9.]+) ms", log)]
            if holds:
                print(f"  replica-lock hold per swap: {summary(holds)}")
            paused = [float(p) for p in re.findall(r"([0-9.]+) s of it paused", log)]
            if paused:
                print(f"  copy paused for busy CPUs: {sum(paused):.2f} s in all, {sum(paused) / len(paused):.2f} s "
                      "per move")
            lo, hi = bootstrap(pairs, random.Random(1))
            ratios = sorted((mn / ms) / (an / as_) for an, as_, mn, ms in pairs)
            print(f"the pairs' ratios: median {statistics.median(ratios):.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}")
            print(f"throughput ratio during/alone: {pooled(pairs):.3f} (95% bootstrap interval {lo:.3f}-{hi:.3f}, "
                  f"{len(pairs)} pairs)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
