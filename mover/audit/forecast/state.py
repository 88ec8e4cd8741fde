"""The append's kept state (forecast_append's State: what an append needs of the whole history, per partition row
and per disk, and the copies its disks' sums were made over) and its files beside the kept history: the disks' sums
and names in `state-<token>.npz`, the rows' counts in two mapped .npy files, the copies in one (or the replica map's
file, when they are its copies in the disks' order). forecast_columns names them in its manifest.

Crash safety is forecast_columns' (its invariants): each file here is written fresh under a new name and fsynced by
it before a manifest names it; load reads only what a manifest names, and answers None for a file that is not
whole or not of the history it is asked for (the next forecast then makes the pass over the window, and a new state).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit.forecast import npy as forecast_npy
from mover.audit.forecast import replica_map as forecast_replica_map

STATE_KEYS = ("gaps", "resets", "first_sum", "first_count", "last_sum", "last_count", "fit_from", "totals",
              "counts", "copy_rows", "copy_disks", "disk_cluster", "disk_broker", "disk_log_dir")


@dataclass
class State:
    """What an append needs of the whole history (the module's docstring), for the grid it was written with."""
    gaps: np.ndarray  # (N,) int32: points missing in the window
    resets: np.ndarray  # (N,) int32: resets between consecutive points of the window
    first_sum: np.ndarray  # (N,) the sizes of the window's first third, summed (nan: none)
    first_count: np.ndarray  # (N,) int32
    last_sum: np.ndarray
    last_count: np.ndarray
    fit_from: np.ndarray  # (N,) hours (0: the grid's newest) the row's residuals are counted from; nan: none
    totals: np.ndarray  # (n, D) each disk's residual sum at each snapshot
    counts: np.ndarray  # (n, D) how many of its copies had a residual there
    copy_rows: np.ndarray  # (C,) int32: each current copy's row
    copy_disks: np.ndarray  # (C,) int32: its disk, a row of `disks`
    disks: pd.DataFrame  # cluster, broker, log_dir
    # The kept file the copies were read from (forecast_columns: "copies"), while they are the same copies: the
    # next write names it again instead of writing them (160 MB at 20M replicas); None: to write.
    copies_file: str | None = None
    # The grid's hours (0: its newest), which every fit_from is one of (or nan): save_rows then writes each row's
    # fit_from as the column it is at (fit_columns), not as float hours; None: as hours.
    hours: np.ndarray | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        """What the state file holds: the disks' sums and names (the rows' counts and the copies are files of
        their own: save_rows, save_copies)."""
        return {"totals": self.totals, "counts": self.counts,
                "disk_cluster": self.disks["cluster"].to_numpy(dtype=str),
                "disk_broker": self.disks["broker"].to_numpy(np.int64),
                "disk_log_dir": self.disks["log_dir"].to_numpy(dtype=str)}


# The rows' counts, as two files mapped by load: read from a zip they were 270 MB of memory touched afresh at 20M
# replicas (docs/audit.md), where a mapped file's pages are the page cache's, already there from the write.
ROW_INTS = ("gaps", "resets", "first_count", "last_count")
ROW_FLOATS = ("first_sum", "last_sum", "fit_from")


def save(path: Path, state: State) -> None:
    with open(path, "wb") as f:
        np.savez(f, **state.arrays())


# The integer types the rows' counts are written in, the smallest that holds them: counts of a window's points, so
# uint8 for a window of up to 255 snapshots (27 MB at 6.7M partitions, not int32's 107 MB written at every append
# and read at the next: docs/forecast-performance.md, "Medians at one place"). A state written as int32 is read as
# it is.
COUNT_TYPES = (np.uint8, np.uint16, np.int32)


def count_type(most: int) -> Any:
    """The first of COUNT_TYPES that holds 0 .. `most`."""
    return next(t for t in COUNT_TYPES if most <= np.iinfo(t).max)


def fit_columns(fit_from: np.ndarray, hours: np.ndarray | None) -> np.ndarray | None:
    """Each row's fit_from as the column of the grid `hours` it is at, plus one (0: nan); None when one is not
    exactly a time of the grid (or there is no grid): it is then written as hours."""
    if hours is None or not len(hours):
        return None
    finite = np.isfinite(fit_from)
    at = np.minimum(np.searchsorted(hours, fit_from), len(hours) - 1)
    if not bool(((hours[at] == fit_from) | ~finite).all()):
        return None
    at += 1
    at[~finite] = 0
    return at


def save_rows(ints: Path, floats: Path, state: State) -> None:
    """The rows' counts (and their fit_from as its column: fit_columns, when it is one) as an array of the
    smallest of COUNT_TYPES that holds them, (4 or 5, N), and the rest as a (2 or 3, N) float64 array, written a
    row at a time (no stacked copy). fit_from as a column is a byte a row, not 8 (54 MB at 6.7M partitions written
    at every append and read at the next, on this VM at about 150 MB/s: docs/audit.md)."""
    column = fit_columns(state.fit_from, state.hours)
    int_rows = [getattr(state, name) for name in ROW_INTS] + ([column] if column is not None else [])
    float_names = ROW_FLOATS if column is None else ROW_FLOATS[:-1]
    counts = [c for c in int_rows if len(c)]
    most = max((int(c.max()) for c in counts), default=0)
    fewest = min((int(c.min()) for c in counts), default=0)
    small = count_type(most) if fewest >= 0 else np.int32
    # By write(2), not mapped: a new file's pages faulted in through a mapping read its holes first (forecast_npy).
    forecast_npy.save_rows(ints, int_rows, small, len(state.gaps))
    forecast_npy.save_rows(floats, [getattr(state, name) for name in float_names], np.float64, len(state.gaps))


def save_copies(path: Path, state: State) -> None:
    """The copies' rows and disks as one (2, C) int32 array, mapped by load."""
    forecast_npy.save_rows(path, [state.copy_rows, state.copy_disks], np.int32)  # no stacked copy of 20M each


def load(path: Path, rows: int, snapshots: int, copies: Path | None = None,
         row_files: tuple[Path, Path] | None = None, hours: np.ndarray | None = None) -> State | None:
    """The state in `path` (its copies in `copies`, its rows' counts in `row_files`, mapped; None: in `path`
    itself, as an older driver wrote them) if it is whole and of a history of `rows` rows and `snapshots`
    snapshots; else None (the next forecast makes the pass over the window, and a new state). `hours`: that
    history's grid (0: its newest), for a fit_from written as its column (save_rows); without it such a state is
    not read."""
    in_rows = set(ROW_INTS + ROW_FLOATS) if row_files is not None else set()
    try:
        with np.load(path, allow_pickle=False) as f:
            a = {k: f[k] for k in STATE_KEYS
                 if (copies is None or not k.startswith("copy_")) and k not in in_rows}
        if row_files is not None:
            counted, floated = (np.load(file, mmap_mode="r") for file in row_files)
            # fit_from as hours (3 float rows) or as its column (a 5th row of counts: save_rows).
            as_column = counted.shape == (len(ROW_INTS) + 1, rows) and floated.shape == (len(ROW_FLOATS) - 1, rows)
            if (counted.dtype not in COUNT_TYPES or floated.dtype != np.float64
                    or not as_column and (counted.shape != (len(ROW_INTS), rows)
                                          or floated.shape != (len(ROW_FLOATS), rows))):
                return None
            a.update(zip(ROW_INTS, counted, strict=False))
            a.update(zip(ROW_FLOATS, floated, strict=False))
            if as_column:
                at = counted[len(ROW_INTS)]
                if hours is None or len(hours) != snapshots or (rows and int(at.max()) > snapshots):
                    return None
                # Column 0 is nan: the table's first value, so one look-up (no where() over every row).
                a["fit_from"] = np.append(np.nan, hours)[at]
        if copies is not None:
            pair = np.load(copies, mmap_mode="r")
            if pair.ndim == 2 and len(pair) in (3, 5):  # the replica map's file (forecast_columns' "copies")
                pair = forecast_replica_map.copies_of(pair)
            if pair is None or pair.ndim != 2 or len(pair) != 2 or pair.dtype != np.int32:
                return None
            a["copy_rows"], a["copy_disks"] = pair[0], pair[1]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # gone, cut short, not one
        return None
    d = len(a["disk_cluster"])
    if (any(len(a[k]) != rows for k in STATE_KEYS[:7]) or a["totals"].shape != (snapshots, d)
            or a["counts"].shape != (snapshots, d) or len(a["copy_rows"]) != len(a["copy_disks"])
            or len(a["disk_broker"]) != d or len(a["disk_log_dir"]) != d):
        return None
    if not (forecast_npy.indices_within(a["copy_rows"], rows) and forecast_npy.indices_within(a["copy_disks"], d)):
        return None
    disks = pd.DataFrame({"cluster": a["disk_cluster"].astype(object), "broker": a["disk_broker"],
                          "log_dir": a["disk_log_dir"].astype(object)})
    return State(a["gaps"], a["resets"], a["first_sum"], a["first_count"], a["last_sum"], a["last_count"],
                 a["fit_from"], a["totals"], a["counts"], a["copy_rows"], a["copy_disks"], disks,
                 copies.name if copies is not None else None, hours)
