"""The forecast on the driver, with no Spark job: for a local master and a fleet whose compact history the driver
holds (fits: DRIVER_CELLS, DRIVER_REPLICA_ROWS). The same answer as forecast.compute's Spark steps (the tests
check it), from the same kept history (forecast_history.py's layout, written here with pyarrow): a new snapshot
costs its own read (pyarrow, one groupby) and the history's rewrite; every partition is fitted in numpy batches
(forecast.fit_arrays) and every disk's residual sums are one sorted reduction, not a pandas group each.

`compute_local` is the forecast read from every snapshot with pandas, without the kept history: the tests' and the
accuracy bench's reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import forecast_history, snapshot
from mover.audit import forecast_layout as layout
from mover.audit import forecast_model as model

if TYPE_CHECKING:
    from mover.audit.forecast import ForecastResult

PARTITION_KEYS = ["cluster", "topic", "partition"]
DISK_KEYS = ["cluster", "broker", "log_dir"]
# The driver holds the history's sizes as doubles, partitions x snapshots (320 MB at this bound, about 1.3M
# partitions over 31 daily snapshots), and reads one snapshot of up to DRIVER_REPLICA_ROWS replicas at a time
# with pandas; past either, the forecast is Spark's.
DRIVER_CELLS = 40_000_000
DRIVER_REPLICA_ROWS = 4_000_000
FIT_BATCH = 4096  # partitions fitted at once: their pairs' slopes are FIT_BATCH x n(n-1)/2 doubles (15 MB at 31)


@dataclass
class Held:
    """The compact history in the driver's memory."""
    snapshots: list[str]  # the grid, oldest first
    keys: pd.DataFrame  # cluster, topic, partition: one row per partition
    sizes: np.ndarray  # (partitions, snapshots) doubles, nan: no point (forecast_history.SERIES's nulls)
    dirs: pd.DataFrame  # forecast_history.DIRS
    how: str


def fits(paths: list[Path], keep: bool = True) -> bool:
    """Whether the driver forecasts the window `paths` itself: every snapshot it would read is one it reads with
    pyarrow (snapshot.driver_readable, DRIVER_REPLICA_ROWS) and the history it would hold is within DRIVER_CELLS."""
    from mover.audit import partitions

    step = forecast_history.plan(paths, keep)
    reading = paths if step.how in ("in memory", "rebuilt") else step.new
    rows = snapshot.dataset_rows(paths[-1] / "partitions")
    if rows is None or rows * len(paths) > DRIVER_CELLS:
        return False
    return all(snapshot.driver_readable(p, DRIVER_REPLICA_ROWS, partitions.LOCAL_ROWS)
               for p in {*reading, paths[-1]})


def _replicas(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    from mover.audit import forecast as fc

    return pq.read_table(path / "replicas", columns=fc._REPLICA_COLUMNS).to_pandas()


def _one(path: Path) -> tuple[pd.Series, pd.DataFrame]:
    """(sizes, dirs) of one snapshot: each partition's size (the median of its current replicas, by its keys) and
    each log dir's row of forecast_history.DIRS."""
    import pyarrow.parquet as pq

    from mover.audit import forecast as fc

    replicas = _replicas(path)
    current = replicas[~replicas["is_future"].astype(bool)]
    sizes = current.groupby(PARTITION_KEYS, sort=False)["size_bytes"].median().astype(float)
    used = (replicas.groupby(DISK_KEYS, sort=False, as_index=False)["size_bytes"].sum()
            .rename(columns={"size_bytes": "used_bytes"}))
    dirs = pq.read_table(path / "log_dirs", columns=fc._DIR_COLUMNS).to_pandas().merge(used, on=DISK_KEYS,
                                                                                        how="left")
    dirs = dirs.assign(snapshot=path.name, used_bytes=dirs["used_bytes"].fillna(0).astype("int64"))
    return sizes, dirs[list(forecast_history.DIRS)]


def _read_kept(root: Path) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame] | None:
    """The kept history's (keys, sizes, dirs); None when its series are not one size per grid snapshot."""
    import pyarrow.parquet as pq

    where = forecast_history.where(root)
    series = pq.read_table(where / "series")
    count = len(forecast_history.read_manifest(root) or [])
    lists = series.column("sizes").combine_chunks()
    if lists.null_count or any(n != count for n in np.unique(np.diff(lists.offsets.to_numpy()))):
        return None
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(float)
    keys = series.select(PARTITION_KEYS).to_pandas()
    return keys, values.reshape(len(keys), count), pq.read_table(where / "dirs").to_pandas()


