"""Every partition's fit and every disk's residual sums for the window the driver holds (forecast_held.Held):
from the kept state when the history has one that still fits (forecast_append: the appended columns and the changed
rows only), else by a pass over the window in batches of rows, which makes the state for the next append.
forecast_held reads and keeps the history; forecast_driver turns these fits into the disks' forecasts."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from mover.audit import threads
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import model as model
from mover.audit.forecast import state as forecast_state

if TYPE_CHECKING:
    from mover.audit.forecast.held import Held

# Partitions whose copies' residuals are summed into their disks at once: one bincount over the disks x
# snapshots (4,000 x 31 at 20M) per SUM_BATCH rows, not per FIT_BATCH.
SUM_BATCH = 16 * forecast_kept.FIT_BATCH


def fitted(held: Held, t: np.ndarray, retention: tuple[np.ndarray, np.ndarray], partition: np.ndarray,
           disk: np.ndarray, disks: pd.DataFrame) -> tuple[dict[str, np.ndarray], Callable[[], np.ndarray]]:
    """(fits, errors): every partition's rate, se and cap (by history row, one more for none: arrays of their own,
    which the caller may change in place), and what gives every disk's rate error (disk_errors: from the sum of
    its current copies' residuals at each snapshot, forecast.residual_group) and sets held.state when called: the
    append's sums of its changed rows are found then, on the thread that calls it, while the disks' rows are found
    from the fits. The current copies as their partitions' rows and their disks (rows of `disks`). From the kept
    state when the history has one that still fits (forecast_append: the appended columns and the changed rows
    only), else by a pass over the window, which makes the state for the next append."""
    quick = from_state(held, t, retention, partition, disk, disks)
    if quick is None:
        return fitted_whole(held, t, retention, partition, disk, disks)
    # Only the fits found again are written into the kept fits (a carried one is the same fit, moved on: at 20M
    # replicas rewriting every row was 1.2 s of an append and 427 MB written); the rest are moved on if the kept
    # fits are written whole (forecast_columns.write).
    held.kept_found = np.flatnonzero(~quick.carried)
    forecast_kept.keep_found(held.kept, held.kept_found, quick.found, quick.resistant)
    held.kept_hours = -float(t[len(t) - held.appended - 1]) if held.appended else 0.0
    if len(quick.refreshed):  # written as of the newest snapshot with the rows found again (their new sigma, error)
        forecast_kept.move_on(held.kept, quick.refreshed, held.kept_hours, held.appended)
        held.kept_found = np.union1d(held.kept_found, quick.refreshed)
    found = quick.padded  # the row past the partitions' for the copies of none (row -1), as fitted_whole's
    for k, absent in (("rate", 0.0), ("se", math.nan), ("cap", math.inf)):
        found[k][-1] = absent

    def errors() -> np.ndarray:
        totals, seen, held.state = quick.sums()
        return disk_errors(t, totals, seen)

    return found, errors


def from_state(held: Held, t: np.ndarray, retention: tuple[np.ndarray, np.ndarray], partition: np.ndarray,
               disk: np.ndarray, disks: pd.DataFrame) -> forecast_append.Fitted | None:
    """forecast_append.fitted from the kept history's state, None when there is none that fits this history."""
    data = held.stored
    if data is None or held.upgrade or held.renumbered or held.prior is None:
        return None
    state, dropped = held.prior
    found = held.replica_map
    # The map's places by row, for copies that are its own: the same rows in the disks' order (not so where a disk
    # offline in the newest snapshot has its copies of an earlier one, or a copy on a dir not listed is left out).
    by_row = (found.by_row if found is not None and found.by_row is not None and len(found.rows) == len(partition)
              and np.array_equal(found.ordered_rows()[0], partition) else None)
    return forecast_append.fitted(held.sizes, held.kept, t, held.appended, held.snapshots, list(data["snapshots"]),
                                  dropped, state, retention, partition, disk, disks,
                                  found.moved_from if found is not None else None, by_row)


