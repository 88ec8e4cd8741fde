"""CreateTopics, CreatePartitions and DeleteTopics of the same topics racing from many connections, for longer than
the CI test (tests/api/test_topic_races.py): moverd, then, side by side in the same run, a real Apache Kafka 3.7 node
(KRaft, 2 log dirs, the heap of its own start script) under the same race as the anchor.

For each broker it prints requests answered per second and every (request, error code) count; for moverd it checks
what the issue asks (issue 35): no answer outside Kafka's race codes, every log dir online, no partition dir that is
not published, and the same topics after kill -9 and a restart. The ratio is moverd's answered requests per second
over Kafka's. Exit 1 if a check fails.
Usage: python bench/admin_race.py [--seconds 60] [--threads 8] [--topics 4] [--no-kafka]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.storage.names import DirKind, parse_partition_dir  # noqa: E402
from mover.testing.admin_race import RaceOutcome, race_topic_admin  # noqa: E402
from mover.testing.kafka_cluster import KafkaCluster  # noqa: E402
from mover.testing.kafka_home import kafka_home  # noqa: E402
from mover.testing.kafka_node import KAFKA_START_SCRIPT_HEAP  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import raw_call  # noqa: E402
from mover.wire.messages import DESCRIBE_LOG_DIRS, METADATA  # noqa: E402


def _show(name: str, outcome: RaceOutcome, seconds: float) -> float:
    rate = outcome.requests / seconds
    codes = ", ".join(f"{k} {c}: {n}" for (k, c), n in sorted(outcome.answers.items()))
    print(f"{name:7} {outcome.requests:7} requests, {rate:8.1f}/s   {codes}")
    return rate


def _counts(port: int) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in raw_call(port, METADATA, 1, {"topics": None})["topics"]}


def _live(dirs: list[Path]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for p in dirs:
        for entry in p.iterdir():
            parsed = parse_partition_dir(entry.name)
            if parsed is not None and parsed.kind == DirKind.CURRENT:
                out.setdefault(parsed.tp.topic, set()).add(parsed.tp.partition)
    return out


def _moverd(root: Path, topics: list[str], threads: int, seconds: float) -> tuple[float, list[str]]:
    problems: list[str] = []
    (root / "moverd").mkdir()
    with Moverd(root / "moverd") as d:
        outcome = race_topic_admin(d.port, topics, threads=threads, seconds=seconds)
        rate = _show("moverd", outcome, seconds)
        problems += [f"unexpected answer: {u}" for u in outcome.unexpected[:5]]
        body = raw_call(d.port, DESCRIBE_LOG_DIRS, 1, {"topics": None})
        problems += [f"log dir {r['log_dir']} answers {r['error_code']}" for r in body["results"] if r["error_code"]]
        before = _counts(d.port)
        if _live(d.dirs) != {t: set(range(n)) for t, n in before.items()}:
            problems.append(f"partition dirs on disk {_live(d.dirs)} differ from the topics {before}")
        d.kill()
        d.start()
        if _counts(d.port) != before:
            problems.append(f"after kill -9: topics {_counts(d.port)}, before {before}")
    return rate, problems


def _kafka(root: Path, topics: list[str], threads: int, seconds: float) -> float | None:
    home = kafka_home()
    if home is None:
        print("kafka   skipped: no Apache Kafka 3.7 (see mover/testing/kafka_home.py)")
        return None
    with KafkaCluster(root / "kafka", home, brokers=1, log_dirs=2, heap=KAFKA_START_SCRIPT_HEAP) as k:
        port = int(k.bootstrap.rsplit(":", 1)[1])
        outcome = race_topic_admin(port, topics, threads=threads, seconds=seconds)
        rate = _show("kafka", outcome, seconds)
        # The codes the CI test accepts are Kafka's own: the real broker should answer nothing else either.
        print(f"kafka   answers outside the expected race codes: {len(outcome.unexpected)} {outcome.unexpected[:3]}")
        return rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--topics", type=int, default=4, help="how many topic names the threads race on")
    ap.add_argument("--no-kafka", action="store_true", help="skip the Kafka anchor")
    args = ap.parse_args()
    topics = [f"race-{i}" for i in range(args.topics)]
    root = bench_root()
    try:
        ours, problems = _moverd(root, topics, args.threads, args.seconds)
        theirs = None if args.no_kafka else _kafka(root, topics, args.threads, args.seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if theirs:
        print(f"ratio moverd / kafka (requests answered per second): {ours / theirs:.2f}")
    for p in problems:
        print(f"FAIL: {p}")
    print("moverd checks:", "FAILED" if problems else "all held")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