def _appended(keys: pd.DataFrame, sizes: np.ndarray, paths: list[Path],
              ) -> tuple[pd.DataFrame, np.ndarray, list[pd.DataFrame]]:
    """`sizes` (on `keys`) with a column per snapshot of `paths`, read one at a time (only one snapshot's replicas
    and the columns so far are held); a partition first seen in one has no point before; a partition with no point
    left is dropped (deleted before the window). Also the new snapshots' dirs."""
    index = pd.MultiIndex.from_frame(keys.astype({"partition": "int64"}))
    columns, dirs = [sizes[:, j] for j in range(sizes.shape[1])], []
    for path in paths:
        found, their_dirs = _one(path)
        at = index.get_indexer(found.index)
        fresh = at < 0
        if fresh.any():  # partitions new to the history: rows appended, the kept rows keep their places
            at[fresh] = len(index) + np.arange(int(fresh.sum()))
            index = index.append(found.index[fresh])
        column = np.full(len(index), np.nan)
        column[at] = found.to_numpy(float)
        columns.append(column)
        dirs.append(their_dirs)
    grown = np.full((len(index), len(columns)), np.nan)
    for j, column in enumerate(columns):
        grown[:len(column), j] = column
    alive = np.isfinite(grown).any(axis=1)
    every = index.to_frame(index=False)
    return every[alive].reset_index(drop=True), grown[alive], dirs


def _write(root: Path, held: Held) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = held.sizes.shape[1]
    flat = held.sizes.ravel()
    lists = pa.ListArray.from_arrays(pa.array(np.arange(len(held.keys) + 1, dtype="int32") * n),
                                     pa.array(flat, pa.float64(), mask=np.isnan(flat)))
    series = pa.table({"cluster": pa.array(held.keys["cluster"], pa.string()),
                       "topic": pa.array(held.keys["topic"], pa.string()),
                       "partition": pa.array(held.keys["partition"], pa.int32()), "sizes": lists})
    dirs = pa.Table.from_pandas(held.dirs.astype({"broker": "int32", "total_bytes": "Int64"}),
                                schema=forecast_history_schema(), preserve_index=False)

    def writes(tmp: Path) -> None:
        for name, table in (("series", series), ("dirs", dirs)):
            (tmp / name).mkdir(parents=True)
            pq.write_table(table, tmp / name / "part-00000.parquet")

    forecast_history.swap_in(root, held.snapshots, writes)


def forecast_history_schema() -> Any:
    from mover.audit.plan_layout import arrow_schema

    return arrow_schema(forecast_history.DIRS)


def update(paths: list[Path], keep: bool = True) -> Held:
    """forecast_history.update on the driver: the same steps (plan), the same layout kept."""
    step = forecast_history.plan(paths, keep)
    root, names = paths[0].parent, [p.name for p in paths]
    kept = _read_kept(root) if step.how.startswith(("kept", "appended")) else None
    how = step.how if kept is not None or step.how in ("in memory", "rebuilt") else "rebuilt"
    if kept is None:
        keys = pd.DataFrame({"cluster": pd.Series(dtype=object), "topic": pd.Series(dtype=object),
                             "partition": pd.Series(dtype="int64")})
        sizes, new, dirs = np.zeros((0, 0)), paths, pd.DataFrame(columns=list(forecast_history.DIRS))
    else:
        keys, sizes, dirs = kept
        sizes, new = sizes[:, step.drop:], step.new
        dirs = dirs[dirs["snapshot"].isin(names)]
        if step.drop:
            alive = np.isfinite(sizes).any(axis=1)
            keys, sizes = keys[alive].reset_index(drop=True), sizes[alive]
    if new:
        keys, sizes, added = _appended(keys, sizes, new)
        dirs = pd.concat([d for d in [dirs, *added] if len(d)], ignore_index=True)
    held = Held(names, keys, sizes, dirs.reset_index(drop=True), how)
    if how not in ("kept", "in memory"):
        try:
            _write(root, held)
        except OSError:
            held.how = "in memory"  # a root this process cannot write: nothing kept
    return held


