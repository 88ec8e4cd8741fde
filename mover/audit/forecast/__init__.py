"""forecast: when each disk of the fleet reaches 90% and fills, from the history of its snapshots, on Spark.

Growth comes from partitions (mover/audit/forecast/model.py): each partition's sizes over the window are fitted,
then the partitions on each disk now are summed, so a move (or a planned one) changes both disks' forecasts and a
step (a move in, a topic deleted) is never taken for growth. The steps, each a named DataFrame -> DataFrame
transformation:

    read_history       every snapshot's replicas and log dirs in the window, with the snapshot's hour (one read)
    partition_series   one size per partition per snapshot (the median of its current replicas present)
    partition_fits     per partition: rate, its error, cap (retention) and kind (trend, plateau, short)
    disk_members       per disk: its last snapshot (a gap at the end is not a zero), the copies on it then
    disk_residuals     per disk per snapshot: the sum of its partitions' residuals (what they share: a daily cycle)
    disk_forecasts     per disk: rate with its interval, time to 90% and to full, the partitions driving it

Outputs are declared in mover/audit/forecast/layout.py and written by outputs.py; docs/audit.md, "forecast", says
what it models.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import snapshot, spark
from mover.audit.errors import AuditError
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import layout as layout
from mover.audit.forecast import model as model
from mover.audit.forecast import reference as forecast_reference
from mover.audit.forecast.disks import LEVEL, disk_row
from mover.audit.forecast.outputs import print_summary as print_summary
from mover.audit.forecast.outputs import summary as summary
from mover.audit.forecast.outputs import write as write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

compute_local = forecast_reference.compute_local  # the forecast read from every snapshot (the tests' reference)

DISK_KEYS, PARTITION_KEYS = forecast_history.DISK_KEYS, forecast_history.PARTITION_KEYS


@dataclass
class ForecastResult:
    snapshots: list[Path]  # the window, oldest first
    since_hours: float | None
    disks: pd.DataFrame  # layout.DISKS, soonest to 90% first
    history: pd.DataFrame  # layout.HISTORY: the flagged disks' usage at each snapshot
    # How compute() brought the compact history up to the window (forecast_history.History.how); "" without it.
    kept: str = ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshots", metavar="ROOT", help="the fleet's snapshots; the latest is 'now'")
    source.add_argument("--snapshot", metavar="DIR",
                        help="forecast as of this snapshot, from it and the earlier ones beside it")
    add_window_argument(parser)
    parser.add_argument("--plan", metavar="PLANDIR",
                        help="forecast the disks as they will be once this plan's log-dir moves are done")
    parser.add_argument("--out", metavar="DIR",
                        help=f"where {layout.DISKS_FILE} and {layout.SUMMARY_FILE} go (default: <latest>-audit, "
                             "beside the audit's files)")
    spark.add_arguments(parser)


def add_window_argument(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument("--since", type=layout.hours, metavar="DURATION",
                        help="only the snapshots of this last stretch (e.g. 7d, 36h; default: all)")


def window(snapshot_dir: Path, since_hours: float | None) -> list[Path]:
    """The snapshots beside `snapshot_dir` (in its root) up to it, within `since_hours` of it, oldest first."""
    found = [p for p in snapshot.list_snapshots(snapshot_dir.parent) if p.name <= snapshot_dir.name]
    if not found or found[-1].name != snapshot_dir.name:
        found.append(snapshot_dir)
    if since_hours is not None:
        latest = taken_at(snapshot_dir)
        found = [p for p in found if (latest - taken_at(p)).total_seconds() / 3600 <= since_hours]
    return found


def taken_at(path: Path) -> datetime:
    try:
        return datetime.strptime(path.name, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise AuditError(f"snapshot {path}: its name is not its time (yyyymmddTHHMMSSZ)") from None


# --- The transformations ---

FEW_PATHS = 8  # read_history reads this many snapshots or fewer by their paths, more through one glob per root
_REPLICA_COLUMNS = ["cluster", "broker", "log_dir", "topic", "partition", "size_bytes", "is_future"]
_DIR_COLUMNS = ["cluster", "broker", "log_dir", "error", "total_bytes"]


def read_history(session: SparkSession, paths: list[Path]) -> tuple[DataFrame, DataFrame]:
    """(replicas, log_dirs) of every snapshot in `paths`, each row with `hours`: its snapshot's time, in hours
    before the last of them. One read of each dataset across all snapshots (a DataFrame per snapshot would be
    analysis and py4j calls per snapshot); the declared types are the read schema."""
    from pyspark.sql import functions as F

    for path in paths:
        for name in ("replicas", "log_dirs"):
            if not (path / name).exists():
                raise AuditError(f"snapshot {path}: no {name} dataset ({path / name} is missing)")
    latest = taken_at(paths[-1])
    offsets = {p.name: (taken_at(p) - latest).total_seconds() / 3600 for p in paths}
    hour_of = F.create_map(*[x for name, h in offsets.items() for x in (F.lit(name), F.lit(h))])

    def read(name: str, columns: list[str]) -> DataFrame:
        declared = {**snapshot.DATASETS[name]}
        ddl = snapshot.spark_ddl({c: declared[c] for c in columns})
        roots = sorted({p.parent for p in paths})
        # One glob per root lists every snapshot at once (a path per snapshot lists each on its own: 20 s for
        # 120); the snapshots outside the window have no hour and are dropped. A few snapshots (the compact
        # history's newest) are read by their own paths: a glob would read the whole root to keep them.
        sources = ([str(p / name) for p in paths] if len(paths) <= FEW_PATHS
                   else [str(r / "[0-9]*T*Z" / name) for r in roots])
        frame = session.read.schema(ddl).parquet(*sources)
        taken = F.regexp_extract(F.col("_metadata.file_path"), rf"(\d{{8}}T\d{{6}}Z)/{name}/", 1)
        hours = F.element_at(hour_of, taken)
        return frame.where(hours.isNotNull()).select(*columns, hours.alias("hours"))

    return read("replicas", _REPLICA_COLUMNS), read("log_dirs", _DIR_COLUMNS)


def partition_series(replicas: DataFrame) -> DataFrame:
    """(cluster, topic, partition, hours, size): one size per partition per snapshot, the median of its current
    replicas present then (they hold the same log; a replica missing with its broker is a gap, not a zero)."""
    from pyspark.sql import functions as F

    return (replicas.where(~F.col("is_future"))
            .groupBy(*PARTITION_KEYS, "hours").agg(F.median("size_bytes").alias("size")))


def retention(session: SparkSession, latest: Path) -> DataFrame:
    """(cluster, topic, partition, retention_bytes, retention_ms) from the latest snapshot's partitions: the
    optional columns snapshot.PARTITIONS_RETENTION, null where a writer did not give them."""
    from pyspark.sql import functions as F

    frame = session.read.parquet(str(latest / "partitions"))
    have = set(frame.columns)
    extra = [(F.col(c).cast(kind) if c in have else F.lit(None).cast(kind)).alias(c)
             for c, kind in snapshot.PARTITIONS_RETENTION.items()]
    return frame.select(*PARTITION_KEYS, *extra)


_FIT_SCHEMA = ("cluster string, topic string, partition int, rate double, slope double, se double, "
               "intercept double, fit_from double, size_now double, cap double, kind string, points int")


def fit_group(rows: pd.DataFrame) -> pd.DataFrame:
    """One partition's rows of partition_series (with its retention) -> its fit, one row (runs on executors)."""
    first = rows.iloc[0]

    def setting(name: str) -> float | None:
        value = first.get(name)
        return None if value is None or pd.isna(value) else float(value)

    fit = model.fit_partition(rows["hours"].to_numpy(float), rows["size"].to_numpy(float),
                              setting("retention_bytes"), setting("retention_ms"))
    return pd.DataFrame([{"cluster": first["cluster"], "topic": first["topic"], "partition": int(first["partition"]),
                          "rate": fit.rate, "slope": fit.slope, "se": fit.se, "intercept": fit.intercept,
                          "fit_from": fit.fit_from, "size_now": fit.size_now, "cap": fit.cap, "kind": fit.kind,
                          "points": fit.points}])


