"""execute against fake Kafka brokers: the limits hold (observed on the brokers), a limits file change is picked up,
the throttle is set for the run and each broker's own put back (also after execute itself was killed), an interrupted
run resumes, a plan that no longer matches moves nothing wrongly."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mover.admin import throttle
from mover.admin.client import Client
from mover.audit import plan_layout
from mover.audit.cli import build_parser, main
from mover.audit.execute import run
from mover.audit.execute_state import FILE_NAME as STATE_FILE
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing import prefork
from mover.testing.fake_kafka import KAFKA_2_3, KAFKA_3_9, FakeCluster
from mover.testing.log_dirs_tool import cli, create_topics, placement
from mover.testing.moverd import Moverd
from mover.testing.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
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
    (path / "moves").mkdir(parents=True)
    schema = plan_layout.arrow_schema(plan_layout.MOVES)
    pq.write_table(pa.Table.from_pylist(moves, schema=schema), path / "moves" / "part-00000.parquet")
    return path


def execute(cluster: FakeCluster, plan: Path, *extra: str, out: io.StringIO | None = None) -> tuple[int, str]:
    argv = ["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
            "--poll-interval", "0.005", *extra]
    parser, _ = build_parser(argv)
    buffer = out or io.StringIO()
    rc = run(parser.parse_args(argv), buffer)
    return rc, buffer.getvalue()


def where(cluster: FakeCluster, broker: int, topic: str, partition: int) -> str | None:
    with cluster.lock:
        return cluster.brokers[broker].where(topic, partition)


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


def test_stalled_move_is_reported(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    with cluster:
        cluster.brokers[0].paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan, "--stall-seconds", "0.2"),
                                  kwargs={"out": out})
        worker.start()
        wait_for(lambda: "stalled: t0-0 on broker 0 of east has made no progress" in out.getvalue(), message="stall")
        cluster.brokers[0].paused = False
        worker.join(60)
    assert "progressing again: t0-0" in out.getvalue()
    assert where(cluster, 0, "t0", 0) == "/d2"


def test_a_complete_copy_never_swapped_in_is_named_not_stalled_and_frees_its_slot(tmp_path: Path) -> None:
    # Kafka 3.7.0's KAFKA-16365: the copy is level with the replica and stays a copy until the broker restarts, and
    # from then on that broker swaps no move in. On a real broker it keeps growing with the partition's records, so
    # no stall would ever be said: the run must say what it waits on, give its slot to the next move (it copies
    # nothing more), start no other move on that broker (each would end the same way), and end.
    cluster, moves = make_cluster(brokers=2, per_broker=2)
    cluster.add_replica(0, "/d1", "t0", 2, SIZE)
    moves.append({"cluster": "east", "broker": 0, "topic": "t0", "partition": 2, "from_dir": "/d1", "to_dir": "/d2",
                  "size_bytes": SIZE, "step": 1})
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        cluster.brokers[0].unswapped = True
        ended: list[tuple[int, str]] = []
        # One move at a time in the cluster: broker 1's start only once t0-0 (first in the plan) gave its slot up.
        worker = threading.Thread(target=lambda: ended.append(execute(
            cluster, plan, "--stall-seconds", "0.2", "--max-moves", "1")), daemon=True)
        worker.start()
        worker.join(60)
        assert ended, "the run waits on copies only a broker restart swaps in"
        rc, text = ended[0]
        assert rc == 1, text
        line = "not swapped in: t0-0 on broker 0 of east has had its copy caught up (offset lag 0)"
        assert text.count(line) == 1, text
        assert "KAFKA-16365 (fixed in 3.7.1) and swaps them in when broker 0 restarts" in text, text
        assert "stalled:" not in text, text
        assert "started t0-1" not in text and "started t0-2" not in text, text
        for p in (1, 2):
            assert (f"pending: t0-{p} on broker 0 of east: not started: broker 0 swaps no move in until it restarts "
                    f"(t0-0 on broker 0 of east is not swapped in)") in text, text
        assert "executed: 2 pending, 2 done, 1 not swapped in" in text, text
        assert [where(cluster, 0, "t0", p) for p in range(3)] == ["/d1"] * 3, text
        assert all(where(cluster, 1, "t1", p) == m["to_dir"] for p, m in enumerate(moves[2:4])), text
        cluster.brokers[0].unswapped = False  # the broker restarted: it swaps the copy in
        rc, text = execute(cluster, plan)
    assert rc == 0, text
    assert [where(cluster, 0, "t0", p) for p in range(3)] == ["/d2", "/d3", "/d2"], text


def test_a_copy_the_broker_drops_is_sent_again_a_bounded_number_of_times(tmp_path: Path) -> None:
    # Kafka 3.7.0 drops a copy when the leader epoch changes under it (a broker dying or coming back): the replica
    # stays in its old dir with no future. Sent again, it finishes; a copy dropped every time ends as failed.
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    with cluster:
        broker = cluster.brokers[0]
        broker.paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan, "--max-moves-per-disk", "2"),
                                  kwargs={"out": out})
        worker.start()
        wait_for(lambda: len(cluster.running_moves()) == 2, message="two moves running")
        with cluster.lock:
            del broker.moves[("t0", 0)]
        wait_for(lambda: "restarted t0-0 on broker 0 of east" in out.getvalue(), message="the move sent again")
        for _ in range(2):  # the other copy dropped as often as it is sent: given up after COPY_RESTARTS
            wait_for(lambda: ("t0", 1) in broker.moves, message="t0-1 running")
            with cluster.lock:
                del broker.moves[("t0", 1)]
            wait_for(lambda: ("t0", 1) in broker.moves or "failed t0-1" in out.getvalue(), message="t0-1 again")
        wait_for(lambda: ("t0", 1) in broker.moves, message="t0-1 sent the second time")
        with cluster.lock:
            del broker.moves[("t0", 1)]
        broker.paused = False
        worker.join(60)
    text = out.getvalue()
    assert where(cluster, 0, "t0", 0) == "/d2", text
    assert "restarted t0-1 on broker 0 of east: the broker dropped its copy in /d3 (2 of 2)" in text
    assert "failed t0-1 on broker 0 of east: no copy is being built in /d3" in text
    assert where(cluster, 0, "t0", 1) == "/d1"
    assert "executed: 1 done, 1 failed" in text


def test_plan_that_no_longer_matches(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=4)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        b = cluster.brokers[0]
        with cluster.lock:
            b.replicas["/d2"][("t0", 1)] = b.replicas["/d1"].pop(("t0", 1))  # moved elsewhere since the plan
            b.replicas["/d2"][("t0", 2)] = b.replicas["/d1"].pop(("t0", 2))  # already where the plan wants it
        cluster.remove_partition("t0", 3)  # deleted since the plan
        rc, out = execute(cluster, plan)
        assert rc == 1
    assert ("not moved: t0-1 on broker 0 of east: it is in /d2, the plan expected /d1 (the plan no longer matches; "
            "collect and plan again)") in out
    assert "skipped: t0-3 on broker 0 of east: the partition no longer exists" in out
    assert "1 move(s) already done (checked on the brokers)" in out
    assert where(cluster, 0, "t0", 1) == "/d2" and where(cluster, 0, "t0", 0) == "/d2"
    assert cluster.peak("cluster") == 1  # only t0-0 was started


def test_dry_run_prints_the_steps_and_moves_nothing(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=3)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc, out = execute(cluster, plan, "--dry-run", "--max-moves-per-disk", "2")
    assert rc == 0
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    # /d1 is the source of all three moves of each broker: 2 at once per disk, then the third.
    assert steps == ["step 1: 4 move(s), 3.9 KiB", "step 2: 2 move(s), 2.0 KiB"]
    assert cluster.peak_moves == {}
    with cluster:
        rc, out = execute(cluster, plan, "--dry-run", "--max-moves-per-disk", "2", "--throttle", "100")
    # Each broker moves 2,000 B in step 1 and 1,000 B in step 2: 20 s + 10 s at 100 B/s.
    assert rc == 0 and out.splitlines()[-1] == ("estimate: at most 30 s at the throttle of 100 B/s per broker "
                                                "(5.9 KiB to copy between log dirs)"), out
    assert cluster.peak_moves == {}


def test_wrong_cluster_name_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mover.audit.cli import main

    cluster, moves = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        assert main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the plan moves replicas of cluster(s) east" in err
    assert main(["execute", "--plan", str(tmp_path / "nope"), "--bootstrap-server", "127.0.0.1:1"]) == 1
    assert "no moves dataset" in capsys.readouterr().err


@pytest.mark.parametrize(("column", "value", "problem"), [
    ("to_dir", None, "to_dir is null"),  # was 'internal error: EncodeError' once the move was sent
    ("topic", None, "topic is null"),
    ("to_dir", "d2", "to_dir is 'd2', not an absolute path or 'any'"),
    ("from_dir", "", "from_dir is '', not a non-empty string"),
    ("partition", -1, "partition is -1, not in 0..2147483647"),
    ("size_bytes", None, "size_bytes is null"),
    ("to_broker", -1, "to_broker is -1, not in 0..2147483647"),
])
def test_a_plan_row_no_broker_takes_is_one_line_before_anything_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: Any, problem: str) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=3)
    for m in moves:
        m["to_broker"] = None
    moves[2][column] = value
    (tmp_path / "plan" / "moves").mkdir(parents=True)
    schema = plan_layout.arrow_schema({**plan_layout.MOVES, **plan_layout.MOVES_OPTIONAL})
    pq.write_table(pa.Table.from_pylist(moves, schema=schema), tmp_path / "plan" / "moves" / "part-0.parquet")
    with cluster:
        rc = main(["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", cluster.bootstrap,
                   "--cluster", "east"])
    err = capsys.readouterr().err
    assert rc == 1, err
    name = "" if column == "topic" else "t0-2 " if column != "partition" else "t0 "
    assert err == f"mover-audit: error: plan {tmp_path / 'plan'}: moves row 2 ({name}on broker 0 of east): {problem}\n"
    assert cluster.brokers[0].config_history == [] and cluster.peak_moves == {}


def test_a_plan_column_of_another_type_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Written by another tool: broker ids as doubles. Checked row by row, where Arrow's checks need the declared type.
    _, moves = make_cluster(brokers=1, per_broker=2)
    moves[1]["broker"] = 0.5
    (tmp_path / "plan" / "moves").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(moves), tmp_path / "plan" / "moves" / "part-0.parquet")
    assert main(["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", "127.0.0.1:1"]) == 1
    assert capsys.readouterr().err == (f"mover-audit: error: plan {tmp_path / 'plan'}: moves row 0 (t0-0 of east): "
                                       "broker is 0.0, not an integer\n")


def test_a_broker_or_log_dir_the_cluster_lacks_is_refused_before_anything_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=14)
    moves[1]["to_dir"] = "/d9"  # a typo
    moves[2]["from_dir"] = moves[2]["to_dir"] = "/data"
    moves[3]["broker"] = 7
    for m in moves[16:]:  # twelve of broker 1: the line names ten and counts the rest
        m["to_dir"] = "/gone"
    plan = write_plan(tmp_path / "plan", moves)
    with cluster:
        rc = main(["execute", "--plan", str(plan), "--bootstrap-server", cluster.bootstrap, "--cluster", "east"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert err.startswith(f"mover-audit: error: plan {plan}: 15 move(s) name what cluster east does not have "
                          "(brokers 0,1); nothing was changed: t0-3 on broker 7 of east: broker 7 is not in the "
                          "cluster; t0-1 on broker 0 of east: /d9 is not a log dir of broker 0; t0-2 on broker 0 of "
                          "east: /data is not a log dir of broker 0; t1-2 on broker 1 of east: /gone is not a log dir "
                          "of broker 1; "), err
    assert err.endswith("t1-8 on broker 1 of east: /gone is not a log dir of broker 1 and 5 more (15 in all)\n"), err
    assert all(b.config_history == [] for b in cluster.brokers.values())
    assert cluster.peak_moves == {}


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

        assert json.loads((plan / STATE_FILE).read_text())["throttles"] == {"east": {"0": {}}}
        assert f"at its end it puts back each broker's own throttle, kept in {plan / STATE_FILE}" in out

        cluster.brokers[0].paused = False
        rc, out = execute(cluster, plan, "--max-moves-per-disk", "2", "--throttle", "777")
        assert rc == 0, out
        assert out.count("already running: ") == 2
        assert all(where(cluster, 0, m["topic"], m["partition"]) == m["to_dir"] for m in moves)
        assert cluster.brokers[0].configs == {}
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
        # The brokers hold the run's throttle; the originals are in the plan directory.
        assert [b.configs for b in cluster.brokers.values()] == [{THROTTLE_KAFKA_KEY: "777"}] * 2
        saved = json.loads((plan / STATE_FILE).read_text())["throttles"]
        assert saved == {"east": {"0": {THROTTLE_KAFKA_KEY: "5000"}, "1": {}}}

        for b in cluster.brokers.values():
            b.paused = False
        # Resumed with another throttle: what the brokers hold now (the killed run's 777) is not taken as theirs.
        rc, out = execute(cluster, plan, "--throttle", "999")
        assert rc == 0, out
        assert out.count("already running: ") == 2
        assert "has its own throttle" not in out
        assert all(where(cluster, m["broker"], m["topic"], m["partition"]) == m["to_dir"] for m in moves)
        assert cluster.brokers[0].configs == {THROTTLE_KAFKA_KEY: "5000"}
        assert cluster.brokers[1].configs == {}
        assert not (plan / STATE_FILE).exists()


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


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_progress_shows_bytes_rate_and_time_left_on_a_terminal(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    cluster.move_step = 20  # fifty polls a move: rich redraws (10 times a second) while they run
    plan = write_plan(tmp_path / "plan", moves)
    out = Terminal()
    with cluster:
        cluster.brokers[0].paused = True
        worker = threading.Thread(target=execute, args=(cluster, plan), kwargs={"out": out})
        worker.start()
        # rich redraws the bars in place; what it wrote shows the overall bar and the running move's.
        wait_for(lambda: "t0-0 on broker 0 of east" in out.getvalue() and "all moves" in out.getvalue(),
                 message="the live bars")
        cluster.brokers[0].paused = False
        worker.join(60)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    # Bytes done of the total, a rate and the time left, for all moves and for the running one.
    assert re.search(r"all moves +━*[╸╺━]* +\d\.\d/2\.0 KiB +[\d.]+ kB/s +0:00:\d\d", text), text[-2000:]
    assert re.search(r"t0-1 on broker 0 of east +━*[╸╺━]* +[\d,]+/1,000 bytes", text), text[-2000:]
    assert "\nexecuted: 2 done\n" in text


def test_empty_plan_does_nothing(tmp_path: Path) -> None:
    cluster, _ = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", [])
    with cluster:
        rc, out = execute(cluster, plan)
    assert rc == 0, out
    assert "0 move(s) to carry out" in out and "executed: nothing to do" in out
    assert cluster.brokers[0].config_history == []  # no throttle set for a run with nothing to move


def test_a_broker_that_goes_away_is_given_up_after_the_stall_time(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=2, per_broker=3)
    plan = write_plan(tmp_path / "plan", moves)
    out = io.StringIO()
    result: list[int] = []
    with cluster:
        cluster.brokers[1].paused = True
        worker = threading.Thread(target=lambda: result.append(execute(
            cluster, plan, "--stall-seconds", "1", "--timeout", "1", out=out)[0]))
        worker.start()
        wait_for(lambda: any(b == 1 for b, _ in cluster.running_moves()), message="a move on broker 1")
        cluster.brokers[1].stop()
        worker.join(60)
    text = out.getvalue()
    assert result == [1], text
    assert "broker 1 of east does not answer" in text
    assert "unreachable: t1-0 on broker 1 of east: broker 1 has not answered for" in text
    assert "the move may still finish there" in text
    # Broker 0 went on: all its moves are done, and its throttle is removed although broker 1's cannot be.
    assert all(where(cluster, 0, m["topic"], m["partition"]) == m["to_dir"] for m in moves if m["broker"] == 0)
    assert cluster.brokers[0].configs == {}
    assert "cannot remove the throttle on broker 1 of east" in text


def test_a_cluster_out_of_reach_does_not_hold_up_the_others(tmp_path: Path) -> None:
    cluster, moves = make_cluster(brokers=1, per_broker=2)
    moves.append({**moves[0], "cluster": "west"})
    plan = write_plan(tmp_path / "plan", moves)
    fleet = tmp_path / "fleet.toml"
    with cluster:
        fleet.write_text(f'[clusters.east]\nbootstrap = "{cluster.bootstrap}"\n'
                         '[clusters.west]\nbootstrap = "127.0.0.1:1"\n')
        out = io.StringIO()
        argv = ["execute", "--plan", str(plan), "--fleet", str(fleet), "--poll-interval", "0.005"]
        parser, _ = build_parser(argv)
        rc = run(parser.parse_args(argv), out)
    assert rc == 1, out.getvalue()
    assert "not moved: the 1 move(s) of cluster west: cluster west: cannot connect" in out.getvalue()
    assert "executed: 2 done" in out.getvalue()
