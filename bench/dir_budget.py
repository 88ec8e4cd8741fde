"""A budget per disk (issue 37): two moves out of d1 into d2 and d3 at once, in one process (the LogManager and its
move threads, real files), with `mover.log.dir.io.max.bytes.per.second` giving d2 and d3 budgets of their own.

Prints, for each destination, the lowest and highest rate over every 10-second window while both moves run, as a
multiple of its budget (goal: 0.95-1.05), and the source's read rate against its budget. The anchor, side by side in
the same run: what Kafka can do, one broker-wide quota set to the sum of the two budgets, with which each disk gets
whatever the quota's fair split gives it, not its budget.
Usage: python bench/dir_budget.py [--d2-mib 30] [--d3-mib 20] [--seconds 25]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, fill, manager  # noqa: E402
from mover.storage.names import TopicPartition  # noqa: E402
from mover.testing.log_manager import alter_replica_log_dir  # noqa: E402

WINDOW_S = 10.0


def _run(root: Path, props: dict[str, object], sizes: tuple[int, int]) -> list[tuple[float, int, int]]:
    """Move t-0 (sizes[0] bytes) d1 -> d2 and t-1 d1 -> d3 at once; samples (time, copied into d2, into d3) until the
    first move ends (the span both run)."""
    d1, d2, d3 = root / "d1", root / "d2", root / "d3"
    m = manager([d1, d2, d3], **props)
    tps = [TopicPartition("t", p) for p in range(2)]
    try:
        for tp in tps:
            m.remembered[tp] = d1
        m.create_topic("t", 2)
        for tp, size in zip(tps, sizes, strict=True):
            fill(m, tp, size)
        moves = []
        for tp, dest in zip(tps, (d2, d3), strict=True):
            assert alter_replica_log_dir(m, tp, str(dest)) == 0
            moves.append(m.replicas[tp].move)
        samples: list[tuple[float, int, int]] = []
        while not any(mv.state.done for mv in moves):
            samples.append((time.perf_counter(), moves[0].bytes_copied, moves[1].bytes_copied))
            time.sleep(0.05)  # the sampling period of what is measured
        for mv in moves:
            mv.wait()
        return samples
    finally:
        m.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _windows(samples: list[tuple[float, int]]) -> list[float]:
    """The rate over every 10-second window starting at a sample."""
    out = []
    j = 0
    for i, (t0, b0) in enumerate(samples):
        j = max(j, i)
        while j < len(samples) and samples[j][0] - t0 < WINDOW_S:
            j += 1
        if j == len(samples):
            break
        t1, b1 = samples[j]
        out.append((b1 - b0) / (t1 - t0))
    return out


def _report(name: str, samples: list[tuple[float, int, int]], budgets: tuple[float, float, float]) -> None:
    d2 = _windows([(t, a) for t, a, _ in samples])
    d3 = _windows([(t, b) for t, _, b in samples])
    d1 = _windows([(t, a + b) for t, a, b in samples])
    if not d2:
        print(f"{name}: the moves ended before a {WINDOW_S:.0f} s window: raise --seconds")
        return
    for label, rates, budget in (("d2 (write)", d2, budgets[1]), ("d3 (write)", d3, budgets[2]),
                                 ("d1 (read)", d1, budgets[0])):
        print(f"{name:22} {label:10} {len(rates):4} windows of {WINDOW_S:.0f} s: "
              f"{min(rates) / budget:.3f}-{max(rates) / budget:.3f} of its budget ({budget / 2**20:.0f} MiB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d2-mib", type=float, default=30)
    ap.add_argument("--d3-mib", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=25, help="how long both moves run at their budgets")
    args = ap.parse_args()
    r2, r3 = int(args.d2_mib * 2**20), int(args.d3_mib * 2**20)
    r1 = 2 * (r2 + r3)  # the source's budget: not the binding one here, reported for what it read
    # Each move sized to outlast the window at its budget: the span both run is what is measured.
    sizes = (int(r2 * (args.seconds + 5)), int(r3 * (args.seconds + 5)))
    root = bench_root()
    budgets = f"{root / 'd1'}:{r1},{root / 'd2'}:{r2},{root / 'd3'}:{r3}"
    ours = _run(root, {"mover.log.dir.io.max.bytes.per.second": budgets, "num.replica.alter.log.dirs.threads": 2},
                sizes)
    _report("per-dir budgets", ours, (r1, r2, r3))
    root = bench_root()
    anchor = _run(root, {"replica.alter.log.dirs.io.max.bytes.per.second": r2 + r3,
                         "num.replica.alter.log.dirs.threads": 2}, sizes)
    _report("one broker quota (anchor)", anchor, (r1, r2, r3))


if __name__ == "__main__":
    main()