def partition_fits(series: DataFrame, settings: DataFrame) -> DataFrame:
    """Per partition of the window: its rate (bytes/hour), the rate's standard error, the line's intercept and
    first hour, its cap (retention) and kind (forecast_model.KIND_*)."""
    return (series.join(settings, PARTITION_KEYS, "left")
            .groupBy(*PARTITION_KEYS).applyInPandas(fit_group, _FIT_SCHEMA))


def disk_members(replicas: DataFrame, log_dirs: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(disks, members). disks: per log dir, its last snapshot online (`as_of`), its size then and its error in the
    latest snapshot (null if online or absent). members: the copies on each disk at its `as_of`."""
    from pyspark.sql import functions as F

    online = log_dirs.where(F.col("error").isNull())
    as_of = online.groupBy(*DISK_KEYS).agg(F.max("hours").alias("as_of"))
    sized = (online.join(as_of, DISK_KEYS).where(F.col("hours") == F.col("as_of"))
             .select(*DISK_KEYS, "as_of", "total_bytes"))
    now = log_dirs.where(F.col("hours") == 0).select(*DISK_KEYS, F.col("error").alias("error_now"))
    disks = (log_dirs.select(*DISK_KEYS).distinct().join(sized, DISK_KEYS, "left").join(now, DISK_KEYS, "left"))
    members = (replicas.join(as_of, DISK_KEYS).where(F.col("hours") == F.col("as_of"))
               .select(*DISK_KEYS, "topic", "partition", "size_bytes", "is_future"))
    return disks, members


def with_moves(members: DataFrame, moves: DataFrame) -> DataFrame:
    """The members as they will be once `moves` (a plan's moves: cluster, broker, topic, partition, from_dir,
    to_dir) are done: each moved current copy on its to_dir. Its growth goes with it, so both disks' forecasts
    change."""
    from pyspark.sql import functions as F

    m = moves.select("cluster", "broker", "topic", "partition", F.col("from_dir").alias("log_dir"), "to_dir")
    return (members.join(F.broadcast(m), [*DISK_KEYS, "topic", "partition"], "left")
            .select("cluster", "broker",
                    F.when(~F.col("is_future") & F.col("to_dir").isNotNull(), F.col("to_dir"))
                    .otherwise(F.col("log_dir")).alias("log_dir"),
                    "topic", "partition", "size_bytes", "is_future"))


def disk_residuals(series: DataFrame, fits: DataFrame, members: DataFrame) -> DataFrame:
    """(disk, hours, residual): per disk and snapshot, the sum of the residuals around their lines of the partitions
    on the disk now (a partition not seen at a snapshot adds nothing there)."""
    from pyspark.sql import functions as F

    residuals = (series.join(fits.select(*PARTITION_KEYS, "slope", "intercept", "fit_from"), PARTITION_KEYS)
                 .where(F.col("hours") >= F.col("fit_from"))
                 .select(*PARTITION_KEYS, "hours",
                         (F.col("size") - F.col("intercept") - F.col("slope") * F.col("hours")).alias("residual")))
    current = members.where(~F.col("is_future")).select(*DISK_KEYS, *PARTITION_KEYS[1:])
    return (current.join(residuals, PARTITION_KEYS)
            .groupBy(*DISK_KEYS, "hours").agg(F.sum("residual").alias("residual")))


_DISK_SCHEMA = ("cluster string, broker int, log_dir string, used_bytes bigint, rate_bytes_per_hour double, "
                "rate_low double, rate_high double, hours_to_90 double, hours_to_90_early double, "
                "hours_to_90_late double, hours_to_full double, hours_to_full_early double, "
                "hours_to_full_late double, partitions int, growing int, top_partitions array<string>, "
                "top_rates array<double>, projection_hours array<double>, projection_bytes array<double>, "
                "projection_early array<double>, projection_late array<double>")


def se_group(rows: pd.DataFrame) -> pd.DataFrame:
    """One disk's residual sums -> the standard error of its rate (forecast_model.disk_rate_se)."""
    first = rows.iloc[0]
    se = model.disk_rate_se(np.array([]), rows["hours"].to_numpy(float), rows["residual"].to_numpy(float))
    return pd.DataFrame([{"cluster": first["cluster"], "broker": int(first["broker"]), "log_dir": first["log_dir"],
                          "disk_se": se}])


def disk_errors(residuals: DataFrame) -> DataFrame:
    """(disk, disk_se): the standard error of each disk's rate, from its residual sums."""
    return residuals.groupBy(*DISK_KEYS).applyInPandas(
        se_group, "cluster string, broker int, log_dir string, disk_se double")


def forecast_group(members: pd.DataFrame) -> pd.DataFrame:
    """One disk's members (with their partitions' fits, the disk's size and its rate's error) -> its forecast row.
    Times here are hours from the disk's own last snapshot."""
    first = members.iloc[0]
    current = members[~members["is_future"].astype(bool)]
    names = (current["topic"] + "-" + current["partition"].astype(str)).to_numpy()
    total = None if pd.isna(first["total_bytes"]) else float(first["total_bytes"])
    se = first["disk_se"]
    row = disk_row(float(members["size_bytes"].sum()), current["rate"].fillna(0.0).to_numpy(float),
                   current["size_bytes"].to_numpy(float), current["cap"].fillna(math.inf).to_numpy(float),
                   current["se"].to_numpy(float), names, math.nan if se is None or pd.isna(se) else float(se), total)
    return pd.DataFrame([{"cluster": first["cluster"], "broker": int(first["broker"]), "log_dir": first["log_dir"],
                          **row}])


def disk_forecasts(members: DataFrame, disks: DataFrame, fits: DataFrame, errors: DataFrame) -> DataFrame:
    """Per disk with copies on it: the forecast (forecast_group), from its members with their partitions' fits
    and its rate's error (disk_errors)."""
    with_fits = (members.join(fits.select(*PARTITION_KEYS, "rate", "se", "cap"), PARTITION_KEYS, "left")
                 .join(errors, DISK_KEYS, "left").join(disks.select(*DISK_KEYS, "total_bytes"), DISK_KEYS))
    return with_fits.groupBy(*DISK_KEYS).applyInPandas(forecast_group, _DISK_SCHEMA)


# --- The whole forecast ---

def compute(session: SparkSession, paths: list[Path], since_hours: float | None = None,
            moves: DataFrame | pd.DataFrame | None = None, keep_history: bool = True,
            on_driver: bool | None = None,
            meanwhile: Callable[[ForecastResult], None] | None = None) -> ForecastResult:
    """The forecast of every disk as of the last of `paths` (window() chooses them); with `moves` (a plan's: a
    pandas or Spark frame of _MOVES_SCHEMA), as if they were done. From the compact history (history.py),
    brought up to `paths` first and kept under the fleet root (`keep_history`): a new snapshot costs its own read,
    not the window's. On a local master, a history and snapshots the driver can hold (forecast_driver.fits) are
    forecast by the driver itself, with no Spark job (`on_driver` forces either way). `meanwhile`: what the caller
    does with the answer (the command's outputs), called once with it before compute returns; on the driver while
    the history is still being written, so the answer's `kept` is final only once compute has returned."""
    if on_driver is None:
        on_driver = spark.is_local(session) and forecast_driver.fits(paths, keep_history)
    if on_driver:
        given = moves if moves is None or isinstance(moves, pd.DataFrame) else moves.toPandas()
        return forecast_driver.compute(paths, since_hours, given, keep_history, meanwhile)
    # Spark's steps build columns (functions.lit of each snapshot's hours) before their first read: a session
    # deferred by the command (spark.Deferred) is started now, else pyspark asserts it has none.
    session = spark.running(session)
    # The kept history held until the answer is collected (its files are read lazily, by the jobs below): a
    # second forecast of the root at once is refused, as on the driver (forecast_columns.locked).
    with forecast_columns.locked(paths[0].parent) if keep_history else contextlib.nullcontext():
        result = _on_spark(session, paths, since_hours, moves, keep_history)
    if meanwhile is not None:
        meanwhile(result)
    return result


def _on_spark(session: SparkSession, paths: list[Path], since_hours: float | None,
              moves: DataFrame | pd.DataFrame | None, keep_history: bool) -> ForecastResult:
    from pyspark.sql import functions as F

    if isinstance(moves, pd.DataFrame):
        moves = session.createDataFrame(moves, _MOVES_SCHEMA)
    history = forecast_history.update(session, paths, keep=keep_history)
    latest = taken_at(paths[-1])
    hours = {p.name: (taken_at(p) - latest).total_seconds() / 3600 for p in paths}
    t = np.array([hours[n] for n in history.snapshots])
    fits = series_fits(history.series, retention(session, paths[-1]), t).persist()
    hour_of = F.create_map(*[x for n, h in hours.items() for x in (F.lit(n), F.lit(h))])
    log_dirs = history.dirs.select(*DISK_KEYS, F.element_at(hour_of, F.col("snapshot")).alias("hours"), "error",
                                   "total_bytes", "used_bytes")
    online = log_dirs.where(F.col("error").isNull())
    as_of = [r[0] for r in online.groupBy(*DISK_KEYS).agg(F.max("hours").alias("h")).select("h").distinct()
             .collect()]
    disks, members = disk_members(_replicas_at(session, paths, hours, as_of), log_dirs)
    if moves is not None:
        members = with_moves(members, moves)
    errors = residual_errors(fits, members, t)
    found = disk_forecasts(members, disks, fits.drop("residuals"), errors).toPandas()
    result = finish(disks.toPandas(), found)
    fits.unpersist()
    flagged = layout.flagged(result)
    wanted = session.createDataFrame(flagged[DISK_KEYS].astype({"broker": "int32"}),
                                     "cluster string, broker int, log_dir string")
    drawn = (log_dirs.join(F.broadcast(wanted), DISK_KEYS).select(*layout.HISTORY).toPandas()
             if len(flagged) else pd.DataFrame({c: pd.Series(dtype="float64" if c == "hours" else "object")
                                                for c in layout.HISTORY}))
    drawn = drawn.sort_values([*DISK_KEYS, "hours"]).reset_index(drop=True)
    return ForecastResult(paths, since_hours, result, drawn, history.how)


def _replicas_at(session: SparkSession, paths: list[Path], hours: dict[str, float], wanted: list[float],
                 ) -> DataFrame:
    """The replicas of the snapshots at `wanted` hours (the disks' last snapshots online: the latest, and the one
    of each stale disk), each row with its snapshot's hour."""
    from pyspark.sql import functions as F

    chosen = [p for p in paths if hours[p.name] in set(wanted)] or [paths[-1]]
    ddl = snapshot.spark_ddl({c: snapshot.DATASETS["replicas"][c] for c in _REPLICA_COLUMNS})
    frame = None
    for path in chosen:
        one = session.read.schema(ddl).parquet(str(path / "replicas")).select(
            *_REPLICA_COLUMNS, F.lit(hours[path.name]).alias("hours"))
        frame = one if frame is None else frame.unionByName(one)
    assert frame is not None
    return frame


def fit_batches(batches: Any, t: np.ndarray) -> Any:
    """mapInPandas over the compact series: each batch's partitions fitted together (fit_arrays)."""
    for rows in batches:
        if rows.empty:
            continue
        y = np.array([np.asarray(s, dtype=float) for s in rows["sizes"]]).reshape(len(rows), len(t))
        found, residuals = fit_arrays(t, y, rows["retention_bytes"].to_numpy(float),
                                      rows["retention_ms"].to_numpy(float))
        yield pd.DataFrame({"cluster": rows["cluster"], "topic": rows["topic"],
                            "partition": rows["partition"].astype("int32"), **{c: found[c] for c in _FIT_COLUMNS},
                            "residuals": [None if np.isnan(r).all() else r for r in residuals]})


_FIT_COLUMNS = ("rate", "slope", "se", "intercept", "fit_from", "size_now", "cap", "kind", "points")


def fit_arrays(t: np.ndarray, y: np.ndarray, retention_bytes: np.ndarray, retention_ms: np.ndarray,
               whole_slope: np.ndarray | None = None, recent_slope: np.ndarray | None = None,
               guesses: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Partitions' sizes `y` (b, len(t); nan: no point) fitted together (forecast_model.fit_matrix, with the
    Theil-Sen slopes kept from an earlier fit where given, and `guesses` at them tried first): the _FIT_SCHEMA
    columns after the keys (_FIT_COLUMNS) and forecast_model.KEPT_FIELDS, and each one's residuals around its line
    at the times `t` (nan before its fit or where it had no point)."""
    found = model.fit_matrix(t, y, retention_bytes, retention_ms, whole_slope, recent_slope, guesses)
    return {name: found[name] for name in (*_FIT_COLUMNS, *model.KEPT_FIELDS)}, residuals_of(t, y, found)


def residuals_of(t: np.ndarray, y: np.ndarray, found: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's residuals around its fitted line at the times `t` (nan before its fit or where it had no
    point)."""
    return model.residual_rows(t, y, found["slope"], found["intercept"], found["fit_from"])


def series_fits(series: DataFrame, settings: DataFrame, t: np.ndarray) -> DataFrame:
    """partition_fits from the compact history: per partition its fit and its residuals (array, on the grid)."""
    return (series.join(settings, PARTITION_KEYS, "left")
            .mapInPandas(lambda batches: fit_batches(batches, t), _FIT_SCHEMA + ", residuals array<double>"))


def residual_group(rows: pd.DataFrame, t: np.ndarray) -> pd.DataFrame:
    """One disk's partitions' residual arrays -> the standard error of its rate (what se_group does with them
    exploded: the sum at each snapshot where any has one)."""
    first = rows.iloc[0]
    stacked = np.array([np.asarray(r, dtype=float) for r in rows["residuals"] if r is not None]).reshape(-1, len(t))
    seen = np.isfinite(stacked).any(axis=0)
    total = np.nansum(stacked, axis=0)
    se = model.disk_rate_se(np.array([]), t[seen], total[seen])
    return pd.DataFrame([{"cluster": first["cluster"], "broker": int(first["broker"]), "log_dir": first["log_dir"],
                          "disk_se": se}])


def residual_errors(fits: DataFrame, members: DataFrame, t: np.ndarray) -> DataFrame:
    """disk_errors from the fits' residual arrays of the current copies on each disk."""
    from pyspark.sql import functions as F

    current = members.where(~F.col("is_future")).select(*DISK_KEYS, *PARTITION_KEYS[1:])
    return (current.join(fits.select(*PARTITION_KEYS, "residuals").where(F.col("residuals").isNotNull()),
                         PARTITION_KEYS)
            .groupBy(*DISK_KEYS).applyInPandas(lambda rows: residual_group(rows, t),
                                               "cluster string, broker int, log_dir string, disk_se double"))


def compute_from_snapshots(session: SparkSession, paths: list[Path], since_hours: float | None = None,
                           moves: DataFrame | None = None) -> ForecastResult:
    """The forecast read from every snapshot of the window, without the compact history (one row per replica per
    snapshot through the steps above; the tests check it gives compute()'s answer)."""
    replicas, log_dirs = read_history(session, paths)
    series = partition_series(replicas)
    fits = partition_fits(series, retention(session, paths[-1]))
    disks, members = disk_members(replicas, log_dirs)
    if moves is not None:
        members = with_moves(members, moves)
    errors = disk_errors(disk_residuals(series, fits, members))
    forecasts = disk_forecasts(members, disks, fits, errors)
    found = forecasts.toPandas()
    every = disks.toPandas()
    result = finish(every, found)
    return ForecastResult(paths, since_hours, result, disk_history(replicas, layout.flagged(result)))


def disk_history(replicas: DataFrame, disks: pd.DataFrame) -> pd.DataFrame:
    """(disk, hours, used_bytes) of `disks` (a few: the flagged ones) at each snapshot, for the report's plot."""
    from pyspark.sql import functions as F

    columns = list(layout.HISTORY)
    if disks.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "hours" else "object") for c in columns})
    wanted = replicas.sparkSession.createDataFrame(disks[DISK_KEYS].astype({"broker": "int32"}),
                                                   "cluster string, broker int, log_dir string")
    frame = (replicas.join(F.broadcast(wanted), DISK_KEYS).groupBy(*DISK_KEYS, "hours")
             .agg(F.sum("size_bytes").alias("used_bytes")).toPandas())
    return frame.sort_values([*DISK_KEYS, "hours"])[columns].reset_index(drop=True)


