"""The driver's forecast of an appended snapshot without a pass over the window (forecast_driver's other path:
docs/forecast-performance.md, "An append from the state"): what each append needs of the whole history is kept beside it
(`State`; its files: forecast_state) and brought forward by the columns that change, so that an append reads the new
snapshot, the columns that leave the window or one of its thirds, and the whole rows of only the partitions refitted
or moved.

Kept per partition row: its points missing from the window and its resets (a drop of RESET_DROP between two
points), which say whether it is a whole row (every point, no reset: forecast_model.whole_rows); the sums and
counts of the sizes of the window's first and last thirds, whose means give the resistant slope the drift test
compares (forecast_kept.reused); and the fit_from its residuals were counted from. Kept per disk: the sums of
its current copies' residuals at every snapshot of the grid and how many copies had one (the disk's rate error:
forecast_fits.disk_errors), and the copies they were summed over.

An append then: the row counts moved on by the columns dropped and added (sizes are whole bytes, their sums exact
in float64, so they never drift); a row carried on its kept fit whose counted columns and copies are unchanged
keeps its residuals at the surviving snapshots and adds the new ones; every other row with a copy (refitted, moved,
its fit_from moved) has its old residuals taken off its old disks and its new ones added to its new disks, from its
whole row. The sums are then the ones a pass over the window gives, to rounding (the tests check it).

The copies' sets are compared row by row by their counts and the sums of their disks' random 64-bit marks
(moved_copies), or known from the copies moved in place (moved_in_place). With no kept state, or rows renumbered
by a compaction, the pass over the window (forecast_fits.fitted_whole) is taken, which writes a State for the next
append.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import columns as audit_columns
from mover.audit import threads
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import model as model
from mover.audit.forecast.state import State, count_type

if TYPE_CHECKING:
    from mover.audit.forecast.columns import Grid

MARK_SEED = 36  # disk_marks'
# Past this share of the rows refitted or moved, the pass over the window costs no more than gathering them.
MOST_CHANGED = 0.25


def thirds(n: int) -> int:
    """The columns in each of the window's first and last thirds (the resistant line's)."""
    return n // 3


def row_stats(y: np.ndarray) -> tuple[np.ndarray, ...]:
    """(gaps, resets, first_sum, first_count, last_sum, last_count) of rows `y` (b, n) as the whole window."""
    n = y.shape[1]
    ok = np.isfinite(y)
    gaps = (n - ok.sum(axis=1)).astype(np.int32)
    resets = model.resets(y[:, :-1], y[:, 1:]).sum(axis=1).astype(np.int32) if n > 1 else np.zeros(len(y), np.int32)
    k = thirds(n)
    zero = np.where(ok, y, 0.0)
    first_sum, last_sum = zero[:, :k].sum(axis=1), zero[:, n - k:].sum(axis=1) if k else np.zeros(len(y))
    return (gaps, resets, first_sum, ok[:, :k].sum(axis=1).astype(np.int32), last_sum,
            ok[:, n - k:].sum(axis=1).astype(np.int32) if k else np.zeros(len(y), np.int32))


def resistant(t: np.ndarray, first_sum: np.ndarray, first_count: np.ndarray, last_sum: np.ndarray,
              last_count: np.ndarray) -> np.ndarray:
    """Each row's resistant slope as the drift test takes it: its last third's mean size less its first third's,
    over the time between their mean times (nan for a row missing a point there: it is refitted anyway). Means,
    not the resistant line's medians, so that an append finds them from sums kept and moved on a column at a time
    (a burst in a third moves a mean more: at worst a refit more, never a fit kept that should not be)."""
    k = thirds(len(t))
    if k < 1:
        return np.full(len(first_sum), np.nan)
    span = float(t[len(t) - k:].mean() - t[:k].mean())
    if span <= 0:
        return np.full(len(first_sum), np.nan)
    with np.errstate(invalid="ignore"):
        out = np.subtract(last_sum, first_sum)  # worked out in this one array (6.7M rows: 54 MB each, afresh)
        out /= k
        out /= span
    out[(first_count != k) | (last_count != k)] = np.nan
    return out


def _padded(values: np.ndarray, rows: int, fill: float | int, dtype: Any = None) -> np.ndarray:
    """`values` (of `dtype`: theirs when float or `fill` is an integer, else float) then `fill` up to `rows`, a
    new array the caller may change: one copy where there is no row to add (nearly always), not a fill and a copy
    over it, nor a cast first (each array of every row is 27-54 MB at 6.7M rows, memory touched afresh)."""
    if dtype is None:
        dtype = values.dtype if values.dtype.kind == "f" or isinstance(fill, int) else float
    if len(values) == rows:
        return np.array(values, dtype=dtype)
    out = np.full(rows, fill, dtype=dtype)
    out[:len(values)] = values
    return out


def alive(state: State, dropped: list[np.ndarray], grid: Grid, appended: int, old: int) -> np.ndarray:
    """Whether each row of `grid` has a point left in its window: its points in the `old` snapshots of `state`'s
    grid, less those in the `dropped` columns, plus those in the `appended` ones (Grid.alive without reading every
    column)."""
    points = _padded(old - state.gaps.astype(np.int64), grid.rows, 0)
    for c in dropped:
        points -= np.isfinite(_padded(np.asarray(c, dtype=float), grid.rows, math.nan))
    for j in range(len(grid.columns) - appended, len(grid.columns)):
        points += np.isfinite(grid.column(j))
    return points > 0


@dataclass
class Moved:
    """The row counts of `State` moved on to the new grid, for every row of it."""
    gaps: np.ndarray
    resets: np.ndarray
    first_sum: np.ndarray
    first_count: np.ndarray
    last_sum: np.ndarray
    last_count: np.ndarray

    def whole(self, t: np.ndarray) -> np.ndarray:
        return (self.gaps == 0) & (self.resets == 0) & model.grid_whole(t)


def move_on(state: State, old: list[str], names: list[str], grid: Grid, dropped: list[np.ndarray]) -> Moved:
    """`state` (of the grid `old`) brought to the grid `names` (old[len(dropped):] then the appended ones) held in
    `grid`; `dropped`: the columns that left, oldest first. Each count is changed by the columns that entered or
    left it, never summed over the window again."""
    drop, rows = len(dropped), grid.rows
    at = {name: j for j, name in enumerate(names)}

    def values(name: str) -> np.ndarray:  # a column of either grid, by name, over every row
        if name in at:
            return grid.column(at[name])
        c = dropped[old.index(name)]
        out = np.full(rows, np.nan)
        out[:len(c)] = c[:rows]
        return out

    # Counts changed in place by flags (no int32 copy of each), sums by the finite points only (where=).
    gaps = _padded(state.gaps, rows, len(old), np.int32)
    resets = _padded(state.resets, rows, 0, np.int32)
    for c in dropped:
        gaps -= np.isnan(_padded(np.asarray(c, dtype=float), rows, math.nan))
    kept = len(old) - drop
    for j in range(kept, len(names)):
        gaps += np.isnan(grid.column(j))
    # Transitions that left: between the dropped columns and from the last dropped to the first kept one.
    for jo in range(drop):
        if jo + 1 < len(old):
            resets -= model.resets(values(old[jo]), values(old[jo + 1]))
    for j in range(max(kept, 1), len(names)):
        resets += model.resets(grid.column(j - 1), grid.column(j))
    sums = []
    for which, (s, c) in (("first", (state.first_sum, state.first_count)), ("last", (state.last_sum,
                                                                                     state.last_count))):
        k0, k1 = thirds(len(old)), thirds(len(names))
        before = set(old[:k0] if which == "first" else old[len(old) - k0:])
        after = set(names[:k1] if which == "first" else names[len(names) - k1:])
        total, count = _padded(s, rows, 0.0, float), _padded(c, rows, 0, np.int32)
        for name, sign in [*((n, -1) for n in sorted(before - after)), *((n, 1) for n in sorted(after - before))]:
            v = values(name)
            ok = np.isfinite(v)
            (np.add if sign > 0 else np.subtract)(total, v, out=total, where=ok)
            (np.add if sign > 0 else np.subtract)(count, ok, out=count)
        sums += [total, count]
    return Moved(gaps, resets, *sums)


def disk_marks(count: int) -> np.ndarray:
    """A random 64-bit mark for each of `count` disks, the same at every call (MARK_SEED): moved_copies' hash."""
    return np.random.default_rng(MARK_SEED).integers(0, np.iinfo(np.uint64).max, size=count, dtype=np.uint64,
                                                     endpoint=True)


