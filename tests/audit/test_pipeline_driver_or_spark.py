"""The driver's own pass against Spark's, on the small generated fleet (tests/audit/conftest.py's `fleet`) and the run's
local Spark: a small snapshot read, keyed and planned in the driver gives the same rows, sums and plan as Spark's
read, hash join and Python workers; a few rows a step, a helper process planning some steps (or failing, or dead), and
the partitions and replicas read on the driver or by Spark give the same answers."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mover.audit import cli, columns, snapshot
from mover.testing.audit_cli import SPARK
from mover.testing.snapshot_rewrite import rewrite_dataset


def test_plan_joins_dirs_by_hash_or_by_name_alike(fleet: Path, spark) -> None:  # noqa: ANN001
    from mover.audit import planner
    from mover.audit.plan import encoding

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    dirs = encoding.listed_dirs(snap)
    rules = planner.Rules()
    hashed = encoding.replica_rows(spark, snap, dirs, rules, by_hash=True).toPandas()
    named = encoding.replica_rows(spark, snap, dirs, rules, by_hash=False).toPandas()
    assert len(hashed) == snap.replicas.count()  # every replica's dir is listed in this snapshot
    columns = ["code", "sf", "pkey"]
    assert hashed.sort_values(columns).reset_index(drop=True).equals(named.sort_values(columns).reset_index(drop=True))
    # A small snapshot's rows in the driver: Spark hashes, the driver looks each dir's code up by its hash; the
    # same rows in the same order as the join (the planner's stable sort keeps that order).
    driver = encoding.driver_rows(spark, snap, dirs, rules).to_pandas()
    assert driver.equals(hashed)
    # A replica whose dir log_dirs does not list gets -1, as from the join's null.
    unlisted = dirs[dirs["cluster"] != dirs["cluster"].iloc[0]].reset_index(drop=True)
    driver = encoding.driver_rows(spark, snap, unlisted, rules).to_pandas()
    joined = encoding.replica_rows(spark, snap, unlisted, rules, by_hash=True).toPandas()
    assert (driver["code"] == -1).sum() > 0 and driver.equals(joined)
    # The driver's own read (pyarrow, spark_hash): the same rows as Spark's, nulls and excluded topics included.
    # (in the files' order, where Spark reads bigger files first: compared as sets of rows)
    assert _rows(encoding.local_rows(snap, dirs, rules).to_pandas()).equals(_rows(hashed))
    # The packing: size and flags come back out as written.
    replicas = snap.replicas.toPandas()
    assert sorted((hashed["sf"] // 8).tolist()) == sorted(replicas["size_bytes"].tolist())
    assert int((hashed["sf"] // 2 % 2).sum()) == int(replicas["is_future"].sum())


def _rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns), kind="mergesort").reset_index(drop=True)


def test_the_driver_keys_replicas_as_spark_does(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """encoding.local_rows (the driver reads the replicas with pyarrow and keys them with spark_hash) against
    replica_rows (Spark reads, hashes and joins): the same (code, sf, pkey) row for row, on a snapshot with null
    sizes, null is_future, a null topic, partition, cluster, broker and log dir, a dir log_dirs does not list, and
    excluded topics; two dirs that hash alike, or a layout the footers do not vouch for, leave it to Spark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit import planner
    from mover.audit.plan import encoding

    latest = snapshot.list_snapshots(fleet)[-1]
    table = pq.read_table(latest / "replicas").select(list(snapshot.REPLICAS))
    table = table.cast(pa.schema([f.with_nullable(True).with_type(pa.timestamp("us", "UTC"))
                                  if f.name == "collected_at" else f.with_nullable(True) for f in table.schema]))
    listed = pq.read_table(latest / "log_dirs").to_pandas()
    c, b, d = (listed[k].tolist() for k in ("cluster", "broker", "log_dir"))
    odd = pa.table({  # rows 0, 5 and 6 are in listed dirs
        "cluster": [c[0], None, c[1], c[0], c[1], c[5], c[6]],
        "broker": pa.array([b[0], b[1], None, b[3], b[4], b[5], b[6]], pa.int32()),
        "log_dir": [d[0], d[1], d[2], None, "/not/listed", d[5], d[6]],
        "topic": ["t-x", "t-y", None, "t-x", "t-z", "t-y", "t-x"],
        "partition": pa.array([0, 1, 2, None, 4, 5, 6], pa.int32()),
        "size_bytes": pa.array([None, 5, 6, 7, 8, 9, 10], pa.int64()),
        "offset_lag": pa.array([0] * 7, pa.int64()),
        "is_future": pa.array([None, True, False, None, False, True, False], pa.bool_()),
        "collected_at": table.column("collected_at").slice(0, 7)}, schema=table.schema)
    where = tmp_path / "nulls" / latest.name
    shutil.copytree(latest, where)
    shutil.rmtree(where / "replicas")
    (where / "replicas").mkdir()
    pq.write_table(table.slice(0, 500), where / "replicas" / "part-0.parquet", coerce_timestamps="us")
    pq.write_table(pa.concat_tables([odd, table.slice(500)]), where / "replicas" / "part-1.parquet",
                   coerce_timestamps="us")
    snap = snapshot.read(spark, where)
    dirs = encoding.listed_dirs(snap)
    # (also 3 rows a step, so that the odd rows fall in several steps)
    for rules, rows in ((planner.Rules(), columns.STEP_ROWS), (planner.Rules(exclude_topics=re.compile("1$|^t-x")), 3),
                        (planner.Rules(exclude_topics=re.compile("1$|^t-x")), columns.STEP_ROWS)):
        monkeypatch.setattr(columns, "STEP_ROWS", rows)
        local = encoding.local_rows(snap, dirs, rules)
        assert local is not None
        spark_rows = encoding.replica_rows(spark, snap, dirs, rules, by_hash=True).toPandas()
        pd.testing.assert_frame_equal(_rows(local.to_pandas()), _rows(spark_rows))
        assert int((spark_rows["code"] == -1).sum()) == 4
        assert (int((spark_rows["sf"] & 1).sum()) > 0) == (rules.exclude_topics is not None)
    # Two dirs that hash alike: Spark joins on the names.
    alike = dirs.copy()
    alike.loc[1, "dk"] = alike.loc[0, "dk"]
    assert encoding.local_rows(snap, alike, planner.Rules()) is None
    # A dataset whose footer lacks a declared column: Spark reads it (and says what is wrong).
    pq.write_table(table.drop(["size_bytes"]).slice(0, 10), where / "replicas" / "part-2.parquet")
    shutil.move(where / "replicas" / "part-2.parquet", where / "replicas" / "part-.parquet")
    assert encoding.local_rows(snapshot.Snapshot(where, {}), dirs, planner.Rules()) is None


