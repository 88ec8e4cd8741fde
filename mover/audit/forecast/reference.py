"""The forecast read from every snapshot with pandas, without Spark nor the kept history: the tests' and the
accuracy bench's reference for forecast.compute's Spark steps and forecast_driver's (forecast.compute_local)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from mover.audit import snapshot
from mover.audit.forecast import layout as layout
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast.history import DISK_KEYS, PARTITION_KEYS

if TYPE_CHECKING:
    from mover.audit.forecast import ForecastResult



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
    disks, as_of = forecast_members.disks_as_of(log_dirs)
    members = forecast_members.members_frame(replicas, as_of, moves)
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
    groups = [fc.forecast_group(g) for _, g in with_fits.groupby(DISK_KEYS, sort=False)]
    # No copy on a listed disk (every one on a dir its snapshot does not list): every disk empty.
    kinds = {"double": "float64", "bigint": "int64", "int": "int64"}
    found = pd.concat(groups, ignore_index=True) if groups else pd.DataFrame(
        {name: pd.Series(dtype=kinds.get(kind, object))
         for name, kind in (c.split(" ") for c in fc._DISK_SCHEMA.split(", "))})
    result = fc.finish(disks, found)
    wanted = layout.flagged(result)[DISK_KEYS].astype({"broker": replicas["broker"].dtype})
    history = (replicas.merge(wanted, on=DISK_KEYS).groupby([*DISK_KEYS, "hours"], as_index=False)["size_bytes"]
               .sum().rename(columns={"size_bytes": "used_bytes"}))
    return fc.ForecastResult(paths, since_hours, result, history[list(layout.HISTORY)])
