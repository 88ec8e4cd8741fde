"""plan --horizon: the plan made for the disks as the forecast gives them at the horizon, not only as they are.

Each partition's growth over the horizon comes from the forecast's own fits (mover/audit/forecast: read_history,
partition_series, partition_fits over the snapshots beside the planned one): its rate until its cap (retention),
never below nothing added (a shrinking partition is planned at its size now, so the hard rules hold today too). The
planner then sees every current copy at its size now plus that growth: a disk in band today that the forecast takes
out of it is planned, and the partitions that grow fastest weigh the most, so they are the ones moved off it. The
growth travels to the planner's task as sorted arrays (`Growth.arrays`), looked up by cluster and partition key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from mover.audit import spark_hash
from mover.audit.errors import AuditError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# (cluster code of each broker key, first row of each cluster code and one past the last, partition keys sorted
# within each cluster, bytes each adds): what the planner's task looks a copy's growth up in.
GrowthArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Growth:
    hours: float
    partitions: pd.DataFrame  # cluster, topic, partition, pkey, rate (bytes/hour), added (bytes by the horizon)

    def arrays(self, dirs: pd.DataFrame) -> GrowthArrays:
        """The lookup arrays for the listed dirs (encoding.listed_dirs: cluster and bkey per dir)."""
        names = sorted(set(dirs["cluster"].astype(str)))
        code = {n: i for i, n in enumerate(names)}
        per_bkey = dirs.drop_duplicates("bkey").sort_values("bkey")
        of_bkey = np.full(int(dirs["bkey"].max()) + 1 if len(dirs) else 0, -1, dtype="int64")
        of_bkey[per_bkey["bkey"].to_numpy(dtype="int64")] = [code[str(c)] for c in per_bkey["cluster"]]
        g = self.partitions[self.partitions["cluster"].astype(str).isin(code)]
        # A key two partitions of a cluster share is ambiguous: neither grows (never guessed).
        g = g[~g.duplicated(["cluster", "pkey"], keep=False)]
        codes = np.array([code[str(c)] for c in g["cluster"]], dtype="int64")
        keys = g["pkey"].to_numpy(dtype="int64")
        order = np.lexsort((keys, codes))
        starts = np.searchsorted(codes[order], np.arange(len(names) + 1))
        return of_bkey, starts, keys[order], g["added"].to_numpy(dtype="int64")[order]


def added(arrays: GrowthArrays, bkey: int, keys: np.ndarray) -> np.ndarray:
    """Bytes each partition of `keys` (on broker key `bkey`) adds by the horizon (0: unknown to the forecast)."""
    of_bkey, starts, sorted_keys, grows = arrays
    out = np.zeros(len(keys), dtype="int64")
    c = int(of_bkey[bkey]) if bkey < len(of_bkey) else -1
    if c < 0 or not len(keys):
        return out
    lo, hi = int(starts[c]), int(starts[c + 1])
    if lo == hi:
        return out
    mine = sorted_keys[lo:hi]
    at = np.minimum(np.searchsorted(mine, keys), hi - lo - 1)
    found = mine[at] == keys
    out[found] = grows[lo:hi][at[found]]
    return out


def growth(session: SparkSession, latest: Path, since_hours: float | None, horizon_hours: float) -> Growth:
    """Each partition's growth by `horizon_hours` after the snapshot `latest`, from the snapshots beside it within
    `since_hours` (the forecast's window)."""
    from mover.audit import forecast

    paths = forecast.window(latest, since_hours)
    if len(paths) < 2:
        raise AuditError(f"--horizon: no snapshot before {latest.name} beside it (within --since): the forecast needs "
                         "a history")
    replicas, _ = forecast.read_history(session, paths)
    fits = (forecast.partition_fits(forecast.partition_series(replicas), forecast.retention(session, paths[-1]))
            .select("cluster", "topic", "partition", "rate", "cap", "size_now").toPandas())
    return from_fits(fits, horizon_hours)


def from_fits(fits: pd.DataFrame, horizon_hours: float) -> Growth:
    """Growth from the forecast's partition fits (cluster, topic, partition, rate, cap, size_now)."""
    import pyarrow as pa

    rate = fits["rate"].to_numpy(dtype="float64")
    room = np.maximum(0.0, fits["cap"].to_numpy(dtype="float64") - fits["size_now"].to_numpy(dtype="float64"))
    grows = np.nan_to_num(np.clip(rate * horizon_hours, 0.0, room), nan=0.0)
    keys = spark_hash.partition_keys(pa.array(fits["topic"].astype(str), pa.string()),
                                     pa.array(fits["partition"].astype("int32"), pa.int32())) if len(fits) else \
        np.zeros(0, dtype="int64")
    frame = pd.DataFrame({"cluster": fits["cluster"].astype(str).to_numpy(), "topic": fits["topic"].to_numpy(),
                          "partition": fits["partition"].to_numpy(dtype="int32"), "pkey": keys,
                          "rate": rate, "added": np.floor(grows).astype("int64")})
    return Growth(horizon_hours, frame)
