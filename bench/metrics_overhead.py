"""What the metrics cost on the produce path: produce requests/s through a real moverd with `metrics.listener` off
(the anchor) and on, in one run.

Small Produce requests (acks=1, one 10-record batch of 100-byte values), pipelined 16 deep on one connection, so the
per-request work (where the request-latency histogram is observed) dominates rather than disk bandwidth. With
metrics on, a scraper reads /metrics every second meanwhile (Prometheus scrapes every 15 s by default: harsher).
Both daemons run side by side and the producer alternates between them in short turns, so the load of other
processes on the machine falls on both sides alike. Prints requests/s of each and the ratio on/off (goal: above
0.95), and the daemon's CPU time per request on each side, which other processes' load disturbs much less.
`--control` runs the same with metrics off on both sides: its ratio shows how far from 1.0 noise alone gets.
Usage: python bench/metrics_overhead.py [--seconds 20] [--slice 0.5] [--control]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.metrics import MoverMetrics  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.ports import free_port  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.wire.messages import PRODUCE  # noqa: E402

DEPTH = 16


def produce_for(c: RawClient, frames: bytes, seconds: float) -> tuple[int, float]:
    """(requests answered, seconds taken), pipelining DEPTH requests at a time."""
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        c.send(frames)
        for _ in range(DEPTH):
            assert c.recv_frame() is not None
        done += DEPTH
    return done, time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scraper(port: int, stop: threading.Event, scrapes: list[float]) -> None:
    while not stop.wait(1.0):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            r.read()
        scrapes.append(time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="total produce time, split over both daemons")
    ap.add_argument("--slice", type=float, default=0.5, help="seconds per turn; turns alternate off/on")
    ap.add_argument("--control", action="store_true",
                    help="metrics off on both sides: the ratio this prints is the measurement's noise")
    args = ap.parse_args()
    root = bench_root()
    mport = free_port()
    batch = make_batch([b"x" * 100] * 10)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000, "topic_data": [
        {"name": "bench", "partition_data": [{"index": 0, "records": batch}]}]}
    stop = threading.Event()
    scrapes: list[float] = []
    try:
        (root / "off").mkdir()
        (root / "on").mkdir()
        on_props = {} if args.control else {"metrics.listener": f"http://127.0.0.1:{mport}"}
        with Moverd(root / "off") as off, Moverd(root / "on", props=on_props) as on, \
                RawClient(off.port) as c_off, RawClient(on.port) as c_on:
            frames = b"".join(c_off.request_bytes(PRODUCE, 9, body) for _ in range(DEPTH))
            totals = {"off": [0, 0.0], "on": [0, 0.0]}
            cpu = {"off": 0.0, "on": 0.0}
            pids = {"off": off.proc.pid, "on": on.proc.pid}  # type: ignore[union-attr]
            for c in (c_off, c_on):
                produce_for(c, frames, args.slice)  # warm-up: topic creation, first segment
            t = threading.Thread(target=scraper, args=(mport, stop, scrapes), daemon=True)
            if not args.control:
                t.start()
            # Alternating short turns on two daemons running side by side: load from other processes on the
            # machine falls on both sides alike.
            turns = (("off", c_off), ("on", c_on))
            for i in range(max(1, int(args.seconds / args.slice / 2))):
                for name, c in turns if i % 2 == 0 else turns[::-1]:  # neither side always goes first
                    cpu0 = cpu_seconds(pids[name])
                    n, dt = produce_for(c, frames, args.slice)
                    cpu[name] += cpu_seconds(pids[name]) - cpu0
                    totals[name][0] += n
                    totals[name][1] += dt
            stop.set()
            if t.is_alive():
                t.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r_off = totals["off"][0] / totals["off"][1]
    r_on = totals["on"][0] / totals["on"][1]
    print(f"metrics off (anchor):  {r_off:8.0f} produce requests/s")
    side = "off (control):" if args.control else "on:           "
    print(f"metrics {side} {r_on:8.0f} produce requests/s ({len(scrapes)} scrapes, "
          f"{1000 * sum(scrapes) / max(1, len(scrapes)):.1f} ms each on average)")
    print(f"ratio on/off: {r_on / r_off:.3f}")
    # CPU time the daemon spent per request: far less sensitive than throughput to other processes on the machine.
    c_off = cpu["off"] / totals["off"][0] * 1e6
    c_on = cpu["on"] / totals["on"][0] * 1e6
    print(f"daemon CPU per request: off {c_off:.1f} us, {'off (control)' if args.control else 'on'} {c_on:.1f} us; "
          f"ratio off/on (throughput it implies): {c_off / c_on:.3f}")
    # The same cost measured without the machine's noise: what the server adds per request with metrics on (two
    # clock reads and one histogram observation), against the time one request takes with metrics off.
    metrics = MoverMetrics()
    n = 200_000
    t0 = time.perf_counter()
    for _ in range(n):
        metrics.observe_request("Produce", time.perf_counter() - t0)
    per = (time.perf_counter() - t0) / n
    print(f"per request: {per * 1e6:.2f} us of metrics in {1e6 / r_off:.0f} us per request = "
          f"{100 * per * r_off:.2f}% (an estimate of the ratio: {1 / (1 + per * r_off):.3f})")


if __name__ == "__main__":
    main()
