"""A partition's kept fit (docs/audit.md, "The compact history"): what is kept of it beside the history (KEPT),
when it is taken as it is instead of fitting the partition again (reused), and how the kept fits are written from
a batch's fits (keep_fits). The pass over the window (forecast_fits) and the append from the state (forecast_append)
both follow these rules."""

from __future__ import annotations

import numpy as np

from mover.audit.forecast import model

FIT_BATCH = 4096  # partitions fitted at once: their pairs' slopes are FIT_BATCH x n(n-1)/2 doubles (15 MB at 31)
# Kept fits (docs/audit.md, "The compact history"): a partition's Theil-Sen slopes are found again (every pair's
# slope: most of a fit's cost) only when it has none kept (new, a gap or a reset in its run, a history written
# without them), when they are REFIT_AFTER snapshots old, when a new point is off its kept line by more than BAND
# sigmas of its residuals (plus a byte: sizes are whole bytes), or when the window's slope has drifted: its
# resistant slope (the means of its first and last thirds: O(n), where Theil-Sen is O(n^2)) moved by more than
# DRIFT of itself plus DRIFT_SIGMAS of its residuals' sigma over the window since the slopes were found (a window
# sliding over a daily cycle moves the slope without any point leaving the band). The drift is measured from the
# resistant slope of when the slopes were found, so a kept slope cannot creep past its bound however old it is.
# What age does change is how far the points now are from the kept line: every REFRESH_AFTER snapshots a carried
# fit has its residuals' sigma and its slope's error found again from its points in the window, around the same
# line (refresh_due; model.refreshed_rows: O(n), and its residuals, so its disks' sums, unchanged), so that its
# band and its interval follow the window (the interval narrows as a growing window holds more points); its
# slopes are found again only at REFIT_AFTER, a backstop. Until 2026-12-07 every fit was found again whole at 32
# snapshots: 1/32 of the partitions at every append, the largest part of an append (1.3 s of a 20M append's wall:
# docs/forecast-performance.md, "Refreshed, not refitted, by age"). The first fit's ages are staggered by blocks of
# STAGGER_ROWS rows ((row // STAGGER_ROWS) % REFIT_AFTER) so that the fits due by age are spread over the appends,
# in runs of rows: their whole rows are read from a share of each column's pages (by row % K, every page of every
# column: 1.6 GB mapped at 20M). On a synth fleet (2 h snapshots, a 2-day window: a daily cycle, bursts, noise),
# 15 appends: a quarter of the fits kept, disk rates within 1.5% of a cold forecast's (times to 90% within 3.2%);
# with a whole sigma, half kept but 6.7% (17%): tests/audit/test_forecast_history.py. There the age never decided
# a refit (the band and the drift refit first: the same forecast at 8, 16, 32 and 1,000 over 40 appends).
REFIT_AFTER = 256
REFRESH_AFTER = 32
STAGGER_ROWS = 4096
BAND = 3.0
DRIFT = 0.01
DRIFT_SIGMAS = 0.25
REUSED_ROWS = 1 << 18  # rows reused() judges at once
KEPT = ("whole_slope", "recent_slope", "line_slope", "line_at", "sigma", "age", "resistant", "line_se")


def reused(kept: np.ndarray, appended: int, t: np.ndarray, newest: np.ndarray, resistant: np.ndarray) -> np.ndarray:
    """Per partition (rows of `kept`, `newest`: their sizes at the `appended` snapshots, `resistant`), whether
    its kept Theil-Sen slopes are taken as they are (REFIT_AFTER, BAND, DRIFT): it has them, they are younger than
    REFIT_AFTER snapshots once the `appended` ones are counted, every appended point is within the band around its
    kept line (the line's value at the previous newest snapshot, t[-appended - 1], carried on), and the resistant
    slope (forecast_append.resistant) has not drifted from the one it had then. REUSED_ROWS rows at a time: the
    dozen temporaries of all 6.7M rows at 20M replicas were memory touched afresh (docs/forecast-performance.md,
    "Fewer fresh pages"); a step's are taken again by the next."""
    span = float(t[-1] - t[0]) if len(t) > 1 else 1.0
    out = np.empty(len(kept), dtype=bool)
    for lo in range(0, len(kept), REUSED_ROWS):
        k, hi = kept[lo:lo + REUSED_ROWS], lo + REUSED_ROWS
        with np.errstate(invalid="ignore"):
            reused = np.isfinite(k[:, 0]) & (k[:, 5] + appended < REFIT_AFTER)
            reused &= np.abs(resistant[lo:hi] - k[:, 6]) <= DRIFT * np.abs(k[:, 6]) + DRIFT_SIGMAS * k[:, 4] / span
            if appended and len(t) > appended:
                new_t = t[-appended:]
                line = k[:, 3, None] + k[:, 2, None] * (new_t[None, :] - t[-appended - 1])
                off = np.abs(newest[lo:hi, -appended:] - line) > BAND * k[:, 4, None] + 1.0
                reused &= ~(off | np.isnan(line)).any(axis=1)
        out[lo:hi] = reused
    return out