def mark_sums(rows: np.ndarray, disks: np.ndarray, count: int, marks: np.ndarray) -> np.ndarray:
    """Per row (0 .. count-1), the sum modulo 2^64 of its copies' disks' `marks`, a step of copies at a time
    (audit_columns.scatter: no mark of every copy made at once, 160 MB at 20M, memory touched afresh)."""
    out = np.zeros(count, dtype=np.uint64)
    for lo in range(0, len(rows), audit_columns.STEP_ROWS):
        step = slice(lo, lo + audit_columns.STEP_ROWS)
        audit_columns.scatter(np.add, out, rows[step], marks.take(disks[step]))
    return out


def moved_copies(before: tuple[np.ndarray, np.ndarray], now: tuple[np.ndarray, np.ndarray], count: int,
                 marks: np.ndarray, counts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(whether each row's copies differ between `before` and `now`, whether it has any in either): each side's
    copies as (rows, disks), their counts per row `counts`, each disk's mark `marks` (disk_marks). Two sets of m
    disks that differ have marks' sums that differ but by a chance of at most m / 2^64: the sums' difference is a
    sum of marks, each a multiple of at most m of its disk's, and the marks are random to the last bit (a changed
    row taken as unchanged would keep its old residuals on its old disks: the disks' rate errors, not the
    fits). Until 2026-12-07 the sets were compared by their disks' power sums,
    exact only while a row's copies m met m * (disks + 1)^m < 2^53: a row of four copies among 40,000 disks was
    past it, and the append then made the pass over the window; those sums were one scatter of every copy a power,
    these one in all (docs/forecast-performance.md, "Copies moved in place")."""
    moved, has = counts[0] != counts[1], (counts[0] > 0) | (counts[1] > 0)
    moved |= mark_sums(*before, count, marks) != mark_sums(*now, count, marks)
    return moved, has


def moved_in_place(moved_from: tuple[Any, ...], copy_rows: np.ndarray, copy_disks: np.ndarray,
                   disks: pd.DataFrame) -> np.ndarray | None:
    """The rows of the copies changed (`moved_from`: the map they were kept as, forecast_replica_map.ReplicaMap,
    the places of those moved since or gone, and the rows of those added if any: forecast_replica_adds), when the
    state's copies (`copy_rows` on `copy_disks`, rows of `disks`) are that map's in its disks' order; else None (the
    copies' sets are then compared: moved_copies). Two compares of every copy, where moved_copies scatters every
    copy of both sides into every row (0.16-0.2 s of a 20M append; its power sums before, 0.6-0.8 s:
    docs/forecast-performance.md, "Copies moved in place")."""
    found, at, *added = moved_from
    rows, group = found.ordered_rows()
    names = [[str(c), int(b), str(d)] for c, b, d in zip(found.disks["cluster"], found.disks["broker"],
                                                         found.disks["log_dir"], strict=True)]
    if (len(rows) != len(copy_rows) or len(disks) != len(names) or names != [
            [str(c), int(b), str(d)] for c, b, d in zip(disks["cluster"], disks["broker"], disks["log_dir"],
                                                        strict=True)]
            or not np.array_equal(rows, copy_rows) or not np.array_equal(group, copy_disks)):
        return None
    moved = np.asarray(found.rows)[at]
    return np.concatenate([moved, np.asarray(added[0])]) if added else moved


def union_disks(old: pd.DataFrame, new: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """Numbers in one space for the disks of two runs: (old's, new's, how many)."""
    ids: dict[tuple[Any, ...], int] = {}
    maps = []
    for frame in (old, new):
        maps.append(np.array([ids.setdefault((str(c), int(b), str(d)), len(ids)) for c, b, d in zip(
            frame["cluster"], frame["broker"], frame["log_dir"], strict=True)], dtype=np.int64))
    return maps[0], maps[1], len(ids)


def add_residuals(totals: np.ndarray, counts: np.ndarray, columns: range, residuals: np.ndarray,
                  at: np.ndarray, disks: np.ndarray, sign: float, runs: bool = False) -> None:
    """Adds (sign 1) or takes off (-1) `residuals` (rows, len(columns)) of copies on `disks` (each the row `at` of
    `residuals`) at the grid's `columns`: a bincount per column and chunk of COPY_CHUNK copies (the temporaries of
    every copy at once were memory touched afresh: 160 MB each at 20M). `runs`: the copies come mostly in runs of
    one disk (in disk order), each run then summed at once (np.add.reduceat), not copy by copy: the same sums up to
    rounding (the adds in another order), 0.50 -> 0.37 s for 20M copies."""
    size = totals.shape[1]
    chunks = range(0, len(at), COPY_CHUNK)
    # Each chunk's runs of one disk and its copies per disk: the same at every column, found once.
    runs_of = [_runs(disks[lo:lo + COPY_CHUNK], size) if runs else None for lo in chunks]
    for i, j in enumerate(columns):
        # A column at a time, taken whole first: numpy's take from one contiguous column, not a gather of (row,
        # column) pairs of the matrix (0.55 -> 0.33 s for the new snapshot's residuals of 20M copies).
        column = np.ascontiguousarray(residuals[:, i])
        for lo, found in zip(chunks, runs_of, strict=True):
            on = disks[lo:lo + COPY_CHUNK]
            r = column.take(at[lo:lo + COPY_CHUNK])
            bad = ~np.isfinite(r)
            seen = found[1].copy() if found is not None else np.bincount(on, minlength=size)
            if bad.any():  # a copy with no residual there: counted out, summed as 0
                r[bad] = 0.0
                seen -= np.bincount(on[bad], minlength=size)
            if found is not None:
                summed = np.zeros(size)
                np.add.at(summed, on[found[0]], np.add.reduceat(r, found[0]))
                totals[j] += sign * summed
            else:
                totals[j] += sign * np.bincount(on, weights=r, minlength=size)
            counts[j] += sign * seen


def _runs(on: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(where each run of one disk starts in `on`, the copies of each of `size` disks), None for no copy. A disk's
    runs apart (in another order) are each added: add.at."""
    if not len(on):
        return None
    starts = np.flatnonzero(on[1:] != on[:-1])
    starts += 1
    starts = np.concatenate([[0], starts])
    seen = np.zeros(size)
    np.add.at(seen, on[starts], np.diff(starts, append=len(on)))
    return starts, seen


