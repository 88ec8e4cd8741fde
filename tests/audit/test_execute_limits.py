"""execute against fake Kafka brokers, its limits and its throttle: the limits hold (observed on the brokers), a
limits file change is picked up (a bad one keeps the limits), steps run in order, the throttle is set for the run and
each broker's own put back (also on a real moverd). The run interrupted, killed and resumed:
tests/audit/test_execute_resume.py."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from mover.admin import throttle
from mover.admin.client import Client
from mover.audit.cli import build_parser, main
from mover.audit.execute import run
from mover.audit.execute_state import FILE_NAME as STATE_FILE
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing.execute_plan import execute, make_cluster, where, write_plan
from mover.testing.fake_kafka import KAFKA_2_3
from mover.testing.log_dirs_tool import create_topics, placement
from mover.testing.moverd import Moverd
from mover.testing.wait import wait_for


def test_limits_hold_and_every_move_ends_in_its_dir(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=3)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan, "--max-moves-per-disk", "2", "--max-moves-per-broker", "2",
                          "--max-moves", "3", "--throttle", "5000")
    assert rc == 0, out
    assert all(where(cluster, m["broker"], m["topic"], m["partition"]) == m["to_dir"] for m in moves)
    # Observed on the brokers: never more than the limits, and the limits were reached (the test can fail).
    assert cluster.peak("cluster") == 3
    assert cluster.peak("broker") == 2
    assert cluster.peak("dir") == 2
    assert "executed: 18 done" in out
    for b in cluster.brokers.values():
        assert b.config_history == [(THROTTLE_KAFKA_KEY, "5000"), (THROTTLE_KAFKA_KEY, None)]
    assert "throttle: 5000 B/s (4.9 KiB/s) per broker with moves, for the run" in out and "[--throttle]" in out
    assert not (plan / STATE_FILE).exists()  # nothing left to restore


def test_a_throttle_the_operator_set_survives_the_run(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=3, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    # Broker 0: set at run time (the operator's, put back); broker 1: in server.properties (not a per-broker
    # dynamic value: deleting the run's brings it back by itself); broker 2: none.
    cluster.brokers[0].configs[THROTTLE_KAFKA_KEY] = "5000"
    cluster.brokers[1].static_configs[THROTTLE_KAFKA_KEY] = "3000"
    with cluster:
        rc, out = execute(cluster, plan, "--throttle", "777")
    assert rc == 0, out
    assert cluster.brokers[0].config_history == [(THROTTLE_KAFKA_KEY, "777"), (THROTTLE_KAFKA_KEY, "5000")]
    assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
    for b in (1, 2):
        assert cluster.brokers[b].config_history == [(THROTTLE_KAFKA_KEY, "777"), (THROTTLE_KAFKA_KEY, None)]
        assert cluster.brokers[b].configs == {}
    assert cluster.brokers[1].static_configs == {THROTTLE_KAFKA_KEY: "3000"}
    assert f"broker 0 of east has its own throttle, restored at the end: {THROTTLE_KAFKA_KEY}=5000" in out
    assert f"throttle of broker 0 of east restored to its own: {THROTTLE_KAFKA_KEY}=5000" in out
    assert "throttle removed on brokers 1,2 of east" in out
    assert not (plan / STATE_FILE).exists()


def test_the_default_throttle_is_said_at_the_start(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan)
    assert rc == 0, out
    first = out.splitlines()[:3]
    assert any(line.startswith("throttle: 104857600 B/s (100.0 MiB/s) per broker with moves, for the run")
               and "[execute's default (Kafka's own is unlimited" in line for line in first), out
    assert cluster.brokers[0].config_history == [(THROTTLE_KAFKA_KEY, str(100 << 20)), (THROTTLE_KAFKA_KEY, None)]


def test_help_shows_only_the_options_execute_uses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["execute", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--capacity" not in text
    assert "--bootstrap-server" in text and "--fleet" in text and "--timeout" in text
    assert "Default 104857600 (100.0 MiB/s), chosen by execute to spare the disks: Kafka's own default is " \
           "unlimited" in text
    assert "each broker's own throttle is restored at the end" in text
    assert main(["collect", "--help"]) == 0
    assert "--capacity" in capsys.readouterr().out


def test_one_move_per_disk_by_default(tmp_path: Path) -> None:
    cluster, moves = make_cluster(KAFKA_2_3, brokers=1)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan)
    assert rc == 0, out
    # /d1 is the source of every move: one at a time, whatever --max-moves-per-broker says.
    assert cluster.peak("dir") == 1 and cluster.peak("broker") == 1


def test_steps_of_a_broker_run_in_order(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=4)
    for i, m in enumerate(moves):
        m["step"] = 1 if i < 2 else 0
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan, "--max-moves-per-disk", "4", "--max-moves-per-broker", "4")
    assert rc == 0, out
    started = [line.split()[1] for line in out.splitlines() if line.startswith("started")]
    assert started == ["t0-2", "t0-3", "t0-0", "t0-1"]


def test_limits_file_change_is_picked_up(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=6)
    plan = write_plan(tmp_path / "plan", moves)
    limits = tmp_path / "limits.toml"
    limits.write_text("max_moves = 1\nthrottle = 1000\n")
    out = io.StringIO()
    result: list[int] = []
    with cluster:
        for b in cluster.brokers.values():
            b.paused = True
        worker = threading.Thread(target=lambda: result.append(execute(
            cluster, plan, "--limits", str(limits), "--max-moves-per-disk", "4", "--max-moves-per-broker", "4",
            out=out)[0]))
        worker.start()
        wait_for(lambda: len(cluster.running_moves()) == 1, message="the first move")
        assert cluster.peak("cluster") == 1
        limits.write_text(json.dumps({"max_moves": 4, "throttle": 2000}))
        wait_for(lambda: "limits changed" in out.getvalue(), message="the new limits")
        for b in cluster.brokers.values():
            b.paused = False
        worker.join(60)
    assert result == [0], out.getvalue()
    assert cluster.peak("cluster") == 4
    assert "limits changed: at most 4 move(s) per disk, 4 per broker, 4 per cluster; throttle 2000 B/s" in \
        out.getvalue()
    for b in cluster.brokers.values():
        assert b.config_history == [(THROTTLE_KAFKA_KEY, "1000"), (THROTTLE_KAFKA_KEY, "2000"),
                                    (THROTTLE_KAFKA_KEY, None)]


@pytest.mark.parametrize(("bad", "refusal"), [
    ('{"max_moves": "many", "throttle": 5000}', "max_moves must be a positive integer, got 'many'"),
    # Every broker refuses 2^63 (INVALID_CONFIG): it was taken, "limits changed" said, and the run went on at the
    # old rate.
    (f'{{"max_moves": 1, "throttle": {2**63}}}',
     f"throttle must be bytes per second (1 to 9223372036854775807, a Java long) or -1, got {2**63}"),
])
def test_bad_limits_file_change_keeps_the_limits(tmp_path: Path, bad: str, refusal: str) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    limits = tmp_path / "limits.json"
    limits.write_text('{"max_moves": 1, "throttle": 5000}')
    out = io.StringIO()
    with cluster:
        cluster.brokers[0].paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan, "--limits", str(limits)), kwargs={"out": out})
        worker.start()
        wait_for(lambda: len(cluster.running_moves()) == 1, message="the first move")
        limits.write_text(bad)
        wait_for(lambda: "keeping:" in out.getvalue(), message="the refusal")
        cluster.brokers[0].paused = False
        worker.join(60)
    assert f"limits file {limits}: {refusal} (keeping: at most 1 move(s) per disk" in out.getvalue()
    assert "limits changed" not in out.getvalue()
    assert cluster.peak("cluster") == 1
    assert cluster.brokers[0].config_history == [(THROTTLE_KAFKA_KEY, "5000"), (THROTTLE_KAFKA_KEY, None)]


def test_a_throttle_beyond_kafkas_long_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    assert main(["execute", "--plan", str(plan), "--bootstrap-server", "127.0.0.1:1", "--throttle", str(2**70)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --throttle: expected bytes per second (1 to 9223372036854775807" in err


def test_moverd_keeps_the_throttle_the_operator_set(tmp_path: Path, moverd: Any) -> None:
    d: Moverd = moverd(n_dirs=2)
    create_topics(d.bootstrap, {"t": 1})
    [(current, _)] = placement(d.bootstrap)[("t", 0)]
    [other] = [str(p) for p in d.dirs if str(p) != current]
    plan = write_plan(tmp_path / "plan", [{"cluster": "east", "broker": 0, "topic": "t", "partition": 0,
                                           "from_dir": current, "to_dir": other, "size_bytes": 0, "step": 0}])
    client = Client(d.bootstrap)
    try:
        throttle.set_throttle(client, [0], 5 << 20)  # moverd takes KIP-113's name first
        before = throttle.dynamic_throttle(client, 0)
        assert before and set(before.values()) == {str(5 << 20)}
        out = io.StringIO()
        argv = ["execute", "--plan", str(plan), "--bootstrap-server", d.bootstrap, "--cluster", "east",
                "--poll-interval", "0.05", "--throttle", "777777"]
        parser, _ = build_parser(argv)
        assert run(parser.parse_args(argv), out) == 0, out.getvalue()
        assert "throttle of broker 0 of east restored to its own" in out.getvalue()
        assert throttle.dynamic_throttle(client, 0) == before
        assert placement(d.bootstrap)[("t", 0)] == [(other, False)]

        throttle.set_throttle(client, [0], None)
        write_plan(tmp_path / "back", [{"cluster": "east", "broker": 0, "topic": "t", "partition": 0,
                                        "from_dir": other, "to_dir": current, "size_bytes": 0, "step": 0}])
        argv[2] = str(tmp_path / "back")
        assert run(build_parser(argv)[0].parse_args(argv), io.StringIO()) == 0
        assert throttle.dynamic_throttle(client, 0) == {}
    finally:
        client.close()
