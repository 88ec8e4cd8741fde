"""execute on the step engine's loop: a plan whose moves change brokers (the optional `to_broker` column) runs in the
same loop as its log-dir moves, under its own limits. The brokers are fake Kafka brokers (log dirs, Metadata) and the
reassignments go to the step engine's simulated KIP-455 controller (tests/admin/test_step_engine.py); the real
cluster's steps are in tests/kafka/test_reassign.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mover.admin import step_engine
from mover.audit import execute as execute_module
from tests.admin.test_step_engine import SimController
from tests.audit.test_execute import SIZE, execute, make_cluster, where

SCHEMA = pa.schema([("cluster", pa.string()), ("broker", pa.int32()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("from_dir", pa.string()), ("to_dir", pa.string()),
                    ("size_bytes", pa.int64()), ("step", pa.int32()), ("to_broker", pa.int32())])


def write_plan(path: Path, moves: list[dict[str, Any]]) -> Path:
    (path / "moves").mkdir(parents=True)
    rows = [{"to_broker": None, **m} for m in moves]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path / "moves" / "part-00000.parquet")
    return path


@pytest.fixture
def controller(monkeypatch: pytest.MonkeyPatch) -> SimController:
    """Partitions t2-0..3 with one replica, on broker 0; the step engine and execute's check talk to it."""
    sim = SimController({("t2", p): (0,) for p in range(4)})
    sim.peak = 0  # type: ignore[attr-defined]
    alter = sim.alter_reassignments

    def counted(client: Any, targets: dict[Any, Any]) -> dict[Any, Any]:
        refused = alter(client, targets)
        sim.peak = max(sim.peak, len(sim.ongoing))  # type: ignore[attr-defined]
        return refused

    for name, fn in (("partition_states", sim.partition_states), ("list_reassignments", sim.list_reassignments),
                     ("alter_reassignments", counted), ("elect_preferred", sim.elect_preferred)):
        monkeypatch.setattr(step_engine, name, fn)
    monkeypatch.setattr(step_engine, "describe_broker", lambda client, broker, topics: [])
    monkeypatch.setattr(execute_module, "list_reassignments", sim.list_reassignments)
    monkeypatch.setattr(execute_module, "min_insync_replicas", lambda client, topics: {t: 1 for t in topics})
    return sim


def test_a_plan_that_moves_replicas_between_brokers_runs_beside_its_disk_moves(
        tmp_path: Path, controller: SimController) -> None:
    cluster, disk_moves = make_cluster(brokers=2, per_broker=2)
    for p in range(4):
        cluster.add_replica(0, "/d1", "t2", p, SIZE)
    broker_moves = [{"cluster": "east", "broker": 0, "topic": "t2", "partition": p, "from_dir": "/d1",
                     "to_dir": "/d2", "size_bytes": SIZE, "step": 0, "to_broker": 1} for p in range(4)]
    plan = write_plan(tmp_path / "plan", disk_moves + broker_moves)
    with cluster:
        rc, out = execute(cluster, plan, "--dry-run", "--max-moves", "2", "--throttle", "-1")
        assert rc == 0, out
        assert "between brokers, in KIP-435 steps (at most 2 partitions at once): 4 partition(s)" in out
        assert "  t2-3 of east: replicas [0] -> [1]" in out
        assert controller.history[("t2", 0)] == [(0,)]  # a dry run starts nothing

        rc, out = execute(cluster, plan, "--max-moves", "2", "--throttle", "-1")
    assert rc == 0, out
    assert all(where(cluster, m["broker"], m["topic"], m["partition"]) == m["to_dir"] for m in disk_moves)
    assert all(controller.replicas[("t2", p)] == (1,) for p in range(4)), out
    assert "Partition t2-0: step 2 done, replicas [1] (final)" in out, out
    assert "executed: 8 done" in out
    # --max-moves bounds the partitions moving between brokers too, and was reached.
    assert controller.peak == 2  # type: ignore[attr-defined]


def test_a_move_between_brokers_already_done_is_not_started_again(tmp_path: Path,
                                                                   controller: SimController) -> None:
    cluster, _ = make_cluster(brokers=2, per_broker=0)
    cluster.add_replica(1, "/d1", "t2", 0, SIZE)  # the plan's t2-0 is on broker 1 already
    plan = write_plan(tmp_path / "plan", [{"cluster": "east", "broker": 0, "topic": "t2", "partition": 0,
                                           "from_dir": "/d1", "to_dir": "/d2", "size_bytes": SIZE, "step": 0,
                                           "to_broker": 1}])
    with cluster:
        rc, out = execute(cluster, plan, "--throttle", "-1")
    assert rc == 0, out
    assert "1 move(s) already done (checked on the brokers)" in out
    assert controller.history[("t2", 0)] == [(0,)]
