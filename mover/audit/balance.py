"""What "balanced" means for the disks of one broker: Cruise Control's two intra-broker disk goals, as thresholds.

- IntraBrokerDiskCapacityGoal: no disk above `capacity` (0.8) of its size.
- IntraBrokerDiskUsageDistributionGoal: every disk's usage, as a fraction of its size, within a band around the
  broker's average `avg = sum(used) / sum(size)` over its online disks:
  `avg * (1 - (balance - 1) * margin) <= used / size <= avg * (1 + (balance - 1) * margin)`, with Cruise Control's
  defaults balance 1.10 and margin 0.9 (hard-coded there, its issue #2372; an option here).

A disk's usage is the bytes of the replica copies in it (future copies included: they take space), which is what a
move changes. When a broker does not report the size of its disks (before DescribeLogDirs v4, no capacity file), the
percentages are unknown and said so; its balance is then judged on bytes against the broker's mean, which assumes
equal disks and is marked `basis = "bytes"`.

Pure pandas: the audit, the planner and the report share it, with or without Spark.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mover.cli.arguments import float_in

BASIS_CAPACITY = "capacity"
BASIS_BYTES = "bytes"


@dataclass(frozen=True)
class Thresholds:
    capacity: float = 0.8
    balance: float = 1.10
    margin: float = 0.9

    @property
    def half_width(self) -> float:
        """The band's half width as a fraction of the average."""
        return (self.balance - 1) * self.margin

    def band(self, avg: float | np.ndarray) -> tuple[float | np.ndarray, float | np.ndarray]:
        return avg * (1 - self.half_width), avg * (1 + self.half_width)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Thresholds()
    group = parser.add_argument_group("thresholds (Cruise Control's defaults)")
    group.add_argument("--capacity-threshold", type=fraction, default=d.capacity, metavar="F",
                       help=f"no disk above this fraction of its size (default {d.capacity})")
    group.add_argument("--balance-threshold", type=_balance, default=d.balance, metavar="F",
                       help=f"disk usage band around the broker's average: avg x (1 +- (F - 1) x margin) "
                            f"(default {d.balance})")
    group.add_argument("--balance-margin", type=fraction, default=d.margin, metavar="F",
                       help=f"(default {d.margin})")


def from_args(args: argparse.Namespace) -> Thresholds:
    return Thresholds(args.capacity_threshold, args.balance_threshold, args.balance_margin)


fraction = float_in(lambda v: 0 < v <= 1, "a number between 0 and 1", "a number above 0 and at most 1")
_balance = float_in(lambda v: 1 <= v < 2, "a number of at least 1", "a number from 1 up to 2")


def assess_disks(disks: pd.DataFrame, t: Thresholds) -> pd.DataFrame:
    """Adds to a table of disks (cluster, broker, log_dir, error, total_bytes, usable_bytes, used_bytes) each disk's
    `percent` (used / total, null when unknown), the broker's average and band, `load` (the disk's usage on the
    basis the band is in), `deviation` (load / broker average - 1), `out_of_band` and `over_capacity`."""
    d = disks.copy()
    d["online"] = d["error"].isna()
    d["used_bytes"] = d["used_bytes"].fillna(0).astype("int64")
    total = d["total_bytes"].astype("float64")
    d["percent"] = np.where(d["online"] & (total > 0), d["used_bytes"] / total.where(total > 0) * 100, np.nan)
    online = d[d["online"]]
    keys = ["cluster", "broker"]
    g = online.groupby(keys)
    per_broker = pd.DataFrame({
        "online_disks": g.size(),
        "used": g["used_bytes"].sum(),
        "total": g["total_bytes"].sum(min_count=1),
        # Every online disk's size known and above zero (NaN > 0 is False); vectorized: one group per broker.
        "known": (online["total_bytes"].astype("float64") > 0).groupby([online[k] for k in keys]).all(),
    })
    per_broker["basis"] = np.where(per_broker["known"], BASIS_CAPACITY, BASIS_BYTES)
    # The average disk usage: a percentage of capacity when every online disk's size is known, else mean bytes.
    per_broker["avg"] = np.where(per_broker["known"], per_broker["used"] / per_broker["total"] * 100,
                                 per_broker["used"] / per_broker["online_disks"])
    d = d.merge(per_broker[["basis", "avg"]].reset_index(), on=keys, how="left")
    d["load"] = np.where(d["basis"] == BASIS_CAPACITY, d["percent"], d["used_bytes"].astype("float64"))
    d.loc[~d["online"], "load"] = np.nan
    d["band_low"], d["band_high"] = t.band(d["avg"])
    with np.errstate(invalid="ignore", divide="ignore"):
        d["deviation"] = np.where(d["avg"] > 0, d["load"] / d["avg"] - 1, 0.0)
    # A tiny tolerance so a disk planned exactly onto the edge is not called out of band by rounding.
    eps = 1e-9
    below = d["load"] < d["band_low"] * (1 - eps)
    above = d["load"] > d["band_high"] * (1 + eps)
    d["out_of_band"] = d["online"] & (below | above)
    d["over_capacity"] = d["online"] & (d["percent"] > t.capacity * 100 * (1 + eps))
    return d


def assess_brokers(d: pd.DataFrame) -> pd.DataFrame:
    """Per broker, from assess_disks' table: disks, offline dirs, max/mean ratio of disk usage, standard deviation of
    disk percent, disks out of band and over capacity; worst first."""
    keys = ["cluster", "broker"]
    online = d[d["online"]]
    g = online.groupby(keys)
    b = pd.DataFrame({
        "disks_online": g.size(),
        "used_bytes": g["used_bytes"].sum(),
        "total_bytes": g["total_bytes"].sum(min_count=1),
        "basis": g["basis"].first(),
        "max_mean_ratio": g["load"].max() / g["load"].mean(),
        "percent_std": g["percent"].std(ddof=0),
        "percent_max": g["percent"].max(),
        "percent_min": g["percent"].min(),
        "disks_out_of_band": g["out_of_band"].sum(),
        "disks_over_capacity": g["over_capacity"].sum(),
    })
    all_disks = d.groupby(keys)
    b = b.reindex(all_disks.size().index)
    b["disks"] = all_disks.size()
    # A sum per group, not a Python function per broker (0.5 s at the 5,000 brokers of a 20M-replica fleet).
    b["disks_offline"] = (~d["online"].astype(bool)).groupby([d["cluster"], d["broker"]]).sum()
    for column in ("disks_online", "disks_out_of_band", "disks_over_capacity", "used_bytes"):
        b[column] = b[column].fillna(0).astype("int64")
    b.loc[b["basis"] == BASIS_BYTES, "total_bytes"] = np.nan
    b["max_mean_ratio"] = b["max_mean_ratio"].replace([np.inf], np.nan)
    b = b.reset_index()
    return sort_worst_first(b)


def sort_worst_first(b: pd.DataFrame) -> pd.DataFrame:
    """Disks over capacity first (data at risk), then offline dirs, then disks out of band, then the spread."""
    return b.sort_values(["disks_over_capacity", "disks_offline", "disks_out_of_band", "max_mean_ratio"],
                         ascending=False, na_position="last", kind="mergesort").reset_index(drop=True)