def add_changes(totals: np.ndarray, counts: np.ndarray, before: np.ndarray, after: np.ndarray, at: np.ndarray,
                disks: np.ndarray) -> None:
    """add_residuals of `before` (rows, the grid's first columns) taken off and `after` (rows, every column) added
    for the same copies (each the row `at` on `disks`): each row's change found first (rows, a few hundred thousand)
    and summed onto its copies' disks once per column, its count only where a residual came or went: half the
    passes over the copies of taking off then adding. The same sums up to rounding (a change summed, not its two
    sides)."""
    size, surv = totals.shape[1], before.shape[1]
    on, at = disks.astype(np.intp, copy=False), at.astype(np.intp, copy=False)  # once, not at every bincount
    for j in range(after.shape[1]):
        found = np.isfinite(after[:, j])
        change = np.where(found, after[:, j], 0.0)
        came = found.astype(np.int8)
        if j < surv:
            was = np.isfinite(before[:, j])
            change -= np.where(was, before[:, j], 0.0)
            came -= was
        totals[j] += np.bincount(on, weights=change.take(at), minlength=size)
        moved = came.take(at)
        some = np.flatnonzero(moved)
        if len(some):
            counts[j] += np.bincount(on[some], weights=moved[some], minlength=size)


@dataclass
class Fitted:
    """forecast_fits.fitted's answer, and the State to keep for the next append."""
    found: dict[str, np.ndarray]  # by row: the fit's columns (forecast._FIT_COLUMNS, KEPT_FIELDS)
    carried: np.ndarray  # by row: carried on its kept fit
    resistant: np.ndarray  # the drift test's slope now, of the rows not carried (in order)
    # Every disk's residual sums, (D, n), whether any copy had one there, (D, n), and the State: found when called
    # (on another thread, while the disks' rows are found from `found`: it reads only the fits' lines of `found`,
    # never rate, se or cap, which the caller may change in place).
    sums: Callable[[], tuple[np.ndarray, np.ndarray, State]]
    # found's rate, se and cap, with one row more past the rows (the caller's, for copies of none: forecast_fits)
    padded: dict[str, np.ndarray]
    # The carried rows whose sigma and error were found again (forecast_kept.refresh), in order: as kept, their
    # lines not yet moved on to the newest snapshot.
    refreshed: np.ndarray