def finish(disks: pd.DataFrame, found: pd.DataFrame, declared: bool = False) -> pd.DataFrame:
    """Every disk (also the empty and offline ones) with its forecast, times from the latest snapshot, status, in
    the declared layout, soonest to 90% first. `declared`: `found`'s list columns are each a list or a float array
    already (forecast_disks.disk_rows makes them so), not checked value by value (_as_declared): only the disks it
    has no row for are given empty ones."""
    frame = disks.astype({"broker": "int64"}).merge(found.astype({"broker": "int64"}), on=DISK_KEYS, how="left")
    empty = frame["used_bytes"].isna()
    frame.loc[empty, "used_bytes"] = 0
    for column in ("rate_bytes_per_hour", "rate_low", "rate_high"):
        frame.loc[empty, column] = 0.0
    frame.loc[empty, ["partitions", "growing"]] = 0
    size = frame["total_bytes"].astype(float)
    frame["percent"] = frame["used_bytes"].astype(float) / size * 100
    ago = -frame["as_of"].fillna(0.0).astype(float)
    never = np.where(frame["used_bytes"] >= size, 0.0, math.inf)
    for column in ("hours_to_90", "hours_to_90_early", "hours_to_90_late"):
        base = np.where(frame["used_bytes"] >= LEVEL * size, 0.0, math.inf)
        frame[column] = frame[column].astype(float).where(~empty, base)
    for column in ("hours_to_full", "hours_to_full_early", "hours_to_full_late"):
        frame[column] = frame[column].astype(float).where(~empty, never)
    for column in ("hours_to_90", "hours_to_90_early", "hours_to_90_late", "hours_to_full", "hours_to_full_early",
                   "hours_to_full_late"):
        frame[column] = (frame[column] - ago).clip(lower=0.0).where(size.notna())
    frame["as_of_hours"] = ago
    status = np.where(size.isna(), layout.STATUS_UNKNOWN_SIZE, layout.STATUS_OK)
    status = np.where(frame["as_of"].notna() & (frame["as_of"] < 0), layout.STATUS_STALE, status)
    status = np.where(frame["error_now"].notna() | frame["as_of"].isna(), layout.STATUS_OFFLINE, status)
    frame["status"] = status
    offline = frame["status"] == layout.STATUS_OFFLINE
    for column in [c for c in layout.DISKS if c.startswith(("hours_", "rate"))]:
        frame.loc[offline, column] = math.nan
    for column in ("top_partitions", "top_rates", "projection_hours", "projection_bytes", "projection_early",
                   "projection_late"):
        values = frame[column].to_numpy()
        if declared:  # only the disks `found` has no row for (nan from the merge) made empty lists
            if empty.any():
                made = values.tolist()  # the same objects (a float array stays one), in a list
                for at in np.flatnonzero(empty.to_numpy()):
                    made[at] = []
                frame[column] = made
        elif not _as_declared(values):
            # A comprehension, not Series.apply: a call per disk was 0.5 s of a 20M-replica forecast's 40,000 disks.
            frame[column] = [[] if v is None or isinstance(v, float) else v if type(v) is list or (
                isinstance(v, np.ndarray) and v.dtype.kind == "f") else list(v) for v in values.tolist()]
    frame = frame.astype({"broker": "int32", "used_bytes": "int64", "partitions": "int32", "growing": "int32"})
    frame["total_bytes"] = frame["total_bytes"].astype("Int64")
    order = frame.assign(_k=frame["hours_to_90"].fillna(math.inf), _o=offline)
    frame = order.sort_values(["_o", "_k", "hours_to_full", *DISK_KEYS], kind="mergesort")
    return frame[list(layout.DISKS)].reset_index(drop=True)