def test_audit_plan_reads_the_replicas_once_with_the_audits_sums(
        fleet: Path, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """`audit --plan`: the plan's pass gives disk_usage's frame exactly (in the driver and in Spark's workers), so
    the audit does not aggregate the replicas again, and `audit` alone sums a small snapshot by that pass; with
    replicas in a dir log_dirs does not list, it gives none and the audit aggregates them itself (and shows that
    dir)."""
    from mover.audit import audit, plan, planner
    from mover.audit.plan import options

    latest = snapshot.list_snapshots(fleet)[-1]
    snap = snapshot.read(spark, latest)
    own = audit.disk_usage(snap)
    # The driver reads the replicas; Spark reads and hashes them, the driver plans; Spark's workers plan.
    for local_rows, driver_rows in ((options.LOCAL_SCAN_ROWS, options.DRIVER_PLAN_ROWS),
                                    (0, options.DRIVER_PLAN_ROWS), (0, 0)):
        monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", local_rows)
        monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", driver_rows)
        shared = plan.audit_usage(plan.scan(spark, snap, planner.Rules()))
        assert shared is not None
        pd.testing.assert_frame_equal(shared, own)
        assert shared.attrs == own.attrs == {}  # (pandas writes attrs into the Parquet files)
        # `audit` alone sums a small snapshot by the same pass, without planning it.
        summed = plan.driver_usage(spark, snap)
        assert (summed is None) == (driver_rows == 0)
        if summed is not None:
            pd.testing.assert_frame_equal(summed, own)
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 30_000_000)
    replicas = pd.read_parquet(latest / "replicas")
    odd = tmp_path / "stray" / latest.name
    rewrite_dataset(latest, odd, "replicas", pd.concat([replicas, replicas.iloc[:3].assign(log_dir="/not/listed")]))
    stray = snapshot.read(spark, odd)
    assert plan.audit_usage(plan.scan(spark, stray, planner.Rules())) is None
    monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", 1_000_000)
    assert plan.driver_usage(spark, stray) is None
    assert cli.main(["audit", "--snapshot", str(odd), "--out", str(tmp_path / "alone"), *SPARK]) == 0
    assert "/not/listed" in set(pd.read_parquet(tmp_path / "alone" / "disks.parquet")["log_dir"])
    code = cli.main(["audit", "--snapshot", str(odd), "--out", str(tmp_path / "a"), "--plan", str(tmp_path / "p"),
                     *SPARK])
    assert code == 0
    assert "/not/listed" in set(pd.read_parquet(tmp_path / "a" / "disks.parquet")["log_dir"])


