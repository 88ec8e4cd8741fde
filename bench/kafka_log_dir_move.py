"""moverd vs a real Apache Kafka 3.7 (KRaft, mover/testing/kafka_cluster.py), side by side in one run, on the SAME
files:

1. A log-dir move of one partition (1 GiB by default, `--mib` for less): Kafka fills it (kafka-producer-perf-test.sh)
   and moves it d1 -> d2 unthrottled, then d2 -> d1 at `--rate-mib` (50 MiB/s); Kafka stops, moverd starts on the
   same dirs as the same broker id and makes the same two moves. Both are driven the same way (AlterReplicaLogDirs
   and the throttle through mover-log-dirs' own library) and watched the same way: DescribeLogDirs every 50 ms, the
   future copy's size as the bytes moved. Printed: time, MiB/s, the throttled average against the rate, and the
   worst 1-second window (most bytes moved in any second) against the rate. Kafka's quota lets a fresh move burst
   about 10 s worth of the rate first (docs/kafka-compat.md), which shows as its worst window.
2. `--partitions` (10,000) partitions over two log dirs, created on Kafka: raw DescribeLogDirs v1 of all of them
   (mover.testing.raw, the server's time; no client decoding), then start-up on those files: Kafka restarted (until
   it prints `Kafka Server started` and Metadata answers) against moverd started on the same dirs (until its ready
   file), then moverd's raw DescribeLogDirs.

Usage: python bench/kafka_log_dir_move.py [--mib 1024] [--rate-mib 50] [--partitions 10000] [--skip-move]
       [--skip-partitions]
The machine is shared (2 cores, several engineers' tests): expect noise; each figure is one run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from bench.common import bench_root, pct  # noqa: E402
from mover.admin import throttle  # noqa: E402
from mover.admin.alter_log_dirs import alter_log_dirs  # noqa: E402
from mover.admin.client import Client  # noqa: E402
from mover.admin.common import TopicPartitionReplica  # noqa: E402
from mover.admin.log_dir_state import describe_broker  # noqa: E402
from mover.testing.kafka_cluster import KafkaCluster  # noqa: E402
from mover.testing.kafka_home import SKIP_REASON, kafka_home  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.testing.wait import wait_for  # noqa: E402
from mover.wire.messages import DESCRIBE_LOG_DIRS  # noqa: E402

BROKER = 1
TOPIC = "big"
SAMPLE_S = 0.05
# A 10,000-partition broker and a 1 GiB producer need more than the tests' 256 MiB.
BENCH_HEAP = "-Xmx1g -Xms256m"


class Move:
    """One watched move: samples of (seconds since the request, bytes in the destination copy)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.samples: list[tuple[float, int]] = []

    @property
    def seconds(self) -> float:
        return self.samples[-1][0]

    def worst_window(self, window: float = 1.0) -> int:
        """Most bytes moved within any `window` seconds (between two samples at most that far apart)."""
        worst, j = 0, 0
        for i in range(len(self.samples)):
            while self.samples[i][0] - self.samples[j][0] > window:
                j += 1
            worst = max(worst, self.samples[i][1] - self.samples[j][1])
        return worst


def watch_move(client: Client, source: str, destination: str) -> Move:
    """Move TOPIC-0 of BROKER from `source` to `destination` and watch it until it is swapped in."""
    def where() -> tuple[int, int | None, str | None]:
        dirs = describe_broker(client, BROKER, {TOPIC: [0]})
        current = next((d.path for d in dirs for p in d.partitions if not p.is_future), None)
        size = next(p.size for d in dirs for p in d.partitions if not p.is_future)
        future = next((p.size for d in dirs for p in d.partitions if p.is_future), None)
        return size, future, current

    size, _, current = where()
    assert current == source, (current, source)
    move = Move(size)
    t0 = time.perf_counter()
    alter_log_dirs(client, {TopicPartitionReplica(TOPIC, 0, BROKER): destination}, 30.0)
    while True:
        _, future, current = where()
        now = time.perf_counter() - t0
        if future is None and current == destination:
            move.samples.append((now, size))
            return move
        move.samples.append((now, future or 0))
        time.sleep(SAMPLE_S)


def both_moves(client: Client, dirs: list[str], rate: int) -> tuple[Move, Move]:
    free = watch_move(client, dirs[0], dirs[1])
    throttle.set_throttle(client, [BROKER], rate)
    try:
        # KRaft applies a config change from its metadata log just after answering: wait until the broker says so.
        wait_for(lambda: any(v == str(rate) for v in throttle.dynamic_throttle(client, BROKER).values()),
                 message="the throttle to apply")
        held = watch_move(client, dirs[1], dirs[0])
    finally:
        throttle.set_throttle(client, [BROKER], None)
    return free, held


def no_retired_copies(dirs: list[Path]) -> bool:
    return not any(p.name.endswith(("-delete", ".delete")) for d in dirs for p in d.iterdir())


def report_moves(name: str, free: Move, held: Move, rate: int) -> None:
    mib = free.size / 2**20
    print(f"{name:6} unthrottled: {free.seconds:6.2f} s ({mib / free.seconds:6.1f} MiB/s); "
          f"at {rate / 2**20:.0f} MiB/s: {held.seconds:6.2f} s, average {held.size / held.seconds / rate:.2f}x the "
          f"rate, worst 1 s window {held.worst_window() / rate:.2f}x the rate")


