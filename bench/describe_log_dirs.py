"""DescribeLogDirs of 10,000 partitions over 4 log dirs: server latency (raw v1 request) and kafka-python's.

Builds the dirs directly (bench/startup.py's builder), starts a real moverd on them, then times N raw v1 requests
for every partition (`topics: null`) on one connection, and kafka-python 3.0.12's `describe_log_dirs()`, which
adds its own decoding. Goal (issue 8): raw p50 under 15 ms and p99 under 30 ms on a quiet machine. Anchors: a real
Kafka 2.3 broker on the same kind of machine, raw v1 p50 65 ms and kafka-python 325 ms; and in the same run, the
in-process encode of the same answer through the generic dict encoder (what the broker did before rows).
Usage: python bench/describe_log_dirs.py [--partitions 10000] [--raw 200] [--client 20] [--created]

`--created` (issue 38): the partitions are made by CreateTopics over the wire (topics of 1,000 partitions) on a
moverd started empty, timed there, then the same moverd restarted on those dirs and timed again: the two in one run.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.admin import KafkaAdminClient  # noqa: E402

from bench.common import bench_root, pct, summary  # noqa: E402
from bench.startup import build  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.wire import decode_response, encode_response  # noqa: E402
from mover.wire.messages import CREATE_TOPICS, DESCRIBE_LOG_DIRS  # noqa: E402

# The real broker's raw v1 p50 and kafka-python's describe_log_dirs() for 10,000 partitions (docs/kafka-compat.md,
# "the bench anchors").
KAFKA_RAW_P50_S = 0.065
KAFKA_PYTHON_P50_S = 0.325


def _encode_anchor(frame: bytes, n: int = 30) -> tuple[list[float], list[float]]:
    """The same answer encoded both ways in this process: dict per partition vs schema-ordered rows."""
    _, body = decode_response(DESCRIBE_LOG_DIRS, 1, frame)
    names = ("partition_index", "partition_size", "offset_lag", "is_future_key")
    as_rows = copy.deepcopy(body)
    for r in as_rows["results"]:
        for t in r["topics"]:
            t["partitions"] = [tuple(p[k] for k in names) for p in t["partitions"]]
    out: tuple[list[float], list[float]] = ([], [])
    for which, b in enumerate((body, as_rows)):
        for _ in range(n):
            t0 = time.perf_counter()
            encode_response(DESCRIBE_LOG_DIRS, 1, 1, b)
            out[which].append(time.perf_counter() - t0)
    return out


def _time_raw(port: int, n: int) -> tuple[list[float], bytes]:
    raw: list[float] = []
    frame: bytes | None = None
    with RawClient(port) as c:
        request = c.request_bytes(DESCRIBE_LOG_DIRS, 1, {"topics": None})
        for i in range(n + 5):
            t0 = time.perf_counter()
            c.send(request)
            frame = c.recv_frame()
            if i >= 5:  # the first few warm caches and the thread pool
                raw.append(time.perf_counter() - t0)
    assert frame is not None
    return raw, frame


def _created(args: argparse.Namespace) -> None:
    root = bench_root()
    dirs = [root / f"d{i}" for i in range(1, 5)]
    per_topic = 1000
    try:
        d = Moverd(root, dirs=dirs)
        with d:
            with RawClient(d.port) as c:
                left, i = args.partitions, 0
                while left > 0:
                    n = min(per_topic, left)
                    topic = {"name": f"created-{i}", "num_partitions": n, "replication_factor": 1,
                             "assignments": [], "configs": []}
                    body = c.call(CREATE_TOPICS, 4, {"topics": [topic], "timeout_ms": 600000,
                                                     "validate_only": False})[1]
                    assert body["topics"][0]["error_code"] == 0, body
                    left, i = left - n, i + 1
            created, frame = _time_raw(d.port, args.raw)
        d.start()
        try:
            loaded, _ = _time_raw(d.port, args.raw)
        finally:
            d.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"DescribeLogDirs raw v1, {args.partitions} partitions made by CreateTopics ({len(frame):,} byte response)")
    print(f"after CreateTopics:       {summary(created)} (goal p50 < 15 ms, p99 < 30 ms)")
    print(f"same dirs, after restart: {summary(loaded)}")
    print(f"ratio created / restarted (p50): {pct(created, 50) / pct(loaded, 50):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--raw", type=int, default=200)
    ap.add_argument("--client", type=int, default=20)
    ap.add_argument("--created", action="store_true", help="partitions made by CreateTopics (see the docstring)")
    args = ap.parse_args()
    if args.created:
        _created(args)
        return
    root = bench_root()
    dirs = [root / f"d{i}" for i in range(1, 5)]
    build(dirs, args.partitions, 0)
    try:
        with Moverd(root, dirs=dirs) as d:
            raw, frame = _time_raw(d.port, args.raw)
            size = len(frame)
            admin = KafkaAdminClient(bootstrap_servers=d.bootstrap, request_timeout_ms=60000)
            try:
                client: list[float] = []
                for i in range(args.client + 1):
                    t0 = time.perf_counter()
                    result = admin.describe_log_dirs()
                    if i >= 1:
                        client.append(time.perf_counter() - t0)
                listed = sum(len(t["partitions"]) for r in result[0]["log_dirs"] for t in r["topics"])
            finally:
                admin.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert listed == args.partitions, listed
    print(f"DescribeLogDirs, {args.partitions} partitions over 4 log dirs ({size:,} byte v1 response)")
    print(f"raw v1 request:               {summary(raw)} (goal p50 < 15 ms, p99 < 30 ms)")
    dicts, rows = _encode_anchor(frame)
    print(f"encode only, dict per partition (generic): {summary(dicts)}")
    print(f"encode only, rows (this broker):           {summary(rows)}")
    print(f"ratio rows / dicts (p50): {pct(rows, 50) / pct(dicts, 50):.2f}")
    print(f"kafka-python describe_log_dirs: {summary(client)}")
    print(f"ratio kafka-python / raw (p50): {pct(client, 50) / pct(raw, 50):.1f}")
    print(f"ratio raw p50 / real Kafka raw p50 (65 ms): {pct(raw, 50) / KAFKA_RAW_P50_S:.2f}; "
          f"kafka-python here / there (325 ms): {pct(client, 50) / KAFKA_PYTHON_P50_S:.2f}")


if __name__ == "__main__":
    main()
