"""Disk budgets against Kafka (docs/audit.md "Disk budgets"): Kafka has one log-dir move quota per broker, so the
executor sets each broker's quota to the smallest budget of the disks its running moves touch, before they start,
and raises it again as they end; the fake cluster records every value set."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.admin.limits import DiskLimits, RunLimits, read_limits
from mover.audit.cli import build_parser
from mover.audit.executor.moves import Move, State
from mover.audit.executor.throttles import broker_rates
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing.execute_plan import execute, write_plan
from mover.testing.fake_kafka import KAFKA_3_9, FakeCluster

DIRS = ["/d1", "/d2", "/d3", "/d4"]


def move(broker: int, partition: int, from_dir: str, to_dir: str, size: int) -> dict[str, object]:
    return {"cluster": "east", "broker": broker, "topic": "t", "partition": partition, "from_dir": from_dir,
            "to_dir": to_dir, "size_bytes": size, "step": 0}


def test_a_brokers_quota_is_the_smallest_budget_of_its_running_moves(tmp_path: Path) -> None:
    cluster = FakeCluster(KAFKA_3_9, brokers=2, dirs=DIRS, move_step=100)
    # Broker 0: two moves at once (four distinct disks), into budgeted dirs; the smaller (into /d4) ends first.
    # Broker 1: a move between dirs without budget keeps the run's throttle.
    cluster.add_replica(0, "/d1", "t", 0, 2000)
    cluster.add_replica(0, "/d3", "t", 1, 500)
    cluster.add_replica(1, "/d1", "t", 2, 500)
    plan = write_plan(tmp_path / "plan", [move(0, 0, "/d1", "/d2", 2000), move(0, 1, "/d3", "/d4", 500),
                                          move(1, 2, "/d1", "/d3", 500)])
    with cluster:
        rc, out = execute(cluster, plan, "--throttle", "5000", "--disk-budget", "/d2=3000", "--disk-budget",
                          "/d4/=2000", "--disk-budget", "/d3=9000")
    assert rc == 0, out
    assert "executed: 3 done" in out
    assert cluster.peak("broker") == 2  # both moves of broker 0 ran at once, under the budget of /d4
    assert cluster.brokers[0].config_history == [(THROTTLE_KAFKA_KEY, v) for v in ("5000", "2000", "3000", None)]
    # /d3's budget is above the run's throttle: the throttle holds.
    assert cluster.brokers[1].config_history == [(THROTTLE_KAFKA_KEY, "5000"), (THROTTLE_KAFKA_KEY, None)]
    assert "throttle set to 2000 B/s (2.0 KiB/s) on brokers 0 of east (the budget of /d4)" in out
    assert "throttle set to 3000 B/s (2.9 KiB/s) on brokers 0 of east (the budget of /d2)" in out
    assert "disk budgets /d2 3000 B/s (2.9 KiB/s), /d3 9000 B/s (8.8 KiB/s), /d4 2000 B/s" in out


def test_one_move_into_and_out_of_a_disk_at_a_time_by_default(tmp_path: Path) -> None:
    cluster = FakeCluster(KAFKA_3_9, brokers=1, dirs=DIRS, move_step=100)
    # Every move touches /d1, into or out of it: one at a time; moves on disjoint disks would run together.
    for p, src in enumerate(["/d1", "/d3", "/d1"]):
        cluster.add_replica(0, src, "t", p, 500)
    plan = write_plan(tmp_path / "plan", [move(0, 0, "/d1", "/d2", 500), move(0, 1, "/d3", "/d1", 500),
                                          move(0, 2, "/d1", "/d4", 500)])
    with cluster:
        rc, out = execute(cluster, plan, "--max-moves-per-broker", "3")
    assert rc == 0, out
    assert cluster.peak("dir") == 1 and cluster.peak("broker") == 1


def test_budgets_of_a_limits_file_and_their_refusals(tmp_path: Path) -> None:
    base = RunLimits(disks=DiskLimits())
    path = tmp_path / "limits.toml"
    path.write_text('[disk_budgets]\n"/data/1/" = 1000\n"/data/2" = 500\n')
    assert read_limits(path, base).disks == DiskLimits(budgets=(("/data/1", 1000), ("/data/2", 500)))
    for bad in ('disk_budgets = 5\n', '[disk_budgets]\n"data" = 5\n', '[disk_budgets]\n"/d" = 0\n'):
        path.write_text(bad)
        with pytest.raises(Exception, match="disk_budgets"):
            read_limits(path, base)


@pytest.mark.parametrize("bad", ["/d1", "d1=5", "/d1=0", "/d1=x", "/d1=-1"])
def test_a_bad_disk_budget_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["execute", "--plan", "p", "--bootstrap-server", "h:1", "--disk-budget", bad]
    with pytest.raises(SystemExit) as e:
        build_parser(argv)[0].parse_args(argv)
    assert e.value.code == 2
    assert "expected LOG_DIR=BYTES_PER_S" in capsys.readouterr().err


def test_broker_rates_count_running_and_starting_moves_only() -> None:
    def m(p: int, src: str, dst: str, state: State) -> Move:
        return Move("east", 0, "t", p, src, dst, 1, 0, state=state)

    limits = RunLimits(throttle=None, disks=DiskLimits(budgets=(("/a", 100), ("/b", 50))))
    done, pending = m(0, "/x", "/b", State.DONE), m(1, "/x", "/a", State.PENDING)
    assert broker_rates([done, pending], [], limits) == {("east", 0): (None, None)}
    assert broker_rates([done, pending], [pending], limits) == {("east", 0): (100, "/a")}
    running = m(2, "/b", "/y", State.RUNNING)
    assert broker_rates([done, pending, running], [pending], limits) == {("east", 0): (50, "/b")}


def test_a_move_whose_start_got_no_answer_is_followed_under_its_budget(tmp_path: Path) -> None:
    # The broker takes the AlterReplicaLogDirs and dies before answering; back, Kafka resumes the copy. Seen in a
    # real cluster: the copy then ran under the run's throttle (the quota of a broker with no move of the run
    # running), and the balancer paused for a log-dir move "it did not start".
    cluster = FakeCluster(KAFKA_3_9, brokers=1, dirs=DIRS, move_step=100)
    cluster.add_replica(0, "/d1", "t", 0, 1000)
    cluster.brokers[0].unanswered_alters = 1
    plan = write_plan(tmp_path / "plan", [move(0, 0, "/d1", "/d2", 1000)])
    with cluster:
        rc, out = execute(cluster, plan, "--throttle", "5000", "--disk-budget", "/d2=3000")
    assert rc == 0, out
    assert "broker 0 of east does not answer" in out
    assert "found t-0 on broker 0 of east copying: its broker took the move before it stopped answering" in out
    assert "executed: 1 done" in out
    # Never the run's throttle while the copy ran: 5000 is set first (no move yet), then the budget, then removed.
    assert cluster.brokers[0].config_history == [(THROTTLE_KAFKA_KEY, v) for v in ("5000", "3000", None)], out