def move_bench(root: Path, home: Path, mib: int, rate: int) -> None:
    kafka = KafkaCluster(root / "kafka", home, brokers=1, log_dirs=2, heap=BENCH_HEAP,
                         props={"log.segment.bytes": 256 << 20})
    with kafka:
        kafka.create_topic(TOPIC, partitions=1)
        records = mib * 10
        kafka.tool("kafka-producer-perf-test.sh", "--topic", TOPIC, "--num-records", str(records), "--record-size",
                   str(2**20 // 10), "--throughput", "-1", "--producer-props", f"bootstrap.servers={kafka.bootstrap}",
                   "acks=1", "batch.size=1048576", "linger.ms=5", "max.request.size=2097152", timeout=1800)
        dirs = [str(d) for d in kafka.log_dirs(BROKER)]
        if kafka.dir_of(BROKER, TOPIC, 0) != kafka.log_dirs(BROKER)[0]:
            dirs.reverse()
        with Client(kafka.bootstrap, timeout=30) as client:
            kafka_free, kafka_held = both_moves(client, dirs, rate)
        wait_for(lambda: no_retired_copies(kafka.log_dirs(BROKER)), timeout=120, message="Kafka's deletes")
    log_dirs = kafka.log_dirs(BROKER)
    (root / "moverd").mkdir()
    with Moverd(root / "moverd", dirs=log_dirs, props={"broker.id": BROKER}) as d, \
            Client(d.bootstrap, timeout=30) as client:
        mover_free, mover_held = both_moves(client, dirs, rate)
    print(f"\nlog-dir move of one {kafka_free.size / 2**20:.0f} MiB partition, the same files for both")
    report_moves("Kafka", kafka_free, kafka_held, rate)
    report_moves("moverd", mover_free, mover_held, rate)
    print(f"ratio moverd / Kafka time: unthrottled {mover_free.seconds / kafka_free.seconds:.2f}, "
          f"throttled {mover_held.seconds / kafka_held.seconds:.2f}; worst window "
          f"{mover_held.worst_window() / max(1, kafka_held.worst_window()):.2f}")


def raw_describe(port: int, n: int) -> tuple[list[float], int]:
    times: list[float] = []
    with RawClient(port) as c:
        request = c.request_bytes(DESCRIBE_LOG_DIRS, 1, {"topics": None})
        for i in range(n + 3):
            t0 = time.perf_counter()
            c.send(request)
            frame = c.recv_frame()
            if i >= 3:
                times.append(time.perf_counter() - t0)
    assert frame is not None
    return times, len(frame)


def partitions_bench(root: Path, home: Path, partitions: int, n: int) -> None:
    kafka = KafkaCluster(root / "many", home, brokers=1, log_dirs=2, heap=BENCH_HEAP)
    with kafka:
        t0 = time.perf_counter()
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, request_timeout_ms=600_000)
        try:
            # KRaft refuses one operation of more than 10,000 metadata records (PolicyViolation, "excessively large
            # batch operation"): topics of 1,000 partitions, one request each.
            for i in range(0, partitions, 1000):
                admin.create_topics([NewTopic(f"many{i // 1000}", min(1000, partitions - i), 1)],
                                    timeout_ms=600_000)
        finally:
            admin.close()
        wait_for(lambda: sum(1 for d in kafka.log_dirs(BROKER) for p in d.iterdir() if p.name.startswith("many"))
                 >= partitions, timeout=1200, message=f"{partitions} partition dirs", interval=0.5)
        created = time.perf_counter() - t0
        kafka_raw, kafka_bytes = raw_describe(kafka.broker(BROKER).ports["PLAINTEXT"], n)
        kafka.stop_broker(BROKER)
        t0 = time.perf_counter()
        kafka.start_broker(BROKER)
        kafka_start = time.perf_counter() - t0
    (root / "many-moverd").mkdir()
    t0 = time.perf_counter()
    with Moverd(root / "many-moverd", dirs=kafka.log_dirs(BROKER), props={"broker.id": BROKER}) as d:
        mover_start = time.perf_counter() - t0
        mover_raw, mover_bytes = raw_describe(d.port, n)
    print(f"\n{partitions} partitions over 2 log dirs (Kafka created them in {created:.1f} s), the same files")
    print(f"raw DescribeLogDirs v1, p50 of {n}: Kafka {pct(kafka_raw, 50) * 1000:.1f} ms ({kafka_bytes:,} B), "
          f"moverd {pct(mover_raw, 50) * 1000:.1f} ms ({mover_bytes:,} B); ratio moverd / Kafka "
          f"{pct(mover_raw, 50) / pct(kafka_raw, 50):.2f}")
    print(f"start-up (process start to serving): Kafka {kafka_start:.1f} s, moverd {mover_start:.1f} s; ratio "
          f"moverd / Kafka {mover_start / kafka_start:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024, help="size of the moved partition in MiB (default 1 GiB)")
    ap.add_argument("--rate-mib", type=float, default=50)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--raw", type=int, default=30, help="raw DescribeLogDirs requests timed per broker")
    ap.add_argument("--skip-move", action="store_true")
    ap.add_argument("--skip-partitions", action="store_true")
    args = ap.parse_args()
    home = kafka_home()
    if home is None:
        sys.exit(SKIP_REASON)
    root = bench_root()
    try:
        if not args.skip_move:
            move_bench(root, home, args.mib, int(args.rate_mib * 2**20))
        if not args.skip_partitions:
            partitions_bench(root, home, args.partitions, args.raw)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
