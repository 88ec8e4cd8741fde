"""execute against fake Kafka brokers, interrupted and resumed: Ctrl-C prints how to cancel (a command that cancels)
and a second run resumes the running moves; a run killed leaves the brokers' own throttles recorded in the cluster and
the resumed run takes them over and puts them back; what an older mover-audit left in the plan directory is put back,
also with nothing left to move; a bad such file is one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mover.admin.reassign.status_log import TOPIC
from mover.audit.cli import main
from mover.audit.execute_state import FILE_NAME as STATE_FILE
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing import prefork
from mover.testing.execute_plan import SIZE, execute, make_cluster, where, write_plan
from mover.testing.log_dirs_tool import cli
from mover.testing.throttle_holds import log_dir_holds
from mover.testing.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def process_env() -> Iterator[dict[str, str]]:
    yield {**os.environ, "PYTHONPATH": str(REPO)}


def test_interrupt_prints_how_to_cancel_and_a_second_run_resumes(tmp_path: Path,
                                                                 process_env: dict[str, str]) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=4)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        cluster.brokers[0].paused = True
        proc = prefork.Popen(
            [sys.executable, "-m", "mover.audit.cli", "execute", "--plan", str(plan), "--bootstrap-server",
             cluster.bootstrap, "--cluster", "east", "--poll-interval", "0.01", "--max-moves-per-disk", "2",
             "--throttle", "777"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=process_env)
        try:
            wait_for(lambda: len(cluster.running_moves()) == 2, message="two moves running")
            proc.send_signal(signal.SIGINT)
            wait_for(lambda: list(plan.glob("running-east-*.json")), message="the cancel file")
            # The end rewrites the same file, also when it falls in another second than the first Ctrl-C (the name
            # is stamped to the second: two files were left then).
            second = int(time.time())
            wait_for(lambda: int(time.time()) > second, message="the next second", interval=0.01)
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, out
        assert "interrupted: starting no more moves; waiting for the running ones" in out
        [cancel_file] = plan.glob("running-east-*.json")
        assert f"--cancel --reassignment-json-file {cancel_file}" in out
        running = {(m.topic, m.partition) for _, m in cluster.running_moves()}
        assert len(running) == 2
        # The moves and the throttle stay on the broker; the cancel file names exactly the running moves.
        targets = json.loads(cancel_file.read_text())["partitions"]
        assert {(t["topic"], t["partition"]) for t in targets} == running
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "777"}

        # The broker's own (none) is kept in the cluster, by a request that stopped: the next run takes it over.
        assert log_dir_holds(cluster.bootstrap) == {0: {}}
        assert f"at its end it puts back each broker's own throttle, kept in the cluster ({TOPIC})" in out

        cluster.brokers[0].paused = False
        rc, out = execute(cluster, plan, "--max-moves-per-disk", "2", "--throttle", "777")
        assert rc == 0, out
        assert out.count("already running: ") == 2
        assert all(where(cluster, 0, m["topic"], m["partition"]) == m["to_dir"] for m in moves)
        assert cluster.brokers[0].configs == {}
        assert log_dir_holds(cluster.bootstrap) == {}
        assert not (plan / STATE_FILE).exists()


def test_a_killed_run_resumed_restores_the_operators_throttle(tmp_path: Path, process_env: dict[str, str]) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    cluster.brokers[0].configs[THROTTLE_KAFKA_KEY] = "5000"
    with cluster:
        for b in cluster.brokers.values():
            b.paused = True
        proc = prefork.Popen(
            [sys.executable, "-m", "mover.audit.cli", "execute", "--plan", str(plan), "--bootstrap-server",
             cluster.bootstrap, "--cluster", "east", "--poll-interval", "0.01", "--throttle", "777"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=process_env)
        try:
            wait_for(lambda: len(cluster.running_moves()) == 2, message="a move running on each broker")
        finally:
            proc.kill()  # execute itself dies: no chance to restore anything
            proc.wait()
        # The brokers hold the run's throttle; their own is recorded in the cluster, nothing in the plan directory.
        assert [b.configs for b in cluster.brokers.values()] == [{THROTTLE_KAFKA_KEY: "777"}] * 2
        assert log_dir_holds(cluster.bootstrap) == {0: {THROTTLE_KAFKA_KEY: "5000"}, 1: {}}
        assert not (plan / STATE_FILE).exists()

        for b in cluster.brokers.values():
            b.paused = False
        # Resumed at once, with another throttle: the killed run is known gone (this host, no such pid), its holds
        # are taken over, and what the brokers hold now (its 777) is not taken as theirs.
        rc, out = execute(cluster, plan, "--throttle", "999")
        assert rc == 0, out
        assert "taking over the throttle of brokers 0,1 of east from an earlier run of this plan" in out
        assert out.count("already running: ") == 2
        assert "has its own throttle" not in out
        assert all(where(cluster, m["broker"], m["topic"], m["partition"]) == m["to_dir"] for m in moves)
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
        assert cluster.brokers[1].configs == {}
        assert log_dir_holds(cluster.bootstrap) == {}


def test_a_resume_with_nothing_left_to_move_still_restores(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    # What a run killed right after its last move ended leaves: the move done, the run's throttle on the broker.
    (plan / STATE_FILE).write_text(json.dumps({"version": 1, "throttles": {"east": {"0": {THROTTLE_KAFKA_KEY:
                                                                                         "5000"}}}}))
    cluster.brokers[0].configs[THROTTLE_KAFKA_KEY] = "777"
    with cluster:
        with cluster.lock:
            b = cluster.brokers[0]
            b.replicas["/d1"].pop(("t0", 0))
            b.replicas.setdefault(moves[0]["to_dir"], {})[("t0", 0)] = SIZE
        rc, dry = execute(cluster, plan, "--dry-run")
        assert rc == 0 and cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "777"}
        assert "an earlier run left its throttle on brokers 0 of east" in dry
        rc, out = execute(cluster, plan)
    assert rc == 0, out
    assert "1 move(s) already done" in out
    assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
    assert not (plan / STATE_FILE).exists()


def test_a_bad_state_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    (plan / STATE_FILE).write_text("{not json")
    with cluster:
        rc = main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east"])
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mover-audit: error: {plan / STATE_FILE}: cannot read the throttles saved") and \
        err.count("\n") == 1
    assert cluster.brokers[0].config_history == []


def test_the_printed_cancel_command_cancels(tmp_path: Path, process_env: dict[str, str]) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        cluster.brokers[0].paused = True
        proc = prefork.Popen(
            [sys.executable, "-m", "mover.audit.cli", "execute", "--plan", str(plan), "--bootstrap-server",
             cluster.bootstrap, "--cluster", "east", "--poll-interval", "0.01", "--max-moves-per-disk", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=process_env)
        try:
            wait_for(lambda: len(cluster.running_moves()) == 2, message="two moves running")
            proc.send_signal(signal.SIGINT)
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "mover-log-dirs" in line:
                    break
            r = cli(*lines[-1].split()[1:])
            assert r.returncode == 0, r.stderr
            assert cluster.running_moves() == []
            # The watcher sees the moves end without their copies and stops: cancelled moves are not done.
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, out
    assert "failed t0-0 on broker 0 of east: no copy is being built in /d2 (cancelled, or failed on the broker)" in out
    assert where(cluster, 0, "t0", 0) == "/d1" and where(cluster, 0, "t0", 1) == "/d1"
