"""Produce throughput and latency through a real moverd while the same partition is moved back and forth.

A kafka-python producer (acks=1, no idempotence, 1 KiB records) writes to one partition of a real moverd (the
daemon process, real sockets). Windows alternate, --rounds times: alone for --seconds, then the same while the
partition is moved between the two log dirs, unthrottled (--swaps moves in all, split over the rounds). Prints
records/s of both kinds of window and their ratio (goal: close to 1; each round's ratio too, to show the noise), the
send-to-acknowledgement latency p50 / p99 / max of both, and the CPU each process used and waited for.
The partition is pre-filled with --mib MiB through raw Produce requests so each move copies real data.

What makes the two kinds of window differ only in the moves: one producer for the whole run; the alternation, so a
drift of the machine's load (other engineers' work) falls on both; and the moves are driven from a child process
that blocks on a pipe between rounds, so the producer's process runs the same threads in both (a move is awaited by
polling the log dirs every 10 ms: in the producer's process that poller took the GIL from kafka-python's threads
~100 times a second during the moves only).
Usage: python bench/produce_during_move.py [--seconds 4] [--rounds 3] [--swaps 21] [--mib 64]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
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


def produce_window(p: KafkaProducer, stop: threading.Event) -> tuple[int, float, list[float]]:
    """Produce until `stop`; returns (records acknowledged, seconds, per-record latencies)."""
    lat: list[float] = []
    lock = threading.Lock()

    def acked(t0: float) -> object:
        def cb(_meta: object) -> None:
            with lock:
                lat.append(time.perf_counter() - t0)
        return cb

    t_start = time.perf_counter()
    while not stop.is_set():
        for _ in range(WINDOW):
            p.send(TOPIC, RECORD).add_callback(acked(time.perf_counter()))
        p.flush()
    return len(lat), time.perf_counter() - t_start, lat


def mover(port: int, dirs: list[Path], conn: Connection) -> None:
    """The child process: for each count received, that many moves back and forth; sends back their durations."""
    with RawClient(port) as admin:
        home = dir_of(dirs, TOPIC, 0)
        other = next(p for p in dirs if p != home)
        i = 0
        while (n := conn.recv()) is not None:
            times = []
            for _ in range(n):
                t = time.perf_counter()
                move(admin, dirs, TOPIC, 0, other if i % 2 == 0 else home)
                times.append(time.perf_counter() - t)
                i += 1
            conn.send(times)


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


class Phase:
    """One kind of window, summed over the rounds."""

    def __init__(self) -> None:
        self.records = 0
        self.seconds = 0.0
        self.lat: list[float] = []
        self.ratios: list[float] = []
        self.cpu = [0.0, 0.0]  # moverd user, system
        self.sched = [0.0, 0.0, 0.0, 0.0]  # producer run, wait; moverd run, wait

    def run(self, p: KafkaProducer, stop: threading.Event, moverd: int) -> float:
        c0, p0, m0 = cpu_seconds(moverd), sched_seconds(os.getpid()), sched_seconds(moverd)
        n, t, lat = produce_window(p, stop)
        c1, p1, m1 = cpu_seconds(moverd), sched_seconds(os.getpid()), sched_seconds(moverd)
        self.records += n
        self.seconds += t
        self.lat += lat
        self.cpu = [a + b1 - b0 for a, b0, b1 in zip(self.cpu, c0, c1, strict=True)]
        self.sched = [a + b1 - b0 for a, b0, b1 in zip(self.sched, (*p0, *m0), (*p1, *m1), strict=True)]
        return n / t

    def report(self, label: str) -> str:
        s = self.seconds
        return (f"{label}: {self.records / s:10.0f} records/s  ({self.records} in {s:.1f} s)\n"
                f"  latency {summary(self.lat)}\n"
                f"  moverd CPU per wall second: user {self.cpu[0] / s:.2f}, system {self.cpu[1] / s:.2f}\n"
                f"  per wall second, producer process: on CPU {self.sched[0] / s:.2f}, waiting for one "
                f"{self.sched[1] / s:.2f}; moverd: on CPU {self.sched[2] / s:.2f}, waiting for one "
                f"{self.sched[3] / s:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each window without moves")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--swaps", type=int, default=21, help="moves in all, split evenly over the rounds")
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    per_round = max(1, args.swaps // args.rounds)
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

            ours, theirs = multiprocessing.get_context("spawn").Pipe()
            child = multiprocessing.get_context("spawn").Process(target=mover, args=(d.port, d.dirs, theirs))
            child.start()
            producer = KafkaProducer(bootstrap_servers=d.bootstrap, acks=1, enable_idempotence=False, linger_ms=5,
                                     batch_size=64 * 1024)
            alone, moving = Phase(), Phase()
            swap_times: list[float] = []
            try:
                # A first window that counts for neither: the producer's connections, metadata and buffers warm up
                # in it (a cold first "alone" window made the first round's ratio look better than it is).
                stop = threading.Event()
                threading.Timer(min(args.seconds, 2.0), stop.set).start()
                produce_window(producer, stop)
                for _ in range(args.rounds):
                    stop = threading.Event()
                    timer = threading.Timer(args.seconds, stop.set)
                    timer.start()
                    a = alone.run(producer, stop, d.proc.pid)

                    stop = threading.Event()

                    def drive(stop: threading.Event = stop) -> None:
                        ours.send(per_round)
                        swap_times.extend(ours.recv())
                        stop.set()

                    driver = threading.Thread(target=drive)
                    driver.start()
                    m = moving.run(producer, stop, d.proc.pid)
                    driver.join()
                    moving.ratios.append(m / a)
            finally:
                ours.send(None)
                child.join(30)
                producer.close()
            print(alone.report("alone       "))
            print(moving.report("during moves"))
            print(f"  {len(swap_times)} moves of ~{args.mib} MiB+ in {args.rounds} rounds, mean "
                  f"{sum(swap_times) / len(swap_times):.2f} s per move; {os.cpu_count()} cores, load average "
                  f"{load0:.1f} -> {os.getloadavg()[0]:.1f}")
            # Each move logs how long its swap held the replica lock (appends to the partition wait on it).
            holds = [float(h) / 1000 for h in re.findall(r"replica lock held ([0-9.]+) ms",
                                                         d.log_file.read_text(errors="replace"))]
            if holds:
                print(f"  replica-lock hold per swap: {summary(holds)}")
            paused = [float(p) for p in re.findall(r"([0-9.]+) s of it paused", d.log_file.read_text(errors="replace"))]
            if paused:
                print(f"  copy paused for busy CPUs: {sum(paused):.2f} s in all, {sum(paused) / len(paused):.2f} s "
                      "per move")
            print(f"each round's ratio: {' / '.join(f'{r:.2f}' for r in moving.ratios)}")
            ratio = (moving.records / moving.seconds) / (alone.records / alone.seconds)
            print(f"throughput ratio during/alone: {ratio:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
