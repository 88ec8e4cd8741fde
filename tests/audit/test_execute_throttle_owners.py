"""Who owns a broker's log-dir throttle when several execute runs touch it: the cluster says (its status log), never
a file on one operator's machine. Against fake Kafka brokers: two runs of different plans on one broker (the second
never takes the first's throttle for the broker's own, and the last to leave puts the own back); a second run of
the same plan while the first is alive is refused; a run killed on another host is taken over only once its
heartbeat is late."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mover.admin.client import Client
from mover.admin.reassign import status_store
from mover.admin.reassign.status_store import DEAD, RUNNING, StatusStore
from mover.audit.cli import main
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing import prefork
from mover.testing.execute_plan import DIRS, SIZE, STEP, execute, where, write_plan
from mover.testing.fake_kafka import KAFKA_3_9, FakeCluster
from mover.testing.throttle_holds import log_dir_holds
from mover.testing.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


def _cluster() -> FakeCluster:
    cluster = FakeCluster(KAFKA_3_9, brokers=2, dirs=DIRS, move_step=STEP)
    for b in range(2):
        for p in range(2):
            cluster.add_replica(b, "/d1", f"t{b}", p, SIZE)
    return cluster


def _move(broker: int, partition: int) -> dict[str, object]:
    return {"cluster": "east", "broker": broker, "topic": f"t{broker}", "partition": partition, "from_dir": "/d1",
            "to_dir": "/d2", "size_bytes": SIZE, "step": 0}


def _in_thread(cluster: FakeCluster, plan: Path, *extra: str) -> tuple[threading.Thread, list[int], io.StringIO]:
    result: list[int] = []
    out = io.StringIO()
    worker = threading.Thread(target=lambda: result.append(execute(cluster, plan, *extra, out=out)[0]), daemon=True)
    worker.start()
    return worker, result, out


def test_two_plans_on_one_broker_share_its_own_throttle(tmp_path: Path) -> None:
    cluster = _cluster()
    cluster.brokers[0].configs[THROTTLE_KAFKA_KEY] = "5000"
    first = write_plan(tmp_path / "first", [_move(0, 0)])
    second = write_plan(tmp_path / "second", [_move(0, 1), _move(1, 0)])
    with cluster:
        for b in cluster.brokers.values():
            b.paused = True
        a, a_rc, a_out = _in_thread(cluster, first, "--throttle", "777")
        wait_for(lambda: cluster.brokers[0].configs.get(THROTTLE_KAFKA_KEY) == "777" and cluster.running_moves(),
                 message="the first run's move and throttle")
        b, b_rc, b_out = _in_thread(cluster, second, "--throttle", "999")
        wait_for(lambda: len(cluster.running_moves()) == 3, message="the second run's moves")
        # The second run read broker 0's throttle after the first had set it: the cluster gave it the first's record.
        assert "has its own throttle" not in b_out.getvalue()
        assert log_dir_holds(cluster.bootstrap) == {0: {THROTTLE_KAFKA_KEY: "5000"}, 1: {}}

        cluster.brokers[0].paused = False  # the first run's move ends; the second still waits on broker 1
        a.join(60)
        assert a_rc == [0], a_out.getvalue()
        assert "throttle left on brokers 0 of east: another run throttles them too" in a_out.getvalue()
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "999"}  # the second run's, not put back under it

        cluster.brokers[1].paused = False
        b.join(60)
        assert b_rc == [0], b_out.getvalue()
        assert log_dir_holds(cluster.bootstrap) == {}
    # The last to leave put back broker 0's own, as the first run had recorded it.
    assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
    assert cluster.brokers[1].configs == {}
    assert where(cluster, 0, "t0", 1) == "/d2" and where(cluster, 1, "t1", 0) == "/d2"


def test_a_second_run_of_the_same_plan_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _cluster()
    plan = write_plan(tmp_path / "plan", [_move(0, 0)])
    with cluster:
        cluster.brokers[0].paused = True
        first, rc, out = _in_thread(cluster, plan, "--throttle", "777")
        wait_for(lambda: cluster.brokers[0].configs.get(THROTTLE_KAFKA_KEY) == "777", message="the first run")
        code = main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east"])
        err = capsys.readouterr().err
        assert code == 1
        assert err.startswith(f"mover-audit: error: plan {plan} is being carried out on east by mover-audit execute "
                              f"pid {os.getpid()}") and err.count("\n") == 1, err
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "777"}  # the refused run changed nothing
        cluster.brokers[0].paused = False
        first.join(60)
        assert rc == [0], out.getvalue()
    assert cluster.brokers[0].configs == {}


def _dead(bootstrap: str) -> bool:
    client = Client(bootstrap)
    try:
        # Every request of the killed run (its throttle holds, its share of the balancer's lease) reads dead.
        states = [r.status() for r in StatusStore(client, tool="test").requests().values()]
        return DEAD in states and RUNNING not in states
    finally:
        client.close()


def test_a_run_killed_elsewhere_is_taken_over_once_its_heartbeat_is_late(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster()
    cluster.brokers[0].configs[THROTTLE_KAFKA_KEY] = "5000"
    plan = write_plan(tmp_path / "plan", [_move(0, 0)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "MOVER_REASSIGN_HEARTBEAT_S": "2"}
    with cluster:
        cluster.brokers[0].paused = True
        proc = prefork.Popen([sys.executable, "-m", "mover.audit.cli", "execute", "--plan", str(plan),
                              "--bootstrap-server", cluster.bootstrap, "--cluster", "east", "--poll-interval",
                              "0.01", "--throttle", "777"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
        try:
            wait_for(lambda: cluster.brokers[0].configs.get(THROTTLE_KAFKA_KEY) == "777", message="the run's throttle")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # As seen from another host: its process cannot be looked up, only its heartbeat tells.
        monkeypatch.setattr(status_store, "process_gone", lambda owner: False)
        cluster.brokers[0].paused = False
        if not _dead(cluster.bootstrap):  # its heartbeat is still fresh (a loaded machine may have let it lapse)
            with pytest.raises(Exception, match="is being carried out on east by mover-audit execute pid"):
                execute(cluster, plan, "--throttle", "999")
            assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "777"}
        wait_for(lambda: _dead(cluster.bootstrap), timeout=30, message="the killed run's heartbeat late")
        rc, out = execute(cluster, plan, "--throttle", "999")
        assert rc == 0, out
        assert "taking over the throttle of brokers 0 of east from an earlier run of this plan" in out
        assert log_dir_holds(cluster.bootstrap) == {}
    assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
