"""collect: DescribeLogDirs rows decoded per second from one broker, and 50 brokers queried at once.

1. One real moverd with 10,000 partitions over 4 log dirs (bench/startup.py's builder). Ours: collect's per-broker
   query (connect, ApiVersions, DescribeLogDirs v4 for every topic, decode, snapshot rows), repeated. Anchor:
   kafka-python 3.0.12's `KafkaAdminClient.describe_log_dirs()` on the same broker (its own decoding), repeated.
   Printed: rows/s of each and the ratio.
2. 50 brokers at once. 50 moverd daemons do not fit 2 cores, so 50 in-process fake brokers (mover/testing/
   fake_kafka/, Kafka 3.9's API versions) each serve a canned DescribeLogDirs answer of --replicas rows (encoded
   once, replayed with the request's correlation id). Ours: collect's thread pool, --parallelism 50, against
   sequential (--parallelism 1); anchor: kafka-python's describe_log_dirs() across the same 50 brokers (it asks
   them all concurrently). The fakes run in this process, so they share the GIL with both clients: the figures are
   a lower bound, and the ratio is the comparison. A second run delays every answer by --latency-ms (50: a
   remote or busy broker), where asking brokers at once pays off. `--spark` adds collect's Spark-task path on
   local[2] to that run (excluding the JVM start).
Usage: python bench/collect.py [--partitions 10000] [--repeat 10] [--brokers 50] [--replicas 2000]
       [--latency-ms 50] [--spark]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.admin import KafkaAdminClient  # noqa: E402

from bench.common import bench_root  # noqa: E402
from bench.startup import build  # noqa: E402
from mover.audit.collect import query_broker, query_brokers  # noqa: E402
from mover.audit.fleet import BrokerEndpoint  # noqa: E402
from mover.testing.fake_kafka import KAFKA_3_9, FakeCluster  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402


def kafka_python_rows(result: list[dict]) -> int:  # type: ignore[type-arg]
    return sum(len(t["partitions"]) for broker in result for d in broker["log_dirs"] for t in d["topics"])


def timed(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def one_broker(args: argparse.Namespace) -> None:
    root = bench_root()
    dirs = [root / f"d{i}" for i in range(1, 5)]
    build(dirs, args.partitions, 0)
    now = datetime.now(UTC)
    try:
        with Moverd(root, dirs=dirs) as d:
            broker = BrokerEndpoint("bench", 0, d.host, d.port)
            query_broker(broker, 60, now)  # warm the daemon's caches
            ours_s, result = timed(lambda: query_broker(broker, 60, now), args.repeat)
            rows = len(result.replicas)  # type: ignore[attr-defined]
            admin = KafkaAdminClient(bootstrap_servers=d.bootstrap, request_timeout_ms=60000)
            try:
                admin.describe_log_dirs()
                theirs_s, reply = timed(admin.describe_log_dirs, args.repeat)
            finally:
                admin.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    their_rows = kafka_python_rows(reply)  # type: ignore[arg-type]
    assert rows == their_rows == args.partitions, (rows, their_rows)
    print(f"1. one moverd, {args.partitions} partitions over 4 log dirs (median of {args.repeat})")
    print(f"   collect query_broker:            {ours_s * 1000:8.1f} ms  {rows / ours_s:12,.0f} rows/s")
    print(f"   kafka-python describe_log_dirs:  {theirs_s * 1000:8.1f} ms  {their_rows / theirs_s:12,.0f} rows/s")
    print(f"   ratio ours / kafka-python (rows/s): {theirs_s / ours_s:.2f}")


def fleet(args: argparse.Namespace, latency: float) -> None:
    cluster = FakeCluster(KAFKA_3_9, brokers=args.brokers, dirs=["/d1", "/d2", "/d3", "/d4"])
    for b in range(args.brokers):
        cluster.brokers[b].canned = True
        cluster.brokers[b].latency = latency
        for p in range(args.replicas):
            cluster.add_replica(b, f"/d{p % 4 + 1}", f"topic{p // 100}", p % 100 + 100 * b, 1 << 20)
    now = datetime.now(UTC)
    total = args.brokers * args.replicas
    with cluster:
        brokers = [BrokerEndpoint("bench", i, "127.0.0.1", b.port) for i, b in cluster.brokers.items()]

        def ours(parallelism: int) -> int:
            return sum(len(r.replicas) for r in query_brokers(brokers, parallelism, 60, now))

        ours(args.brokers)  # every broker encodes its canned answer once
        par_s, rows = timed(lambda: ours(args.brokers), args.repeat)
        seq_s, _ = timed(lambda: ours(1), max(1, args.repeat // 3))
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(",")[0], request_timeout_ms=60000)
        try:
            admin.describe_log_dirs()
            theirs_s, reply = timed(admin.describe_log_dirs, max(1, args.repeat // 3))
        finally:
            admin.close()
        spark_s = None
        if args.spark and latency:
            from mover.audit.collect import collect_spark
            from mover.audit.fleet import ClusterSource, discover
            from mover.audit.spark import session

            spark = session("local[2]", 2)
            view = discover(ClusterSource("bench", bootstrap=cluster.bootstrap))
            out = bench_root()
            try:
                t0 = time.perf_counter()
                collect_spark(spark, [view], out, parallelism=25)
                spark_s = time.perf_counter() - t0
            finally:
                spark.stop()
                shutil.rmtree(out, ignore_errors=True)
    assert rows == total == kafka_python_rows(reply), (rows, total)  # type: ignore[arg-type]
    print(f"2. {args.brokers} fake brokers x {args.replicas} replicas ({total:,} rows), canned answers, "
          f"{latency * 1000:.0f} ms before each answer")
    print(f"   collect, {args.brokers} at once:         {par_s * 1000:8.1f} ms  {total / par_s:12,.0f} rows/s")
    print(f"   collect, one at a time:         {seq_s * 1000:8.1f} ms  {total / seq_s:12,.0f} rows/s")
    print(f"   kafka-python describe_log_dirs: {theirs_s * 1000:8.1f} ms  {total / theirs_s:12,.0f} rows/s")
    print(f"   ratio ours / kafka-python: {theirs_s / par_s:.2f}; parallel / sequential speed-up: "
          f"{seq_s / par_s:.2f}")
    if spark_s is not None:
        print(f"   collect in Spark tasks (local[2], snapshot written): {spark_s:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--brokers", type=int, default=50)
    ap.add_argument("--replicas", type=int, default=2_000)
    ap.add_argument("--latency-ms", type=float, default=50.0, help="second fleet run: delay of each answer")
    ap.add_argument("--spark", action="store_true")
    args = ap.parse_args()
    one_broker(args)
    fleet(args, 0.0)
    fleet(args, args.latency_ms / 1000)


if __name__ == "__main__":
    main()
