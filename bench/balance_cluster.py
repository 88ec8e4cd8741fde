"""The balancer over a long run (issue 37 item 4): a real Kafka 3.7 cluster (a controller and 3 brokers of 3 log dirs,
a topic of replication factor 3), or with `--moverd` one moverd of 3 log dirs (a moverd is one broker: replication
factor 1), under skewed producers (a few hot partitions get most of the bytes, so the disks holding them fill much
faster) and a consumer reading everything.

Two phases of the same workload, each `--minutes` / 2 long: first without the balancer (the baseline), then with
`mover-audit balance` running as an operator runs it (its own process, its own Spark). Printed:
- the share of samples (one every `--sample-s` seconds, from the end of the balancer's first cycle on) where every
  disk is within +-`--band` % of its broker's mean (the balancer's own band is relative to the mean too; it plans to
  `--plan-band`, tighter, so the writes between two cycles do not carry a disk out): goal >= 99%;
- the producers' p99 produce latency (acks=all, send to acknowledgement) in each phase and their ratio: goal <= 1.1x
  (on a shared machine the ratio follows the machine's load as much as the balancer: the load average is printed);
- the records lost and duplicated, by the consumer that ran through both phases and by a fresh one.

Usage: python bench/balance_cluster.py [--minutes 30] [--moverd] [--band 5] [--plan-band 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root, pct  # noqa: E402
from mover.admin.client import Client  # noqa: E402
from mover.admin.log_dir_state import describe_broker  # noqa: E402
from mover.testing.audit_process import AuditProcess  # noqa: E402
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up  # noqa: E402
from mover.testing.exactly_once import check  # noqa: E402
from mover.testing.history import TP, Acked  # noqa: E402
from mover.testing.kafka_cluster import KafkaCluster  # noqa: E402
from mover.testing.kafka_home import kafka_home  # noqa: E402
from mover.testing.log_dirs_tool import create_topics  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.producers import PyProducer, prefill  # noqa: E402

TOPIC = "load"
# Many partitions of varied sizes: a disk's band (+-5% of ~20 partitions) must be wider than the steps whole
# partitions allow, else no plan can land a disk in it (with 12 partitions of 2-4 MB the planner often found none).
PARTITIONS = 60
HOT = 3  # partitions of the hot producer
RECORD_BYTES = 1000


def usage(client: Client, broker: int) -> dict[str, int]:
    return {d.path: sum(p.size for p in d.partitions if not p.is_future) for d in describe_broker(client, broker)}


def in_band(used: dict[str, int], band: float) -> bool:
    mean = sum(used.values()) / len(used)
    return all(abs(u - mean) <= band * mean for u in used.values())


def latencies_ms(acked: list[Acked]) -> list[float]:
    return [(a.at - a.sent) * 1000 for a in acked if a.sent is not None]


def first_cycle_over(balancer: AuditProcess) -> bool:
    """The first cycle that planned moves has carried them out, or the first found nothing to move."""
    return balancer.said(r"^(executed: |cycle \d+: nothing to move)")


def stop(balancer: AuditProcess, timeout: float = 600) -> int:
    """SIGTERM, as systemd stops it: it finishes the moves in flight and puts every throttle back."""
    if balancer.proc.poll() is None:
        balancer.proc.send_signal(signal.SIGTERM)
    return balancer.wait(timeout)


def hot_partitions(bootstrap: str, broker: int) -> list[TP]:
    """HOT partitions that share a log dir of `broker` (Kafka and moverd place by count: every dir holds some), so
    that dir fills faster than the others."""
    with Client(bootstrap, timeout=10) as client:
        dirs = describe_broker(client, broker)
    return max(([(TOPIC, p.partition) for p in d.partitions if p.topic == TOPIC] for d in dirs), key=len)[:HOT]


def phase(name: str, seconds: float, brokers: list[int], bootstrap: str, band: float, sample_s: float,
          tps: list[TP], hot_tps: list[TP], rates: tuple[float, float],
          counting: Callable[[], bool]) -> tuple[list[Acked], int, int]:
    """The skewed producers for `seconds`; (their acknowledged records, samples in band, samples) where samples
    are taken every `sample_s` once `counting()` holds."""
    hot = PyProducer(f"hot{name}", bootstrap, hot_tps, rate=rates[0], pad=RECORD_BYTES)
    cold = PyProducer(f"cold{name}", bootstrap, [tp for tp in tps if tp not in hot_tps], rate=rates[1], pad=100)
    good = total = 0
    hot.start()
    cold.start()
    try:
        end = time.monotonic() + seconds
        with Client(bootstrap, timeout=10) as client:
            while time.monotonic() < end:
                if counting():
                    try:
                        ok = all(in_band(usage(client, b), band) for b in brokers)
                    except Exception as e:  # noqa: BLE001 - a sample lost to a slow broker is said, not fatal
                        print(f"  sample failed: {e}")
                    else:
                        total += 1
                        good += ok
                time.sleep(sample_s)  # the sampling period of what is measured
    finally:
        hot.stop()
        cold.stop()
    acked = []
    for p in (hot, cold):
        ok_, failed = p.snapshot()
        if failed:
            print(f"  {p.name}: {len(failed)} records failed, e.g. {failed[:2]}")
        acked += ok_
    return acked, good, total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30, help="the whole run: half without, half with the balancer")
    ap.add_argument("--moverd", action="store_true", help="one moverd of 3 log dirs instead of a Kafka cluster")
    ap.add_argument("--band", type=float, default=5, help="the band measured, %% of the broker's mean (default 5)")
    ap.add_argument("--plan-band", type=float, default=3, help="the balancer's --band, %% (default 3)")
    ap.add_argument("--sample-s", type=float, default=5, help="seconds between samples of the disks (default 5)")
    ap.add_argument("--prefill", type=int, default=400, help="records of 1 KB in a partition before, on average "
                    "(default 400, 0.5-1.5x by partition: the writes between two cycles must stay small against the "
                    "band)")
    ap.add_argument("--hot-prefill", type=float, default=3,
                    help="the hot partitions' prefill as a multiple of the others' (default 3)")
    ap.add_argument("--hot-rate", type=float, default=10,
                    help="records/s of 1 KB over the hot partitions, round-robin (default 10)")
    ap.add_argument("--cold-rate", type=float, default=20,
                    help="records/s of 100 B over the other partitions (default 20)")
    ap.add_argument("--throttle", type=int, default=2 << 20, help="the balancer's --throttle, B/s (default 2 MiB/s)")
    ap.add_argument("--verbose", action="store_true", help="echo the balancer's lines")
    args = ap.parse_args()

    root = bench_root()
    tps: list[TP] = [(TOPIC, p) for p in range(PARTITIONS)]
    cluster: KafkaCluster | None = None
    daemon: Moverd | None = None
    balancer: AuditProcess | None = None
    consumer: PyConsumer | None = None
    try:
        if args.moverd:
            daemon = Moverd(root, n_dirs=3).start()
            bootstrap, brokers = daemon.bootstrap, [0]
            create_topics(bootstrap, {TOPIC: PARTITIONS})
        else:
            home = kafka_home()
            if home is None:
                print("no Kafka distribution found (mover/testing/kafka_home.py)")
                return 1
            cluster = KafkaCluster(root / "kafka", home, brokers=3, log_dirs=3, controller=True).start()
            bootstrap, brokers = cluster.bootstrap, cluster.broker_ids
            cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        # A little data everywhere, so a broker's mean is not made of the hot partitions alone.
        hot_tps = hot_partitions(bootstrap, brokers[0])
        # The hot partitions have already been hot for a while: their dir starts above the others.
        sizes = {tp: args.prefill * (args.hot_prefill if tp in hot_tps else 0.5 + tp[1] % 5 / 4) for tp in tps}
        acked = prefill(bootstrap, tps, {tp: int(n) for tp, n in sizes.items()}, RECORD_BYTES, name="fill")
        consumer = PyConsumer("through", bootstrap, tps).start()
        half = args.minutes * 60 / 2
        rates = (args.hot_rate, args.cold_rate)
        print(f"phase 1: {half / 60:.1f} min without the balancer", flush=True)
        base, good0, total0 = phase("0", half, brokers, bootstrap, args.band / 100, args.sample_s, tps, hot_tps,
                                    rates, lambda: True)
        load1 = os.getloadavg()
        print(f"phase 2: {half / 60:.1f} min with the balancer", flush=True)
        balancer = AuditProcess("balance", "--bootstrap-server", bootstrap, "--cluster", "bench", "--state-dir",
                                str(root / "balance"), "--band", f"{args.plan_band}%", "--interval", "5",
                                "--check-interval", "2", "--poll-interval", "0.5", "--throttle", str(args.throttle),
                                "--master", "local[1]", "--driver-memory", "512m", "--shuffle-partitions", "2",
                                echo=(lambda line: print(f"  balance| {line}", flush=True)) if args.verbose else None)
        b = balancer
        during, good, total = phase("1", half, brokers, bootstrap, args.band / 100, args.sample_s, tps, hot_tps,
                                    rates, lambda: first_cycle_over(b))
        load2 = os.getloadavg()
        rc = stop(balancer)
        stopped = [line for line in balancer.lines if line.startswith("stopped after")]
        acked += base + during
        ends = end_offsets(bootstrap, tps)
        wait_caught_up([consumer], ends)
        report = check("consumer through both phases", consumer.stop(), ends, acked)
        consumer = None
        fresh = PyConsumer("fresh", bootstrap, tps).start()
        wait_caught_up([fresh], ends)
        report2 = check("fresh consumer", fresh.stop(), ends, acked)

        p99_without, p99_with = pct(latencies_ms(base), 99), pct(latencies_ms(during), 99)
        cycles = sum(bool(re.match(r"^cycle \d+: ", line)) for line in balancer.lines)
        moves = sum(line.startswith("done ") for line in balancer.lines)
        print(f"\n{'moverd (1 broker x 3 dirs)' if args.moverd else 'Kafka 3.7 (3 brokers x 3 dirs, RF 3)'}, "
              f"{args.minutes:g} min; load average {load1[0]:.1f} after phase 1, {load2[0]:.1f} after phase 2 "
              f"({os.cpu_count()} cores, shared)")
        print(f"in band (+-{args.band:g}% of the broker's mean), after the first cycle: {good}/{total} samples = "
              f"{100 * good / max(total, 1):.1f}% (goal >= 99%); without the balancer: {good0}/{total0} = "
              f"{100 * good0 / max(total0, 1):.1f}%")
        print(f"producer p99: {p99_without:.1f} ms without, {p99_with:.1f} ms with the balancer: "
              f"{p99_with / p99_without:.2f}x (goal <= 1.1x); {len(base)} and {len(during)} records")
        print(f"balancer: {cycles} cycle(s), {moves} move(s) done; exit {rc}; {stopped[-1] if stopped else '?'}")
        for r in (report, report2):
            print(f"{r.consumer}: {r.acked} acknowledged, lost {r.lost}, duplicated {r.duplicates}, out of order "
                  f"{r.out_of_order}" + (f"; {r.problems[0]}" if r.problems else ""))
        return 0 if not (report.lost or report.duplicates or report2.lost or report2.duplicates) else 1
    finally:
        if balancer is not None:
            balancer.close()
        if consumer is not None:
            consumer.close()
        if cluster is not None:
            cluster.close()
        if daemon is not None:
            daemon.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