def refresh_due(kept: np.ndarray, appended: int) -> np.ndarray:
    """Per row of `kept`, whether its fit, carried over the `appended` snapshots, has its sigma and error found
    again (REFRESH_AFTER): its age passes a multiple of REFRESH_AFTER, short of REFIT_AFTER (where reused finds it
    whole instead)."""
    age = kept[:, 5]
    with np.errstate(invalid="ignore"):
        due = np.isfinite(kept[:, 0]) & (age + appended < REFIT_AFTER)
    # The ages as integers (whole snapshots, below REFIT_AFTER where due): numpy's floor division of doubles was
    # 0.13 s of a 20M append's main thread (perf), of integers a third of that.
    whole = np.where(due, age, 0.0).astype(np.int32)
    due &= (whole + appended) // REFRESH_AFTER > whole // REFRESH_AFTER
    return due


def refresh(kept: np.ndarray, rows: np.ndarray, t: np.ndarray, y: np.ndarray, since: float) -> None:
    """The kept fits of `rows` (their whole rows `y` on the grid `t`) with their sigma and error found again from
    their points around their kept lines (model.refreshed_rows; the line's value at the grid's previous newest
    snapshot, `since` hours): written in place, before they are carried."""
    k = kept[rows]
    se, sigma = model.refreshed_rows(t, y, k[:, 0], k[:, 1], k[:, 2], k[:, 3] - k[:, 2] * since)
    kept[rows, 4], kept[rows, 7] = sigma, se


def keep_fits(kept: np.ndarray, lo: int, hi: int, found: dict[str, np.ndarray], again: np.ndarray,
              resistant: np.ndarray, appended: int) -> None:
    """Rows lo..hi of the kept fits from `found` (their rows): found again (age 0, or staggered on a first fit:
    with its resistant slope now), or carried (their age counts the appended snapshots; the resistant slope stays
    the one of when they were found)."""
    age = np.where(again, _age_found(kept[lo:hi, 5], np.arange(lo, hi)), kept[lo:hi, 5] + appended)
    _put(kept, slice(lo, hi), found, slice(None), age, np.where(again, resistant, kept[lo:hi, 6]))


def keep_found(kept: np.ndarray, rows: np.ndarray, found: dict[str, np.ndarray], resistant: np.ndarray) -> None:
    """The rows `rows` (sorted) of the kept fits found again (keep_fits' rule for them: `found` is over every row,
    `resistant` the rows' own), the others left as they were read: carrying a fit changes nothing of it but its line's
    value at the newest snapshot and its age, which move_on finds when it is written whole (forecast_columns keeps
    the kept fits as a file and patches of the rows found again since)."""
    if len(rows):
        _put(kept, rows, found, rows, _age_found(kept[rows, 5], rows), resistant)


def _age_found(age: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The age of fits just found at `rows` (their kept ages `age`): 0, or staggered by block on a first fit."""
    return np.where(np.isnan(age), (rows // STAGGER_ROWS) % REFIT_AFTER, 0).astype(float)


def _put(kept: np.ndarray, at: np.ndarray | slice, found: dict[str, np.ndarray], pick: np.ndarray | slice,
         age: np.ndarray, drift: np.ndarray) -> None:
    """Writes the kept fits' rows `at` in KEPT's order from `found`'s rows `pick`, with `age` (nan where no fit was
    found) and the resistant slope `drift`."""
    age[~np.isfinite(found["whole_slope"][pick])] = np.nan
    # A column at a time (the kept fits are stored by column): no (rows, 8) temporary made and transposed.
    for j, values in enumerate((found["whole_slope"][pick], found["recent_slope"][pick], found["slope"][pick],
                                found["intercept"][pick], found["sigma"][pick], age, drift, found["se"][pick])):
        kept[at, j] = values


def move_on(kept: np.ndarray, rows: np.ndarray | slice, hours: float, appended: int) -> None:
    """Carries the kept fits of `rows` on by `hours` and `appended` snapshots: their lines' value at the newest
    snapshot and their ages, as keep_fits carries a fit (the same arithmetic: the line at the newest less its slope
    times the older snapshot's hours, which are -`hours`)."""
    if hours:
        kept[rows, 3] = kept[rows, 3] - kept[rows, 2] * -hours
    if appended:
        kept[rows, 5] = kept[rows, 5] + appended