def _disks(log_dirs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(disks, as_of) from the log dirs' rows with their snapshots' `hours`: forecast.disk_members' disks, and each
    disk's last snapshot online."""
    online = log_dirs[log_dirs["error"].isna()]
    as_of = online.groupby(DISK_KEYS, as_index=False)["hours"].max().rename(columns={"hours": "as_of"})
    sized = online.merge(as_of, on=DISK_KEYS)
    sized = sized[sized["hours"] == sized["as_of"]][[*DISK_KEYS, "as_of", "total_bytes"]]
    now = log_dirs[log_dirs["hours"] == 0][[*DISK_KEYS, "error"]].rename(columns={"error": "error_now"})
    disks = (log_dirs[DISK_KEYS].drop_duplicates().merge(sized, on=DISK_KEYS, how="left")
             .merge(now, on=DISK_KEYS, how="left"))
    return disks, as_of


def _members(replicas: pd.DataFrame, as_of: pd.DataFrame, moves: pd.DataFrame | None) -> pd.DataFrame:
    """forecast.disk_members' members (and forecast.with_moves'), from the replicas with their snapshots' `hours`."""
    members = replicas.merge(as_of, on=DISK_KEYS)
    members = members[members["hours"] == members["as_of"]][[*DISK_KEYS, "topic", "partition", "size_bytes",
                                                             "is_future"]]
    if moves is not None:
        m = moves[["cluster", "broker", "topic", "partition", "from_dir", "to_dir"]].rename(
            columns={"from_dir": "log_dir"})
        members = members.merge(m, on=[*DISK_KEYS, "topic", "partition"], how="left")
        moved = ~members["is_future"].astype(bool) & members["to_dir"].notna()
        members.loc[moved, "log_dir"] = members.loc[moved, "to_dir"]
        members = members.drop(columns=["to_dir"])
    return members.reset_index(drop=True)


def _settings(latest: Path, keys: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(retention_bytes, retention_ms) of each partition of `keys` in the latest snapshot (nan: not given)."""
    import pyarrow.parquet as pq

    table = pq.read_table(latest / "partitions").to_pandas()
    index = pd.MultiIndex.from_frame(table[PARTITION_KEYS]).get_indexer(pd.MultiIndex.from_frame(keys))
    out = []
    for column in snapshot.PARTITIONS_RETENTION:
        given = table[column].to_numpy(float) if column in table else np.full(len(table), np.nan)
        out.append(np.where(index >= 0, given[np.maximum(index, 0)] if len(given) else np.nan, np.nan))
    return out[0], out[1]


def compute(paths: list[Path], since_hours: float | None = None, moves: pd.DataFrame | None = None,
            keep: bool = True) -> ForecastResult:
    """forecast.compute on the driver (fits() says when): the kept history brought up to `paths`, every partition
    fitted in batches, each disk's residual sums by one sorted reduction over its current copies."""
    from mover.audit import forecast as fc

    held = update(paths, keep)
    latest = fc.taken_at(paths[-1])
    hours = {p.name: (fc.taken_at(p) - latest).total_seconds() / 3600 for p in paths}
    t = np.array([hours[n] for n in held.snapshots])
    log_dirs = held.dirs.assign(hours=held.dirs["snapshot"].map(hours))
    disks, as_of = _disks(log_dirs)
    wanted = set(as_of["as_of"].tolist())
    chosen = [p for p in paths if hours[p.name] in wanted] or [paths[-1]]
    members = _members(pd.concat([_replicas(p).assign(hours=hours[p.name]) for p in chosen], ignore_index=True),
                       as_of, moves)
    members = members.merge(disks[[*DISK_KEYS, "total_bytes"]].astype({"broker": members["broker"].dtype}),
                             on=DISK_KEYS)
    # Each copy's partition (its row of the history, -1: none) and disk; the copies sorted by disk.
    members["_p"] = pd.MultiIndex.from_frame(held.keys).get_indexer(pd.MultiIndex.from_frame(members[PARTITION_KEYS]))
    members["_d"] = members.groupby(DISK_KEYS, sort=False).ngroup()
    members = members.sort_values("_d", kind="stable").reset_index(drop=True)
    current = members[~members["is_future"].astype(bool) & (members["_p"] >= 0)]
    found, totals, seen = _fitted(held, t, paths[-1], current, int(members["_d"].max()) + 1 if len(members) else 0)
    # Each copy's partition's rate, cap and rate error (a copy of no fitted partition, row -1, takes the last:
    # 0, inf, nan, as forecast_group's left join leaves it); a nan rate or cap as forecast_group fills it.
    copies = members["_p"].to_numpy()
    rate = np.nan_to_num(found["rate"][copies], nan=0.0)
    cap = np.nan_to_num(found["cap"][copies], nan=math.inf)
    rate_se = found["se"][copies]
    future = members["is_future"].astype(bool).to_numpy()
    sizes = members["size_bytes"].to_numpy(float)
    names = (members["topic"].astype(str) + "-" + members["partition"].astype(str)).to_numpy()
    totals_bytes = members["total_bytes"].to_numpy(float)
    rows = []
    bounds = np.flatnonzero(np.diff(members["_d"].to_numpy(), prepend=-1, append=-1))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        d = int(members["_d"].iat[lo])
        mine = lo + np.flatnonzero(~future[lo:hi])
        ok = seen[d]
        se = model.disk_rate_se(np.array([]), t[ok], totals[d, ok]) if ok.any() else math.nan
        total = float(totals_bytes[lo])
        rows.append({"cluster": members["cluster"].iat[lo], "broker": int(members["broker"].iat[lo]),
                     "log_dir": members["log_dir"].iat[lo],
                     **fc.disk_row(float(sizes[lo:hi].sum()), rate[mine], sizes[mine], cap[mine], rate_se[mine],
                                   names[mine], se, None if math.isnan(total) else total)})
    found_frame = pd.DataFrame(rows, columns=[c.split(" ")[0] for c in fc._DISK_SCHEMA.split(", ")])
    result = fc.finish(disks, found_frame)
    flagged = layout.flagged(result)[DISK_KEYS]
    drawn = log_dirs.merge(flagged.astype({"broker": log_dirs["broker"].dtype}), on=DISK_KEYS)[list(layout.HISTORY)]
    drawn = drawn.sort_values([*DISK_KEYS, "hours"]).reset_index(drop=True)
    return fc.ForecastResult(paths, since_hours, result, drawn, held.how)


def _fitted(held: Held, t: np.ndarray, latest: Path, current: pd.DataFrame, disks: int,
            ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(fits, totals, seen): every partition's rate, se and cap (by history row, one more for none), and per disk
    and snapshot the sum of its current copies' residuals and whether any had one (forecast.residual_group)."""
    from mover.audit import forecast as fc

    retention_bytes, retention_ms = _settings(latest, held.keys)
    n = len(t)
    totals, counts = np.zeros((disks, n)), np.zeros((disks, n), dtype=np.int64)
    # The copies by partition row, so that each batch of rows finds its copies as one slice.
    by_row = current.sort_values("_p", kind="stable")
    rows, on = by_row["_p"].to_numpy(), by_row["_d"].to_numpy()
    parts: list[dict[str, np.ndarray]] = []
    for lo in range(0, len(held.keys), FIT_BATCH):
        hi = min(lo + FIT_BATCH, len(held.keys))
        found, residuals = fc.fit_arrays(t, held.sizes[lo:hi], retention_bytes[lo:hi], retention_ms[lo:hi])
        parts.append(found)
        a, b = np.searchsorted(rows, [lo, hi])
        if a == b:
            continue
        # Sum each disk's copies' residuals: the copies of this batch sorted by disk, one reduceat.
        order = np.argsort(on[a:b], kind="stable")
        d, r = on[a:b][order], residuals[rows[a:b][order] - lo]
        starts = np.flatnonzero(np.diff(d, prepend=-1))
        totals[d[starts]] += np.add.reduceat(np.nan_to_num(r, nan=0.0), starts, axis=0)
        counts[d[starts]] += np.add.reduceat(np.isfinite(r).astype(np.int64), starts, axis=0)
    # One more row past the partitions' for the copies of none (row -1).
    found = {k: np.concatenate([*(p[k] for p in parts), [absent]])
             for k, absent in (("rate", 0.0), ("se", math.nan), ("cap", math.inf))}
    return found, totals, counts > 0


def compute_local(paths: list[Path], since_hours: float | None = None,
                  moves: pd.DataFrame | None = None) -> ForecastResult:
    """forecast.compute without Spark nor the kept history: every snapshot of the window read, the same steps and
    the same per-group functions (fit_group, se_group, forecast_group) joined with pandas (the tests check it
    gives the same forecast as Spark and as compute)."""
    import pyarrow.parquet as pq

    from mover.audit import forecast as fc

    latest = fc.taken_at(paths[-1])
    reps, dirs = [], []
    for path in paths:
        h = (fc.taken_at(path) - latest).total_seconds() / 3600
        reps.append(pq.read_table(path / "replicas", columns=fc._REPLICA_COLUMNS).to_pandas().assign(hours=h))
        dirs.append(pq.read_table(path / "log_dirs", columns=fc._DIR_COLUMNS).to_pandas().assign(hours=h))
    replicas, log_dirs = pd.concat(reps, ignore_index=True), pd.concat(dirs, ignore_index=True)
    current = replicas[~replicas["is_future"].astype(bool)]
    series = current.groupby([*PARTITION_KEYS, "hours"], as_index=False)["size_bytes"].median()
    series = series.rename(columns={"size_bytes": "size"})
    table = pq.read_table(paths[-1] / "partitions").to_pandas()
    for column in snapshot.PARTITIONS_RETENTION:
        if column not in table:
            table[column] = None
    settings = table[[*PARTITION_KEYS, *snapshot.PARTITIONS_RETENTION]]
    joined = series.merge(settings, on=PARTITION_KEYS, how="left")
    fits = pd.concat([fc.fit_group(g) for _, g in joined.groupby(PARTITION_KEYS, sort=False)], ignore_index=True)
    disks, as_of = _disks(log_dirs)
    members = _members(replicas, as_of, moves)
    res = series.merge(fits[[*PARTITION_KEYS, "slope", "intercept", "fit_from"]], on=PARTITION_KEYS)
    res = res[res["hours"] >= res["fit_from"]]
    res = res.assign(residual=res["size"] - res["intercept"] - res["slope"] * res["hours"])
    on_disk = members[~members["is_future"].astype(bool)][[*DISK_KEYS, "topic", "partition"]]
    residuals = (on_disk.merge(res[[*PARTITION_KEYS, "hours", "residual"]], on=PARTITION_KEYS)
                 .groupby([*DISK_KEYS, "hours"], as_index=False)["residual"].sum())
    errors = pd.concat([fc.se_group(g) for _, g in residuals.groupby(DISK_KEYS, sort=False)], ignore_index=True) \
        if len(residuals) else pd.DataFrame(columns=[*DISK_KEYS, "disk_se"])
    with_fits = (members.merge(fits[[*PARTITION_KEYS, "rate", "se", "cap"]], on=PARTITION_KEYS, how="left")
                 .merge(errors.astype({"broker": members["broker"].dtype}), on=DISK_KEYS, how="left")
                 .merge(disks[[*DISK_KEYS, "total_bytes"]], on=DISK_KEYS))
    found = pd.concat([fc.forecast_group(g) for _, g in with_fits.groupby(DISK_KEYS, sort=False)], ignore_index=True)
    result = fc.finish(disks, found)
    wanted = layout.flagged(result)[DISK_KEYS].astype({"broker": replicas["broker"].dtype})
    history = (replicas.merge(wanted, on=DISK_KEYS).groupby([*DISK_KEYS, "hours"], as_index=False)["size_bytes"]
               .sum().rename(columns={"size_bytes": "used_bytes"}))
    return fc.ForecastResult(paths, since_hours, result, history[list(layout.HISTORY)])
