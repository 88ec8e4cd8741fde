"""execute on the step engine's loop: a plan whose moves change brokers (the optional `to_broker` column) runs in the
same loop as its log-dir moves, under its own limits. The brokers are fake Kafka brokers (log dirs, Metadata) and the
reassignments go to the step engine's simulated KIP-455 controller (mover/testing/sim_controller.py); the real
cluster's steps are in tests/kafka/reassign/test_reassign_execute.py."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mover.admin.limits import DiskLimits, RunLimits
from mover.admin.reassign import run, step_engine
from mover.admin.reassign.progress import ReplicaStatus
from mover.admin.reassign.steps import Limits
from mover.audit.cli import main
from mover.audit.executor import clusters, loop, schedule
from mover.audit.executor.moves import Move, State
from mover.testing.execute_plan import SIZE, execute, make_cluster, where, write_plan_with_to_broker
from mover.testing.sim_controller import SimController


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
    # The engine's per-replica call: every new replica seen with nothing copied yet (the fake's brokers 2 and 3
    # are the simulated controller's).
    monkeypatch.setattr(step_engine, "replica_statuses", lambda client, replicas, **kw: [
        ReplicaStatus(r.topic, r.partition, r.broker, "In progress") for r in replicas])
    monkeypatch.setattr(clusters, "list_reassignments", sim.list_reassignments)
    monkeypatch.setattr(run, "min_insync_replicas", lambda client, topics: {t: 1 for t in topics})
    return sim


def test_a_plan_that_moves_replicas_between_brokers_runs_beside_its_disk_moves(
        tmp_path: Path, controller: SimController) -> None:
    cluster, disk_moves = make_cluster(brokers=2, per_broker=2)
    for p in range(4):
        cluster.add_replica(0, "/d1", "t2", p, SIZE)
    broker_moves = [{"cluster": "east", "broker": 0, "topic": "t2", "partition": p, "from_dir": "/d1",
                     "to_dir": "any", "size_bytes": SIZE, "step": 0, "to_broker": 1} for p in range(4)]
    plan = write_plan_with_to_broker(tmp_path / "plan", disk_moves + broker_moves)
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
    plan = write_plan_with_to_broker(tmp_path / "plan", [{"cluster": "east", "broker": 0, "topic": "t2",
                                                          "partition": 0, "from_dir": "/d1", "to_dir": "/d2",
                                                          "size_bytes": SIZE, "step": 0, "to_broker": 1}])
    with cluster:
        rc, out = execute(cluster, plan, "--throttle", "-1")
    assert rc == 0, out
    assert "1 move(s) already done (checked on the brokers)" in out
    assert controller.history[("t2", 0)] == [(0,)]


def _four_partitions_to_broker_1(tmp_path: Path) -> tuple[Any, Path]:
    cluster, _ = make_cluster(brokers=2, per_broker=0)
    for p in range(4):
        cluster.add_replica(0, "/d1", "t2", p, SIZE)
    plan = write_plan_with_to_broker(tmp_path / "plan", [{"cluster": "east", "broker": 0, "topic": "t2",
                                                          "partition": p, "from_dir": "/d1", "to_dir": "any",
                                                          "size_bytes": SIZE, "step": 0, "to_broker": 1}
                                                         for p in range(4)])
    return cluster, plan


def test_kip435_limits_are_execute_options(tmp_path: Path, controller: SimController,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--max-partition-movements bounds the partitions moving between brokers on its own (--max-moves is larger);
    the three KIP-435 options are documented with their defaults."""
    cluster, plan = _four_partitions_to_broker_1(tmp_path)
    with cluster:
        rc, out = execute(cluster, plan, "--max-partition-movements", "1", "--throttle", "-1")
    assert rc == 0, out
    assert controller.peak == 1  # type: ignore[attr-defined]
    assert "between brokers max 1 partition movements, 1 replica movements per partition, 2 leader movements" in out
    assert all(controller.replicas[("t2", p)] == (1,) for p in range(4)), out
    assert main(["execute", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option, default in (("--max-partition-movements", 5), ("--max-replica-movements", 1),
                            ("--max-leader-movements", 2)):
        assert re.search(rf"{option} N [^-]*\(default {default}\)", text), option


def test_kip435_limits_are_limits_file_keys(tmp_path: Path, controller: SimController) -> None:
    """The limits file sets KIP-435's limits as it sets the disk limits: over the option's 1, it allows 3."""
    cluster, plan = _four_partitions_to_broker_1(tmp_path)
    limits = tmp_path / "limits.toml"
    limits.write_text("max_partition_movements = 3\nmax-leader-movements = 3\n")
    with cluster:
        rc, out = execute(cluster, plan, "--max-partition-movements", "1", "--limits", str(limits), "--throttle",
                          "-1")
    assert rc == 0, out
    assert controller.peak == 3  # type: ignore[attr-defined]
    assert "between brokers max 3 partition movements, 1 replica movements per partition, 3 leader movements" in out


def test_partitions_moving_between_brokers_take_their_share_of_max_moves() -> None:
    """The pure scheduler: --max-moves bounds a cluster's moves of both kinds, so with one partition moving between
    brokers (two of its replicas) and --max-moves 2, one log-dir move may start, not two."""
    between = [Move("east", b, "t", 0, "/d1", "/d1", SIZE, 0, state=State.RUNNING, to_broker=b + 2) for b in (0, 1)]
    disk = [Move("east", 0, "u", p, "/d1", "/d2" if p else "/d3", SIZE, 0) for p in range(2)]
    assert schedule.startable(between + disk, DiskLimits(per_disk=2, per_broker=2, per_cluster=2)) == disk[:1]
    assert schedule.startable(disk, DiskLimits(per_disk=2, per_broker=2, per_cluster=2)) == disk


def test_a_log_dir_move_of_a_partition_moving_between_brokers_waits_for_that_move() -> None:
    """The pure scheduler: a broker's log-dir move of a partition the plan also reassigns starts only once that
    reassignment has ended (done or failed), and holds back that broker's later steps meanwhile; other partitions'
    moves are not held."""
    limits = DiskLimits(per_disk=4, per_broker=4, per_cluster=8)
    across = Move("east", 1, "t", 0, "/d1", "/d2", SIZE, 1, to_broker=3)
    same = Move("east", 2, "t", 0, "/d1", "/d2", SIZE, 1)
    later = Move("east", 2, "u", 0, "/d1", "/d3", SIZE, 2)
    other = Move("east", 4, "u", 1, "/d1", "/d2", SIZE, 1)
    for state in (State.PENDING, State.RUNNING):
        across.state = state
        assert schedule.startable([across, same, later, other], limits) == [other]
    for state in (State.DONE, State.FAILED):
        across.state = state
        assert schedule.startable([across, same, later, other], limits) == [same, other]
    # Another cluster's partition of the same name is another partition.
    across.state = State.RUNNING
    elsewhere = Move("west", 2, "t", 0, "/d1", "/d2", SIZE, 1)
    assert schedule.startable([across, elsewhere], limits) == [elsewhere]


def test_the_step_engine_lane_gets_what_the_log_dir_moves_leave_of_max_moves() -> None:
    """BrokerMoves hands the engine KIP-435's limits with the partition movements capped by --max-moves less the
    cluster's running log-dir moves, and lets it start nothing when that leaves no room."""

    class Engine:
        def __init__(self, running: int) -> None:
            self.limits: RunLimits | None = None
            self.started: list[bool] = []
            self._running = [object()] * running

        def running(self) -> list[object]:
            return self._running

        def advance(self, start: bool) -> None:
            self.started.append(start)

    disk_running = [Move("east", 0, "u", p, "/d1", "/d2", SIZE, 0, state=State.RUNNING) for p in range(2)]
    cluster = SimpleNamespace(moves=disk_running)
    limits = RunLimits(Limits(5, 1, 2), None, DiskLimits(per_disk=4, per_broker=4, per_cluster=3))
    for running, start, cap in ((0, True, 1), (1, False, 1)):
        engine = Engine(running)
        lane = loop.BrokerMoves(engine, [], cluster, limits)  # type: ignore[arg-type]
        lane.advance(True)
        assert engine.started == [start]
        assert engine.limits is not None and engine.limits.steps == Limits(cap, 1, 2)
    engine = Engine(0)
    loop.BrokerMoves(engine, [], SimpleNamespace(moves=[]), limits).advance(True)  # type: ignore[arg-type]
    assert engine.started == [True] and engine.limits is not None and engine.limits.steps == Limits(3, 1, 2)


def test_a_to_broker_the_cluster_lacks_is_refused_before_anything_changes(
        tmp_path: Path, controller: SimController, capsys: pytest.CaptureFixture[str]) -> None:
    # It started the plan's other moves and set the throttles, then died on the broker's INVALID_CONFIG.
    cluster, disk_moves = make_cluster(brokers=2, per_broker=1)
    for p in range(4):
        cluster.add_replica(0, "/d1", "t2", p, SIZE)
    broker_moves = [{"cluster": "east", "broker": 0, "topic": "t2", "partition": p, "from_dir": "/d1",
                     "to_dir": "any", "size_bytes": SIZE, "step": 0, "to_broker": 1} for p in range(4)]
    broker_moves[1]["to_broker"] = 99
    broker_moves[3]["to_broker"] = 98
    plan = write_plan_with_to_broker(tmp_path / "plan", disk_moves + broker_moves)
    with cluster:
        for argv in ([], ["--dry-run"]):
            rc = main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
                       *argv])
            err = capsys.readouterr().err
            assert rc == 1 and err == (
                f"mover-audit: error: plan {plan}: 2 move(s) name what cluster east does not have (brokers 0,1); "
                "nothing was changed: t2-1 from broker 0 to 99 of east: broker 99 is not in the cluster; t2-3 from "
                "broker 0 to 98 of east: broker 98 is not in the cluster\n"), err
    assert all(b.config_history == [] for b in cluster.brokers.values())
    assert cluster.peak_moves == {}
    assert all(controller.history[("t2", p)] == [(0,)] for p in range(4))
