"""The plan's one pass over the replicas (scan): where they are read, keyed and planned, by the same task
(task.py) whichever way. On a local master up to LOCAL_SCAN_ROWS (options.py) the driver reads and plans them
itself, started in a thread before the JVM (prefetch); up to DRIVER_PLAN_ROWS Spark reads and keys them and the
driver plans; else Spark's Python workers plan them (mapInArrow). The pass also sums each dir as the audit does
(audit_usage), so `audit --plan` reads the replicas once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import planner, snapshot, spark
from mover.audit.plan import encoding, horizon, options
from mover.audit.plan.encoding import DIR_BITS, DIR_KEYS
from mover.audit.plan.steps import KIND_DISK, KIND_STRAY, UDF_SCHEMA, USAGE_COLUMNS
from mover.audit.plan.task import Helper, cores, planner_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class PlanPass:
    """The plan's one pass over the replicas: the listed dirs, the drained ones, the task's rows (steps.py's kinds)."""

    def __init__(self, dirs: pd.DataFrame, drained: np.ndarray, planned: pd.DataFrame,
                 growth: horizon.Growth | None = None) -> None:
        self.dirs = dirs
        self.drained = drained
        self.planned = planned
        self.growth = growth  # plan --horizon: what each partition adds by then (the planned sizes include it)


def scan(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
         drains: list[tuple[str | None, int, str]] | None = None, plan: bool = True,
         growth: horizon.Growth | None = None) -> PlanPass:
    """Reads the replicas once and plans every broker (a bad --drain is an AuditError before that); only sums each
    dir when not `plan`; with `growth`, plans at the horizon (horizon.py). What prefetch started for this snapshot
    and these arguments is taken as it is."""
    pending = _pending.pop(snap.path, None)
    if pending is not None and growth is None and pending[0] == (rules, tuple(drains or []), plan):
        done = pending[1].result()  # an AuditError (a bad --drain) is raised here, as below
        if done is not None:
            snap.local.update(done[1])
            return done[0]
    dirs, drained, task = prepare(snap, rules, drains, plan, growth)
    planned = _run_task(task, None)
    if len(dirs):
        # With a cluster's master the executors read the replicas (the driver's host may be no place for 20M rows).
        local = encoding.local_rows(snap, dirs, rules, keep=plan) if spark.is_local(session) else None
        if local is not None or _small(snap):
            # Planned here, by the same function as in Spark's Python workers: no worker is started (each would
            # import pandas and pyarrow again: most of a small plan's time).
            planned = _run_task(task, local if local is not None
                                else encoding.driver_rows(session, snap, dirs, rules))
        else:
            from pyspark.sql import functions as F

            rows = encoding.replica_rows(session, snap, dirs, rules)
            tasks = int(session.conf.get("spark.sql.shuffle.partitions") or spark.DEFAULT_SHUFFLE_PARTITIONS)
            planned = (rows.repartition(tasks, F.shiftright("code", DIR_BITS))
                       .mapInArrow(task, UDF_SCHEMA).toPandas())
    return PlanPass(dirs, drained, planned, growth)


def prepare(snap: snapshot.Snapshot, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None,
            plan: bool, growth: horizon.Growth | None = None) -> tuple[pd.DataFrame, np.ndarray, Any]:
    """The listed dirs, the drained ones (a bad --drain is an AuditError), the planner's task function."""
    dirs = encoding.listed_dirs(snap)
    drain_dirs = options.resolve_drains(dirs, drains or [])
    drained = np.array([dr in drain_dirs.get((c, b), ()) for c, b, dr in
                        zip(dirs["cluster"], dirs["broker"], dirs["log_dir"], strict=True)], dtype=bool)
    return dirs, drained, planner_task(rules, dirs, drained, plan, growth)


def _run_task(task: Any, table: Any, helper: Helper | None = None) -> pd.DataFrame:
    """The task's rows for an Arrow table of (code, sf, pkey) (none: no rows), planned in the driver: with a helper
    process when the table is big (HELPER_ROWS, options.py), `helper` when one was started ahead."""
    import pyarrow as pa

    batches = [] if table is None else list(task(iter(table.to_batches()), helper=helper or True))
    if batches:
        return pa.Table.from_batches(batches).to_pandas()
    return pd.DataFrame({c.strip().split(" ")[0]: [] for c in UDF_SCHEMA.split(",")})


def _local_scan(path: Path, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None,
                plan: bool, count: int) -> tuple[PlanPass, dict[str, Any]] | None:
    """scan() of the snapshot at `path` (`count` replica rows) without Spark (prefetch's thread), and what it read
    for the snapshot's `local`; None when the replicas are not for the driver (scan then runs as without prefetch).
    A plan of HELPER_ROWS rows or more starts its helper process before the read, unless a JVM is starting."""
    local = snapshot.Snapshot(path, {})
    if encoding.small_listed_dirs(local) is None:  # Spark reads the log dirs: scan runs as without prefetch
        return None
    dirs, drained, task = prepare(local, rules, drains, plan)
    if not len(dirs):
        return None
    helper = Helper(task) if plan and count >= options.HELPER_ROWS and cores() > 1 and not spark.starting() else None
    try:
        rows = encoding.local_rows(local, dirs, rules, keep=plan)
        if rows is None:
            return None
        return PlanPass(dirs, drained, _run_task(task, rows, helper)), local.local
    finally:
        if helper is not None:
            helper.close()


def prefetch(path: Path, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None = None,
             plan: bool = True) -> None:
    """Starts scan()'s work for a snapshot the driver reads itself (LOCAL_SCAN_ROWS; for a local master only: the
    caller knows) in a thread, while the driver starts its JVM: the read, the keys and the planning need no Spark.
    scan() with the same arguments takes it."""
    import threading
    from concurrent.futures import Future

    # Imported on the caller's thread: the session's start imports the same packages (partitions.prefetch).
    import pyarrow.parquet  # noqa: F401
    import pyspark.sql.types  # noqa: F401

    rows = snapshot.dataset_rows(path / "replicas")
    if rows is None or rows > options.LOCAL_SCAN_ROWS:
        return
    done: Future[Any] = Future()

    def work() -> None:
        try:
            done.set_result(_local_scan(path, rules, drains, plan, rows))
        except BaseException as e:  # noqa: BLE001 (handed to scan(), which raises it)
            done.set_exception(e)

    # A daemon: a command that fails before its scan (a dataset Spark cannot read) exits without waiting for it.
    threading.Thread(target=work, name="replicas-scan", daemon=True).start()
    _pending[path] = ((rules, tuple(drains or []), plan), done)


_pending: dict[Path, Any] = {}


def _small(snap: snapshot.Snapshot) -> bool:
    """At most DRIVER_PLAN_ROWS replica rows, by the footers."""
    count = snapshot.dataset_rows(snap.path / "replicas")
    return count is not None and count <= options.DRIVER_PLAN_ROWS


def driver_usage(session: SparkSession, snap: snapshot.Snapshot) -> pd.DataFrame | None:
    """audit.disk_usage's frame for a snapshot the driver sums (LOCAL_SCAN_ROWS, DRIVER_PLAN_ROWS), else
    None: the plan's pass without the planning, the one Spark query `plan` runs anyway. On a fresh JVM it costs
    less than disk_usage's aggregation and full outer join, new kinds of query to compile (docs/audit.md)."""
    count = snapshot.dataset_rows(snap.path / "replicas")
    if count is None or count > max(options.DRIVER_PLAN_ROWS, options.LOCAL_SCAN_ROWS):
        return None
    return audit_usage(scan(session, snap, planner.Rules(), plan=False))


def audit_usage(p: PlanPass) -> pd.DataFrame | None:
    """audit.disk_usage's frame from the plan's pass, or None when the pass cannot give it exactly: replicas in
    dirs log_dirs does not list (the audit shows those dirs, named; the pass only counted them), or log_dirs rows
    the plan left out (a null key, a dir listed twice)."""
    planned, dirs = p.planned, p.dirs
    if not dirs.attrs.get("all_listed", False) or (planned["kind"] == KIND_STRAY).any():
        return None
    dk = planned[planned["kind"] == KIND_DISK]
    starts = np.searchsorted(dirs["bkey"].to_numpy(), np.arange(int(dirs["bkey"].max()) + 1 if len(dirs) else 0))
    at = starts[dk["bkey"].to_numpy(dtype="int64")] + dk["dir"].to_numpy(dtype="int64")
    frame = dirs[[*DIR_KEYS, "error", "total_bytes", "usable_bytes", "is_cordoned"]].copy()
    # The dirs' own flag (all_listed) stays with them: pandas would write it into cordoned.parquet's metadata, which
    # disk_usage's frame never had.
    frame.attrs = {}
    for column in USAGE_COLUMNS:
        values = np.zeros(len(dirs), dtype="int64")
        values[at] = dk[column].to_numpy(dtype="int64")
        frame[column] = values
    return frame.reset_index(drop=True)