def fitted_whole(held: Held, t: np.ndarray, retention: tuple[np.ndarray, np.ndarray], partition: np.ndarray,
                 disk: np.ndarray, disks: pd.DataFrame) -> tuple[dict[str, np.ndarray], Callable[[], np.ndarray]]:
    """fitted by a pass over the window: every partition fitted in batches (from its kept fit where that still
    holds: forecast_kept.reused), each disk's residual sums by bincounts over its current copies. Everything is
    found a batch of rows at a time: a temporary the size of the whole history (its resistant medians, its whole
    rows' tests) cost 11 s of a 20M forecast, most of it the system's, in memory touched for the first time
    (docs/audit.md)."""
    retention_bytes, retention_ms = retention
    kept = held.kept
    since = float(t[-held.appended - 1]) if held.appended and len(t) > held.appended else 0.0
    n, count = len(t), len(disks)
    totals, counts = np.zeros((n, count)), np.zeros((count, n))  # totals by snapshot: one row per bincount
    # The copies by partition row, so that each batch of rows finds its copies as one slice.
    by_row = np.argsort(partition, kind="stable")
    rows, on = partition[by_row], disk[by_row]
    parts: list[dict[str, np.ndarray]] = []
    stats: list[tuple[np.ndarray, ...]] = []
    pending: list[np.ndarray] = []  # the residuals of the batches not yet summed into their disks

    def sum_residuals(lo: int, hi: int) -> None:
        # Each copy's residuals added to its disk's, a snapshot at a time: one bincount over the copies of rows
        # lo..hi on their disks (a reduceat per batch over the disks its copies are on, 4,000 at 20M, took 20 s of
        # a 20M forecast; a bincount on (disk, snapshot) pairs, masked, 6.5 s). A copy whose partition has a
        # residual at every snapshot counts at each once.
        a, b = np.searchsorted(rows, [lo, hi])
        if a < b:
            r = np.concatenate(pending) if len(pending) > 1 else pending[0]
            ok = np.isfinite(r)
            whole = ok.all(axis=1)
            by_snapshot = np.ascontiguousarray(np.where(ok, r, 0.0).T)
            at, on_disk = rows[a:b] - lo, on[a:b]
            full = whole[at]
            counts[:] += np.bincount(on_disk[full], minlength=count)[:, None]
            part, part_on = at[~full], on_disk[~full]
            seen = np.ascontiguousarray(ok.T) if len(part) else ok.T
            for j in range(n):
                totals[j] += np.bincount(on_disk, weights=by_snapshot[j][at], minlength=count)
                if len(part):
                    counts[:, j] += np.bincount(part_on, weights=seen[j][part], minlength=count)
        pending.clear()

    def batch(bounds: tuple[int, int]) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray], np.ndarray]:
        lo, hi = bounds
        y = held.sizes[lo:hi]
        stats_of = forecast_append.row_stats(y)
        resistant = forecast_append.resistant(t, *stats_of[2:])
        # A kept fit still good for this window (forecast_kept.reused) is carried over whole when the partition has
        # every point: its line moved on to the newest snapshot, its error and sigma as found (model.carry_matrix);
        # the others are fitted from their points.
        carried = (forecast_kept.reused(kept[lo:hi], held.appended, t, y[:, n - held.appended:], resistant)
                   & model.whole_rows(t, y))
        # As the append does (forecast_append.fitted): the carried fits due a refresh by age, before they are carried.
        due = np.flatnonzero(carried & forecast_kept.refresh_due(kept[lo:hi], held.appended))
        if len(due):
            forecast_kept.refresh(kept, lo + due, t, y[due], since)
        found, residuals = fit_batch(t, y, carried, kept[lo:hi], since, retention_bytes[lo:hi], retention_ms[lo:hi])
        forecast_kept.keep_fits(kept, lo, hi, found, ~carried, resistant, held.appended)  # its own rows only
        return stats_of, found, residuals

    # Each SUM_BATCH rows' batches fitted two at a time (threads: each writes only its own rows of the kept fits;
    # numpy's sorts and arithmetic run without the interpreter's lock), then their residuals summed in row order,
    # as one at a time did: the same sums. A cold forecast of 20M replicas x 31 fitted on one core for 58 s.
    bounds = [(lo, min(lo + forecast_kept.FIT_BATCH, len(held.keys)))
              for lo in range(0, len(held.keys), forecast_kept.FIT_BATCH)]
    step = max(1, SUM_BATCH // forecast_kept.FIT_BATCH)
    for g in range(0, len(bounds), step):
        group = bounds[g:g + step]
        for stats_of, found, residuals in threads.each(group, batch):
            stats.append(stats_of)
            parts.append(found)
            pending.append(residuals)
        sum_residuals(group[0][0], group[-1][1])
    # One more row past the partitions' for the copies of none (row -1).
    found = {k: np.concatenate([*(p[k] for p in parts), [absent]])
             for k, absent in (("rate", 0.0), ("se", math.nan), ("cap", math.inf))}
    whole_stats = [np.concatenate([s[i] for s in stats]) if stats else np.zeros(0) for i in range(6)]
    fit_from = np.concatenate([p["fit_from"] for p in parts]) if parts else np.zeros(0)
    held.state = forecast_state.State(*whole_stats, fit_from, totals, np.ascontiguousarray(counts.T),
                                       partition.astype(np.int32, copy=False), disk.astype(np.int32, copy=False),
                                       disks, hours=t)
    errors = disk_errors(t, np.ascontiguousarray(totals.T), counts > 0)
    return found, lambda: errors


def fit_batch(t: np.ndarray, y: np.ndarray, carried: np.ndarray, kept: np.ndarray, since: float,
              retention_bytes: np.ndarray, retention_ms: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """forecast.fit_arrays of a batch of rows, those `carried` from their kept fits (forecast_kept.KEPT's
    columns, the line's value at `since`, the grid's previous newest snapshot, carried on to the newest)."""
    from mover.audit import forecast as fc

    points = np.isfinite(y).any(axis=1)
    if not points.all():
        # Rows of partitions with no point left in the window (kept until the history is compacted: update):
        # no fit, no residual, as a partition the history does not hold.
        some = np.flatnonzero(points)
        found, residuals = fit_batch(t, y[some], carried[some], kept[some], since, retention_bytes[some],
                                  retention_ms[some])
        out = {}
        for name, values in found.items():
            out[name] = np.full(len(y), np.nan) if values.dtype.kind == "f" else np.zeros(len(y), values.dtype)
            out[name][some] = values
        every = np.full(y.shape, np.nan)
        every[some] = residuals
        return out, every
    # The rows not carried refitted with their kept slopes (nan: none) tried first, as the append does
    # (forecast_model._guessed): the same answers.
    if not carried.any():
        return fc.fit_arrays(t, y, retention_bytes, retention_ms, guesses=(kept[:, 0], kept[:, 1]))
    names = (*fc._FIT_COLUMNS, *model.KEPT_FIELDS)
    c = np.flatnonzero(carried)
    slope = kept[c, 2]
    found = model.carry_matrix(t, y[c], retention_bytes[c], retention_ms[c], kept[c, 0], kept[c, 1], slope,
                               kept[c, 3] - slope * since, kept[c, 7], kept[c, 4])
    if len(c) < len(y):
        f = np.flatnonzero(~carried)
        fitted, _ = fc.fit_arrays(t, y[f], retention_bytes[f], retention_ms[f], guesses=(kept[f, 0], kept[f, 1]))
        both = {}
        for name in names:
            both[name] = np.empty(len(y), dtype=fitted[name].dtype)
            both[name][c], both[name][f] = found[name], fitted[name]
        found = both
    found = {name: found[name] for name in names}
    return found, fc.residuals_of(t, y, found)


def disk_errors(t: np.ndarray, totals: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Per disk, forecast_model.disk_rate_se of its residual sums at the snapshots it has any (nan: none, or too
    few: its copies' errors then): the disks seen at every snapshot at once, the others one by one."""
    out = np.full(len(totals), np.nan)
    whole = seen.all(axis=1) if totals.shape[1] else np.zeros(len(totals), dtype=bool)
    if whole.any() and len(t) >= model.MIN_POINTS and np.ptp(t) > 0:
        order = np.argsort(t)
        zeros = np.zeros(int(whole.sum()))
        out[whole] = model.slope_se_rows(t[order], totals[whole][:, order], zeros, zeros)[0]
    for d in np.flatnonzero(~whole & seen.any(axis=1)).tolist():
        ok = seen[d]
        out[d] = model.disk_rate_se(np.array([]), t[ok], totals[d, ok])
    return out