def test_plan_in_the_driver_or_in_spark_workers_alike(fleet: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A small snapshot is planned in the driver's process, a big one in Spark's Python workers (mapInArrow): the
    same function, the same plan."""
    from mover.audit import plan, planner
    from mover.audit.plan import options, replica_pass, task

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    assert snapshot.dataset_rows(snap.path / "replicas") == snap.replicas.count()
    rules = planner.Rules(exclude_topics=re.compile("1$"))
    here = plan.compute(spark, snap, rules)  # the driver reads, keys and plans the replicas
    # What prefetch started in its thread (before the JVM, in a command) is the same pass.
    plan.prefetch(snap.path, rules)
    fetched = plan.compute(spark, snapshot.read(spark, snap.path), rules)
    assert snap.path not in replica_pass._pending
    # The driver's pass a few rows at a time (a step per broker, or several brokers to a step), with the rows sorted
    # by their dir codes rather than by radix on the dirs' places, and with a helper process planning some of the
    # steps: the same plan.
    chunked = []
    for rows, radix, helper in ((7, task.RADIX_SORT_DIRS, options.HELPER_ROWS), (1_500, task.RADIX_SORT_DIRS, 0),
                                (columns.STEP_ROWS, 0, options.HELPER_ROWS), (100, task.RADIX_SORT_DIRS, 0)):
        monkeypatch.setattr(columns, "STEP_ROWS", rows)
        monkeypatch.setattr(task, "RADIX_SORT_DIRS", radix)
        monkeypatch.setattr(options, "HELPER_ROWS", helper)
        chunked.append(plan.compute(spark, snap, rules))
    monkeypatch.undo()
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 0)
    hashed = plan.compute(spark, snap, rules)  # Spark reads and keys them, the driver plans
    monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", 0)
    workers = plan.compute(spark, snap, rules)
    assert len(here.moves) > 0
    for other in (fetched, *chunked, hashed, workers):
        pd.testing.assert_frame_equal(here.moves, other.moves)
        pd.testing.assert_frame_equal(here.disks, other.disks)
        pd.testing.assert_frame_equal(here.brokers, other.brokers)
        assert here.reassignments == other.reassignments and here.dropped == other.dropped


def test_a_helper_process_plans_some_steps_alike(fleet: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The driver's pass of a big task plans some of its steps in a second process, once no JVM is starting, or in
    one started ahead: the same rows out as planned here alone; a step the helper fails, or every step once its
    process died, is planned here."""
    import operator

    import pyarrow as pa

    from mover.audit import planner
    from mover.audit.plan import encoding, options, replica_pass, task

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    dirs, _, plan_partition = replica_pass.prepare(snap, planner.Rules(), None, True)
    rows = encoding.local_rows(snap, dirs, planner.Rules())

    def run(helper: bool | task.Helper) -> pd.DataFrame:
        return pa.Table.from_batches(list(plan_partition(iter(rows.to_batches()), helper=helper))).to_pandas()

    monkeypatch.setattr(columns, "STEP_ROWS", 100)  # fewer rows than a broker has: a step per broker
    alone = run(False)
    here: list[int] = []
    real = task.plan_step

    def counted(known, step, *arrays):  # noqa: ANN001, ANN202
        here.append(step[0][0])
        return real(known, step, *arrays)

    monkeypatch.setattr(task, "plan_step", counted)
    monkeypatch.setattr(options, "HELPER_ROWS", 0)
    helped = run(True)
    brokers = dirs["bkey"].nunique()
    # The first two steps go to the helper (whatever its start takes), and no step is planned twice.
    assert len(here) == len(set(here)) <= brokers - 2
    # While a JVM starts here (its start keeps the cores busy), no helper.
    from mover.audit import spark as audit_spark

    here.clear()
    audit_spark._starting.set()
    try:
        waited = run(True)
    finally:
        audit_spark._starting.clear()
    assert len(here) == brokers
    # A helper started ahead (the scan's, while it reads) plans from the first step on.
    here.clear()
    ahead = task.Helper(plan_partition)
    try:
        early = run(ahead)
    finally:
        ahead.close()
    assert len(here) == len(set(here)) <= brokers - 2
    # One whose process died before its first step: every step planned here.
    dead = task.Helper(plan_partition)
    try:
        dead.pool.submit(int).result(timeout=120)
        for process in list(dead.pool._processes.values()):
            process.kill()
            process.join()
        here.clear()
        orphaned = run(dead)
    finally:
        dead.close()
    assert len(here) == len(set(here)) == brokers
    # The helper fails every step (a call it cannot make): each is planned here.
    monkeypatch.setattr(task, "_helper_plan", operator.truediv)
    here.clear()
    failed = run(True)
    assert len(here) == len(set(here)) == brokers
    for other in (helped, waited, early, orphaned, failed):
        pd.testing.assert_frame_equal(alone, other)


def test_small_datasets_read_on_the_driver_or_by_spark_alike(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The duplicate check's per-broker sums and the naming of the plan's moves read the partitions dataset on the
    driver (mover/audit/partitions.py) when it is small enough, else in Spark jobs; so do the stuck moves and the
    duplicate check's suspects with the replicas (audit.DRIVER_ROWS): the same answers. The snapshot
    has a copy twice, and Metadata lists no replica of a tenth of the partitions any more (their moves are dropped)."""
    from mover.audit import audit, partitions, plan, planner
    from mover.audit.plan import options

    latest = snapshot.list_snapshots(fleet)[-1]
    replicas = pd.read_parquet(latest / "replicas")
    dirs = pd.read_parquet(latest / "log_dirs")
    one = replicas[~replicas["is_future"]].iloc[0]
    other = dirs[(dirs["cluster"] == one["cluster"]) & (dirs["broker"] == one["broker"])
                 & (dirs["log_dir"] != one["log_dir"]) & dirs["error"].isna()].iloc[0]["log_dir"]
    odd = tmp_path / "odd" / latest.name
    rewrite_dataset(latest, odd, "replicas", pd.concat([replicas, replicas.iloc[[0]].assign(log_dir=other)]))
    parts = pd.read_parquet(odd / "partitions")
    parts["replicas"] = [[] if i % 10 == 3 else list(r) for i, r in enumerate(parts["replicas"])]
    shutil.rmtree(odd / "partitions")
    (odd / "partitions").mkdir()
    parts.to_parquet(odd / "partitions" / "part-0.parquet", index=False)
    rules = planner.Rules()

    def both() -> tuple[pd.DataFrame, pd.DataFrame, plan.PlanResult, bool, pd.DataFrame]:
        snap = snapshot.read(spark, odd)  # a new read: what the driver read is kept per snapshot
        listed = audit.listed_per_broker(snap).sort_values(["cluster", "broker"]).reset_index(drop=True)
        dups = audit.duplicate_partitions(snap, audit.disk_usage(snap))
        stuck = audit.stuck_moves(snap, snapshot.read(spark, snapshot.list_snapshots(fleet)[-2]))
        return listed, dups, plan.compute(spark, snap, rules), snap.local["partitions"] is not None, stuck

    here = both()
    # The driver's reads a few rows a step (mover/audit/columns.py): the same answers.
    monkeypatch.setattr(columns, "STEP_ROWS", 7)
    stepped = both()
    monkeypatch.undo()
    for a, b in zip(here[:2], stepped[:2], strict=True):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(here[2].moves, stepped[2].moves)
    assert here[2].reassignments == stepped[2].reassignments
    # Spark reads the partitions, and the replicas the stuck moves and the suspects of the duplicate check need.
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 0)
    monkeypatch.setattr(partitions, "LOCAL_ROWS", 0)
    monkeypatch.setattr(audit, "DRIVER_ROWS", 0)
    there = both()
    assert here[3] and not there[3]
    assert len(here[4]) > 0
    pd.testing.assert_frame_equal(here[4], there[4])
    pd.testing.assert_frame_equal(here[0], there[0])
    assert len(here[1]) == 1 and here[1]["copies"].tolist() == [2]
    pd.testing.assert_frame_equal(here[1], there[1])
    assert len(here[2].moves) > 0 and here[2].dropped > 0 and here[2].dropped == there[2].dropped
    pd.testing.assert_frame_equal(here[2].moves, there[2].moves)
    assert here[2].reassignments == there[2].reassignments
