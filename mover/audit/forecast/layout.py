"""The forecast's outputs, declared once (as snapshot.py declares the input and plan_layout.py the plan): written by
`forecast` and `audit --forecast` beside the audit's files, read by `report` and alerting. See docs/audit.md,
"forecast".

    OUT/forecast.parquet   one row per disk (DISKS), soonest to 90% first
    OUT/forecast.json      the window, the counts and the disks filling within four weeks (the first rows of DISKS)
    OUT/forecast_history.parquet   the flagged disks' usage at each snapshot of the window (HISTORY), for the report
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

DISKS_FILE = "forecast.parquet"
SUMMARY_FILE = "forecast.json"
HISTORY_FILE = "forecast_history.parquet"

# Times are hours from the latest snapshot of the window; inf: not within what its partitions can grow (they stop
# at their caps, or nothing grows); null: the disk's size is unknown. `_early` / `_late`: the 95% interval.
DISKS: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "log_dir": "string",
    "status": "string",  # STATUS_*
    "as_of_hours": "double",  # the disk's last snapshot, hours before the latest (0 unless a gap at the end)
    "used_bytes": "bigint",
    "total_bytes": "bigint",
    "percent": "double",
    "rate_bytes_per_hour": "double",
    "rate_low": "double",
    "rate_high": "double",
    "hours_to_90": "double",
    "hours_to_90_early": "double",
    "hours_to_90_late": "double",
    "hours_to_full": "double",
    "hours_to_full_early": "double",
    "hours_to_full_late": "double",
    "partitions": "int",  # current replicas on it
    "growing": "int",  # of them, growing (below their caps)
    "top_partitions": "array<string>",  # topic-partition, the most growth over the next week first
    "top_rates": "array<double>",  # their rates, bytes/hour
    # The projection the report draws: hours from the disk's last snapshot, bytes (mid, 95% early and late ends).
    "projection_hours": "array<double>",
    "projection_bytes": "array<double>",
    "projection_early": "array<double>",
    "projection_late": "array<double>",
}
# The flagged disks (at 90% within FLAG_HOURS, at most FLAGGED of them, soonest first): their history.
HISTORY: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "log_dir": "string",
    "hours": "double",  # the snapshot, hours from the latest
    "used_bytes": "bigint",
}
FLAG_HOURS = 168.0
FLAGGED = 40
STATUS_OK = "ok"
STATUS_OFFLINE = "offline"  # offline in the latest snapshot: no forecast
STATUS_STALE = "stale"  # missing from the latest snapshots (its broker did not answer): forecast from its last
STATUS_UNKNOWN_SIZE = "size unknown"  # no total_bytes: rates only, never guessed times


_UNITS = {"m": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")


def hours(text: str) -> float:
    """`30m`, `72h`, `7d`, `2w` -> hours; an argparse type (a bad one is a usage error naming it)."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 72h, 7d or 2w, got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def say_hours(value: float) -> str:
    """A time to come as an operator reads it: `now`, `5.2 h`, `3.4 d`, `never` (beyond what can grow)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    if math.isinf(value):
        return "never"
    if value <= 0:
        return "now"
    return f"{value:.1f} h" if value < 48 else f"{value / 24:.1f} d"


def within(disks: pd.DataFrame, limit_hours: float) -> pd.DataFrame:
    """The disks (online, of known size) that fill within `limit_hours` by the forecast."""
    return disks[disks["hours_to_full"].notna() & (disks["hours_to_full"] <= limit_hours)]


def flagged(disks: pd.DataFrame) -> pd.DataFrame:
    """The disks whose history the report draws: at 90% within FLAG_HOURS, soonest first, FLAGGED at most."""
    soon = disks[(disks["status"] != STATUS_OFFLINE) & (disks["hours_to_90"] <= FLAG_HOURS)]
    return soon.head(FLAGGED)


def read(out: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(disks, history) of the forecast beside an audit's outputs, or None when none was made."""
    import pandas as pd

    if not (out / DISKS_FILE).exists():
        return None
    history = out / HISTORY_FILE
    empty = pd.DataFrame({c: pd.Series(dtype="object") for c in HISTORY})
    return pd.read_parquet(out / DISKS_FILE), pd.read_parquet(history) if history.exists() else empty

