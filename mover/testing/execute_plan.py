"""`mover-audit execute` carried out in the test's own process on a plan a test writes (tests/audit/test_execute_*.py,
tests/audit/test_collect_secure.py, tests/kafka/test_unswapped_kafka.py): fake Kafka brokers holding the replicas a
plan moves (`make_cluster`), the plan's moves dataset written as `plan` writes it (`write_plan`; with the optional
`to_broker` column, `write_plan_with_to_broker`), execute run on them (`execute`), and where a replica is now
(`where`).

    cluster, moves = make_cluster(brokers=3)            # 6 partitions a broker on /d1, to /d2 and /d3 alternately
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan, "--max-moves", "3", "--throttle", "5000")
    assert all(where(cluster, m["broker"], m["topic"], m["partition"]) == m["to_dir"] for m in moves)
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mover.audit import plan_layout
from mover.audit.cli import build_parser
from mover.audit.execute import run
from mover.testing.fake_kafka import KAFKA_3_9, FakeCluster

DIRS = ["/d1", "/d2", "/d3"]
SIZE = 1000
STEP = 100  # a move takes ten DescribeLogDirs polls of its broker


def make_cluster(version: Any = KAFKA_3_9, brokers: int = 2, per_broker: int = 6) -> tuple[FakeCluster,
                                                                                           list[dict[str, Any]]]:
    """Each broker holds `per_broker` partitions on /d1; the plan moves them to /d2 and /d3 alternately."""
    cluster = FakeCluster(version, brokers=brokers, dirs=DIRS, move_step=STEP)
    moves = []
    for b in range(brokers):
        for p in range(per_broker):
            cluster.add_replica(b, "/d1", f"t{b}", p, SIZE)
            moves.append({"cluster": "east", "broker": b, "topic": f"t{b}", "partition": p, "from_dir": "/d1",
                          "to_dir": DIRS[1 + p % 2], "size_bytes": SIZE, "step": 0})
    return cluster, moves


def write_plan(path: Path, moves: list[dict[str, Any]]) -> Path:
    """The plan directory `path` with `moves` as its moves dataset, of the required columns only."""
    (path / "moves").mkdir(parents=True)
    schema = plan_layout.arrow_schema(plan_layout.MOVES)
    pq.write_table(pa.Table.from_pylist(moves, schema=schema), path / "moves" / "part-00000.parquet")
    return path


def write_plan_with_to_broker(path: Path, moves: list[dict[str, Any]]) -> Path:
    """As write_plan, with the optional columns too: `to_broker` null for a move that does not set it (a move
    between the dirs of its broker)."""
    (path / "moves").mkdir(parents=True)
    schema = plan_layout.arrow_schema({**plan_layout.MOVES, **plan_layout.MOVES_OPTIONAL})
    rows = [{"to_broker": None, **m} for m in moves]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "moves" / "part-00000.parquet")
    return path


def execute(cluster: FakeCluster, plan: Path, *extra: str, out: io.StringIO | None = None) -> tuple[int, str]:
    """execute's exit code and what it printed (into `out` as it goes, if given: a test watching a run in a thread),
    for the plan's cluster `east` on `cluster`, polling every 5 ms."""
    argv = ["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
            "--poll-interval", "0.005", *extra]
    parser, _ = build_parser(argv)
    buffer = out or io.StringIO()
    rc = run(parser.parse_args(argv), buffer)
    return rc, buffer.getvalue()


def where(cluster: FakeCluster, broker: int, topic: str, partition: int) -> str | None:
    """The log dir holding the replica's current copy on `broker`, None if it has none."""
    with cluster.lock:
        return cluster.brokers[broker].where(topic, partition)
