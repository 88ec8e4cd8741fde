"""execute against fake Kafka brokers, checking its plan before anything changes: a plan that no longer matches the
brokers moves nothing wrongly, a dry run prints the steps and moves nothing, an empty plan does nothing, and a wrong
cluster name, a row no broker takes, a column of another type or a broker or log dir the cluster lacks is refused in
one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mover.audit import plan_layout
from mover.audit.cli import main
from mover.testing.execute_plan import execute, make_cluster, where, write_plan


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


def test_empty_plan_does_nothing(tmp_path: Path) -> None:
    cluster, _ = make_cluster(brokers=1, per_broker=1)
    plan = write_plan(tmp_path / "plan", [])
    with cluster:
        rc, out = execute(cluster, plan)
    assert rc == 0, out
    assert "0 move(s) to carry out" in out and "executed: nothing to do" in out
    assert cluster.brokers[0].config_history == []  # no throttle set for a run with nothing to move