def _as_declared(values: np.ndarray) -> bool:
    """Whether a list column's `values` are each a list or a float array already (the driver's disk_rows makes them
    so, for this frame alone): Arrow writes either as the declared array<...>, so the column is taken as it is,
    with no pass of its own over the disks (one was 0.15 s of the 20M append's end, its column made again)."""
    kinds = set(map(type, values))
    if not kinds <= {list, np.ndarray}:
        return False
    return np.ndarray not in kinds or all(v.dtype.kind == "f" for v in values if type(v) is np.ndarray)


_MOVES_SCHEMA = "cluster string, broker int, topic string, partition int, from_dir string, to_dir string"


def planned_moves(plan: Path) -> pd.DataFrame:
    """A plan's log-dir moves (plan_layout's moves dataset). A move to another broker (`to_broker`) is left out:
    the dir it lands in is the new broker's choice, so the forecast cannot place it."""
    from mover.audit import plan_layout

    table = plan_layout.read_table(plan, plan_layout.MOVES_DIR, plan_layout.MOVES, plan_layout.MOVES_OPTIONAL)
    moves = table.to_pandas()
    if "to_broker" in moves:
        moves = moves[moves["to_broker"].isna()]
    columns = [c.split(" ")[0] for c in _MOVES_SCHEMA.split(", ")]
    return moves[columns].astype({"broker": "int32", "partition": "int32"}).reset_index(drop=True)


def run(args: argparse.Namespace) -> int:
    latest, _ = snapshot.resolve(args.snapshot, args.snapshots)
    paths = window(latest, args.since)
    out = Path(args.out) if args.out else latest.with_name(latest.name + "-audit")
    moves = planned_moves(Path(args.plan)) if args.plan else None
    # A history the driver holds needs no Spark job: the session (and its JVM) starts only if a step uses it.
    session = spark.from_args(args, defer=True)

    def outputs(result: ForecastResult) -> None:
        # Written while the driver's history is still being written (its fsyncs: 0.2-0.5 s of a 20M append that
        # the outputs waited for, docs/forecast-performance.md); Spark's session, if one was started, stops in a
        # thread meanwhile.
        spark.release()
        write(result, out)
        print_summary(result, out)

    compute(session, paths, args.since, moves, meanwhile=outputs)
    return 0