# The fit's columns the forecast and the kept fits use (not its kind: a string object per row).
FOUND = ("rate", "slope", "se", "intercept", "fit_from", "cap", *model.KEPT_FIELDS)
PADDED = ("rate", "se", "cap")  # Fitted.padded
BLOCK = 1 << 17  # changed rows whose whole rows are held at once (32 MB at 31 snapshots)
COPY_CHUNK = 1 << 20  # copies whose residuals are summed at once (add_residuals)


def fitted(grid: Grid, kept: np.ndarray, t: np.ndarray, appended: int, names: list[str], old: list[str],
           dropped: list[np.ndarray], state: State, retention: tuple[np.ndarray, np.ndarray],
           partition: np.ndarray, disk: np.ndarray, disks: pd.DataFrame,
           moved_from: tuple[Any, ...] | None = None, by_row: np.ndarray | None = None) -> Fitted | None:
    """Every row's fit and every disk's residual sums for the grid `names` (held in `grid`, its rows' kept fits
    `kept`) from `state` (of the grid `old`, whose first len(dropped) columns `dropped` left), the current copies
    being `partition` (rows) on `disk` (rows of `disks`): the module's way, or None where it does not apply (the
    pass over the window then). `moved_from`: the newest snapshot's copies as a kept map's with the copies at some
    places moved (forecast_replica_moves) or added and gone (forecast_replica_adds), which says which rows' copies
    changed when the state's are that map's.
    `by_row`: the places by row of those copies (the kept map's: forecast_partition_sizes.copies_by_row), which say
    which rows have copies when they are the state's."""
    n, rows, n0 = len(t), grid.rows, len(state.gaps)
    surv = n - appended
    if surv < 1 or surv != len(old) - len(dropped) or old[len(dropped):] != names[:surv] or n0 > rows:
        return None
    same_disks = state.disks.equals(disks)
    if same_disks:  # the same disks in the same order: no copy's number to map (20M at 20M)
        old_map = new_map = np.arange(len(disks))
        size, odisk, ndisk = len(disks), state.copy_disks, disk
    else:
        old_map, new_map, size = union_disks(state.disks, disks)
        odisk, ndisk = old_map[state.copy_disks], new_map[disk]
    orow, nrow = state.copy_rows, partition
    same_copies = np.array_equal(orow, nrow) and np.array_equal(odisk, ndisk)  # the same copies, in the same order
    counts = None
    in_place = (moved_in_place(moved_from, orow, state.copy_disks, state.disks)
                if moved_from is not None and not same_copies else None)
    # Kept as flags, not counts: every array of every row held past here is at the append's peak of memory,
    # touched afresh (docs/forecast-performance.md, "The copies kept").
    if same_copies or in_place is not None:  # which rows have copies now is all that is asked of them
        # A row with a first place has copies (none: the copies' count), read in row order where the map has
        # them, not marked at 20M random places (0.1-0.17 s of a 20M append's main thread).
        has_now = (np.less(by_row[0], len(nrow)) if by_row is not None and by_row.shape == (3, rows)
                   else audit_columns.marked(nrow, rows))
    else:  # the copies' sets compared by their counts and marks: moved_copies
        per_row = audit_columns.group_sums(nrow, rows)  # each row's copies now
        counts = audit_columns.group_sums(orow, rows), per_row  # each row's copies before and now
        most = max(int(counts[0].max()) if rows else 0, int(per_row.max()) if rows else 0)
        # Held to moved_copies past the line below: in the least integer type (13 MB, not 108, at 6.7M rows).
        counts = counts[0].astype(count_type(most)), per_row.astype(count_type(most))
        has_now = per_row > 0
        del per_row
    moved = move_on(state, old, names, grid, dropped)
    whole, alive = moved.whole(t), moved.gaps < n
    retention_bytes, retention_ms = retention

    def fit(at: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:  # the fits alone (fit_arrays' residuals
        # too are found below, with the rows' old ones)
        # Their kept slopes as guesses: the same answers, sooner where they are the slopes again.
        return at, model.fit_matrix(t, grid.gather(at), retention_bytes[at], retention_ms[at],
                                    guesses=(kept[at, 0], kept[at, 1]))

    def batches(of: np.ndarray) -> list[np.ndarray]:
        return [of[lo:lo + forecast_kept.FIT_BATCH] for lo in range(0, len(of), forecast_kept.FIT_BATCH)]

    # The rows whose kept fit is past its age (or who have none) are fitted again whatever their new points say
    # (forecast_kept.reused): started now on the other core, beside the tests and the carried lines below, which
    # the main thread alone ran while the other core waited for them (1/32 of the rows at every append).
    due = np.flatnonzero(~(np.isfinite(kept[:, 0]) & (kept[:, 5] + appended < forecast_kept.REFIT_AFTER)) & alive)
    due_fits = threads.Shared(batches(due), fit)
    slope_now = resistant(t, moved.first_sum, moved.first_count, moved.last_sum, moved.last_count)
    newest = (grid.column(surv)[:, None] if appended == 1 else  # one column: a view of it, not a copy
              np.column_stack([grid.column(j) for j in range(surv, n)]) if appended else np.empty((rows, 0)))
    carried = forecast_kept.reused(kept, appended, t, newest, slope_now) & whole
    # Only the rows found again keep their slope now (forecast_kept.keep_found): not an array of every row held.
    slope_now = slope_now[~carried]
    refit = np.flatnonzero(~carried & alive)
    if counts is None:  # the same copies, or some moved in place (their counts are found only where not, above)
        copies_moved, has_copies = np.zeros(rows, dtype=bool), has_now
        if in_place is not None:  # the same rows' copies, those of these rows on other disks, added or gone
            copies_moved[in_place] = True
            has_copies[in_place] = True  # a row whose copies are all gone has its old residuals taken off
    else:
        copies_moved, has_copies = moved_copies((orow, odisk), (nrow, ndisk), rows, disk_marks(size), counts)
        del counts
    if int(((~carried & alive) | copies_moved).sum()) > MOST_CHANGED * max(rows, 1):
        due_fits.cancel()  # the pass over the window fits them: not left fitting beside it
        return None
    since = float(t[surv - 1])  # the old grid's newest, in the new grid's hours
    # The carried fits due a refresh by age have their sigma and error found again before they are carried (their
    # lines, so their residuals and their disks' sums, stay): on both threads, a batch of whole rows at a time.
    # Only now that this way is taken: the kept fits are changed in place, and the pass over the window judges
    # them as read.
    refreshed = np.flatnonzero(carried & forecast_kept.refresh_due(kept, appended))
    threads.each(batches(refreshed), lambda at: forecast_kept.refresh(kept, at, t, grid.gather(at), since))

    # Nearly every row is carried: all of them carried on whole columns (no row gathered), the others' answers
    # then put over theirs (refitted, or nothing for a row with no point left).
    slope = kept[:, 2]
    # Only the fields used (not size_now), with a row more for the caller's copies of none (Fitted.padded).
    at_zero = np.multiply(slope, since)  # the lines' values at t = 0, made in one array (not two)
    np.subtract(kept[:, 3], at_zero, out=at_zero)
    carry = model.carry_matrix(t, grid.column(n - 1)[:, None], retention_bytes, retention_ms, kept[:, 0],
                               kept[:, 1], slope, at_zero, kept[:, 7], kept[:, 4], kinds=False,
                               fields=[f for f in model.SETTLED if f in FOUND], spare=1)
    padded = {name: carry[name] for name in PADDED}
    # The kept slopes and sigma come back as the kept fits' own columns, not copied (160 MB of memory touched
    # afresh at 6.7M rows, at the append's peak): the refits' answers (and the nan of a row with no point left)
    # are put over them in place, on exactly the rows forecast_kept.keep_found then writes from them (those not
    # carried), so the kept fits end as they would; nothing reads those rows' old slopes or sigma in between (the
    # old lines' slope and value are copies: old_slope, old_at).
    found = {name: carry[name][:rows] for name in FOUND}
    # The rows whose residuals are taken off and added again, whole (below), found now: the refits change only
    # rows not carried, which are among them anyway. Their old lines and fit_from gathered now, not every row's.
    survivors = t[:surv]
    # Read only here (no copy of every row where none is added: 54 MB touched afresh at 6.7M rows).
    old_from = (state.fit_from if len(state.fit_from) == rows and state.fit_from.dtype == np.float64
                else _padded(state.fit_from, rows, math.nan, float))
    # A row's residuals are counted from the same column when its old fit_from, moved on, falls in the same place
    # among the survivors as its fit_from now. Nearly every row's is the very same hours (a carried fit moved on):
    # those are in the same place, and only the others are searched for (two searches of every row were 0.3-0.4 s
    # of a 20M append's fits).
    with np.errstate(invalid="ignore"):
        moved_from = old_from + since
        same_columns = moved_from == found["fit_from"]  # nan on either side: not equal, searched below
        other = np.flatnonzero(~same_columns & np.isfinite(old_from))
        same_columns[other] = (np.searchsorted(survivors, moved_from[other])
                               == np.searchsorted(survivors, found["fit_from"][other]))
        del moved_from
    unchanged = carried & ~copies_moved & same_columns
    unchanged[n0:] = False
    changed = np.flatnonzero(~unchanged & has_copies)
    old_slope, old_at, old_from = kept[changed, 2], kept[changed, 3], old_from[changed]
    gone = ~carried & ~alive
    if gone.any():
        for name in FOUND:
            found[name][gone] = np.nan

    # The others refitted (a new point off its line, a drifted slope) on both threads, once the due ones' have.
    others = np.ones(rows, dtype=bool)
    others[due] = False
    rest = refit[others[refit]]
    del others
    for at, fits in (*due_fits.done(), *threads.each(batches(rest), fit)):
        for name in FOUND:
            found[name][at] = fits[name]

    def sums() -> tuple[np.ndarray, np.ndarray, State]:
        # Each disk's residual sums: the surviving snapshots' as kept (on the union of both runs' disks), the new
        # snapshots' added for the rows that keep theirs, every other row's taken off and added again.
        totals, counts = np.zeros((n, size)), np.zeros((n, size))
        totals[:surv, old_map], counts[:surv, old_map] = state.totals[len(dropped):], state.counts[len(dropped):]
        if appended:
            # Per row first (0 for the changed rows: theirs are added whole below), then onto every copy's disk: no
            # index of the unchanged rows' copies made (20M at 20M).
            r = model.residual_rows(t[surv:], newest, found["slope"], found["intercept"], found["fit_from"])
            r[~unchanged] = np.nan
            add_residuals(totals, counts, range(surv, n), r, nrow, ndisk, 1.0, runs=True)  # in disk order
            del r  # not held through the changed rows' gathers below (the fits' peak of memory)
        # Each changed row's place, and whether it is one: every copy's row looked up in a byte a row (7 MB at 20M,
        # against the places' 27 MB: the look-up of 20M copies in the disks' order, rows at random, took 0.14
        # against 0.37 s), the places only for the few copies found.
        place = np.full(rows, -1, dtype=np.int32 if rows < 1 << 31 else np.int64)
        place[changed] = np.arange(len(changed))
        is_changed = np.zeros(rows, dtype=bool)
        is_changed[changed] = True

        def theirs(copy_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # the changed rows' copies, by place
            sel = np.flatnonzero(is_changed[copy_rows])
            at = place[copy_rows[sel]]
            order = np.argsort(at, kind="stable")
            return sel[order], at[order]

        theirs_old, key_old = theirs(orow)
        # The same copies (nearly always): the old ones are the new ones, not found again by a pass over 20M copies.
        theirs_new, key_new = (theirs_old, key_old) if same_copies else theirs(nrow)
        for lo in range(0, len(changed), BLOCK):
            at = changed[lo:lo + BLOCK]
            y = grid.gather(at)
            mine = slice(lo, lo + len(at))
            before = model.residual_rows(survivors - since, y[:, :surv], old_slope[mine], old_at[mine],
                                         old_from[mine])
            after = model.residual_rows(t, y, found["slope"][at], found["intercept"][at], found["fit_from"][at])
            a, b = np.searchsorted(key_old, [lo, lo + len(at)])
            if same_copies:  # the same copies before and after: each adds its change, once
                add_changes(totals, counts, before, after, key_old[a:b] - lo, odisk[theirs_old[a:b]])
                continue
            add_residuals(totals, counts, range(surv), before, key_old[a:b] - lo, odisk[theirs_old[a:b]], -1.0)
            a, b = np.searchsorted(key_new, [lo, lo + len(at)])
            add_residuals(totals, counts, range(n), after, key_new[a:b] - lo, ndisk[theirs_new[a:b]], 1.0)
        totals, counts = totals[:, new_map], counts[:, new_map]
        # The same copies on the same disks: the kept copies' file stands for them (not written again).
        kept_copies = same_copies and same_disks
        now = State(moved.gaps, moved.resets, moved.first_sum, moved.first_count, moved.last_sum, moved.last_count,
                    found["fit_from"], totals, counts,
                    state.copy_rows if kept_copies else partition.astype(np.int32, copy=False),
                    state.copy_disks if kept_copies else disk.astype(np.int32, copy=False), disks,
                    state.copies_file if kept_copies else None, t)
        return np.ascontiguousarray(totals.T), counts.T > 0.5, now

    return Fitted(found, carried, slope_now, sums, padded, refreshed)
