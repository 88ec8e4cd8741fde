"""The forecast's model, as pure functions of numpy arrays: one partition's growth from its history, one disk's
time to a level from the partitions on it. mover/audit/forecast applies them per group on Spark; the tests and
bench/forecast_accuracy.py call them directly. What it models and why: docs/audit.md, "forecast".

Time is in hours relative to the forecast's reference time (the latest snapshot: 0, earlier ones negative), sizes in
bytes, rates in bytes per hour.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from mover.audit import threads

# A fit needs this many points; with fewer, the rate is the slope between the first and the last (no interval).
MIN_POINTS = 4
# Theil-Sen takes the median of every pair's slope: n^2/2 pairs. Longer histories are thinned to this many points,
# evenly in time (30 days of snapshots every 5 minutes are 8,640 points; 160 keep its shape).
MAX_POINTS = 160
# A drop of more than this share of the size between two points is a reset (the topic deleted and made again, the
# log truncated): the history before it says nothing of the partition now.
RESET_DROP = 0.5
# The last part of the history that decides whether growth has stopped (a plateau under retention.ms or
# retention.bytes whose settings the snapshot does not give): its slope below PLATEAU_SHARE of the whole window's.
RECENT_SHARE = 1 / 3
PLATEAU_SHARE = 0.2
Z95 = 1.96
# Kafka deletes whole segments: a log under retention.bytes holds up to one segment (segment.bytes, 1 GiB by
# default) more than the limit. Without the segment size in the snapshot, the cap is the limit itself.
HOURS_MS = 3_600_000.0

KIND_TREND = "trend"  # grows (or shrinks) at its fitted rate
KIND_PLATEAU = "plateau"  # at its retention limit, or stopped growing: no growth projected
KIND_SHORT = "short"  # too few points for a fit: the slope between its first and last point, no interval


@dataclass(frozen=True)
class PartitionFit:
    rate: float  # bytes/hour, projected forward (0 once at its cap)
    slope: float  # bytes/hour, the fitted line's (its residuals are about this line)
    se: float  # standard error of the rate (nan when not known)
    intercept: float  # fitted size at hour 0
    fit_from: float  # first hour of the points the fit used
    size_now: float  # last observed size
    cap: float  # the size it stops growing at (inf: none known)
    kind: str
    points: int


def theil_sen(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept): the median of the slopes of every pair of points, and the median of y - slope * t.

    Robust to the outliers a fleet's history has (a burst, a snapshot taken mid-segment-deletion): up to 29% of the
    points can be anything without moving the slope far, where least squares follows every one."""
    n = len(t)
    if n < 2:
        return 0.0, float(y[0]) if n else 0.0
    if n > MAX_POINTS:
        keep = np.unique(np.linspace(0, n - 1, MAX_POINTS).round().astype(int))
        t, y = t[keep], y[keep]
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    if not ok.any():
        return 0.0, float(np.median(y))
    slope = float(np.median((y[j] - y[i])[ok] / dt[ok]))
    return slope, float(np.median(y - slope * t))


def slope_se(t: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> float:
    """Standard error of a slope from the residuals around the line: a robust sigma (1.4826 x their median absolute
    deviation) over the spread of the times, widened for the residuals' lag-1 autocorrelation (a daily cycle makes
    neighbours alike: n points then carry the information of n (1 - rho) / (1 + rho) independent ones)."""
    n = len(t)
    if n < MIN_POINTS:
        return math.nan
    r = y - (intercept + slope * t)
    sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    if sigma == 0:
        sigma = float(np.std(r))
    spread = float(np.sum((t - t.mean()) ** 2))
    if spread == 0:
        return math.nan
    rho = 0.0
    centred = r - r.mean()
    denom = float(np.sum(centred ** 2))
    if denom > 0:
        rho = min(0.95, max(0.0, float(np.sum(centred[1:] * centred[:-1]) / denom)))
    return sigma / math.sqrt(spread) * math.sqrt((1 + rho) / (1 - rho))


def last_run(y: np.ndarray) -> int:
    """Index of the first point after the last reset (a drop of more than RESET_DROP of the size)."""
    prev = y[:-1]
    drops = np.nonzero((prev > 0) & (y[1:] < prev * (1 - RESET_DROP)))[0]
    return int(drops[-1] + 1) if len(drops) else 0


def retention_cap(rate: float, retention_bytes: float | None, retention_ms: float | None) -> float:
    """The size a partition stops growing at: retention.bytes when set (>= 0), and under retention.ms a log written
    at `rate` holds rate x retention.ms once its oldest segment is that old. inf when neither limits it."""
    cap = math.inf
    if retention_bytes is not None and not math.isnan(retention_bytes) and retention_bytes >= 0:
        cap = float(retention_bytes)
    if retention_ms is not None and not math.isnan(retention_ms) and retention_ms >= 0 and rate > 0:
        cap = min(cap, rate * retention_ms / HOURS_MS)
    return cap


def fit_partition(t: np.ndarray, y: np.ndarray, retention_bytes: float | None = None,
                  retention_ms: float | None = None) -> PartitionFit:
    """One partition's growth from its sizes `y` at hours `t` (sorted; a gap is a missing point, never a zero)."""
    order = np.argsort(t, kind="stable")
    t, y = np.asarray(t, dtype=float)[order], np.asarray(y, dtype=float)[order]
    start = last_run(y)
    t, y = t[start:], y[start:]
    size_now = float(y[-1])
    n = len(t)
    if n < MIN_POINTS:
        rate = float((y[-1] - y[0]) / (t[-1] - t[0])) if n >= 2 and t[-1] > t[0] else 0.0
        cap = retention_cap(rate, retention_bytes, retention_ms)
        kind = KIND_PLATEAU if size_now >= cap else KIND_SHORT
        return PartitionFit(0.0 if kind == KIND_PLATEAU else rate, rate, math.nan, size_now - rate * t[-1],
                            float(t[0]), size_now, cap, kind, n)
    slope, intercept = theil_sen(t, y)
    fit_from = float(t[0])
    recent = t >= t[-1] - (t[-1] - t[0]) * RECENT_SHARE
    kind = KIND_TREND
    if recent.sum() >= MIN_POINTS and slope > 0:
        r_slope, r_intercept = theil_sen(t[recent], y[recent])
        if r_slope < PLATEAU_SHARE * slope:
            # Growth stopped: what retention does once the log is as old (or as big) as it keeps.
            kind, fit_from = KIND_PLATEAU, float(t[recent][0])
            slope, intercept = r_slope, r_intercept
    used = t >= fit_from
    se = slope_se(t[used], y[used], slope, intercept)
    kind, cap, rate = _settle(kind, slope, size_now, retention_cap(slope, retention_bytes, retention_ms))
    return PartitionFit(rate, slope, se, intercept, fit_from, size_now, cap, kind, n)


def _settle(kind: str, slope: float, size_now: float, cap: float) -> tuple[str, float, float]:
    """(kind, cap, rate) of a fitted line: a trend at or past its cap is a plateau; a plateau grows no further than
    its cap (a shrinking one holds where it is)."""
    if kind == KIND_TREND and size_now >= cap:
        kind = KIND_PLATEAU
    rate = slope
    if kind == KIND_PLATEAU:
        cap = min(cap, size_now) if slope <= 0 else cap
        rate = max(0.0, slope) if size_now < cap else 0.0
    return kind, cap, rate


def growth(rates: np.ndarray, rooms: np.ndarray, hours: float) -> float:
    """Bytes the partitions add in `hours`: each at its rate until it has used its room (cap - size); a shrinking
    one no further than to nothing (rooms of shrinking ones are their sizes, negated)."""
    return float(np.sum(np.clip(rates * hours, np.minimum(rooms, 0), np.maximum(rooms, 0))))


def room(rate: float, cap: float, size: float) -> float:
    """How far a partition's growth goes: up to its cap while growing, down to nothing while shrinking."""
    return max(0.0, cap - size) if rate >= 0 else -size


def hours_to(need: float, rates: np.ndarray, rooms: np.ndarray) -> float:
    """Hours until the partitions have added `need` bytes (inf: never; 0: already). Each partition's growth is
    linear until it has used its room: the sum is piecewise linear, solved exactly between those breakpoints."""
    if need <= 0:
        return 0.0
    moving = rates != 0
    r, span = rates[moving], rooms[moving]
    with np.errstate(over="ignore"):  # a rate too small to matter ends past any horizon: inf
        ends = np.where(r != 0, span / np.where(r == 0, 1, r), 0.0)  # hours each partition keeps changing
    stops = np.unique(ends[np.isfinite(ends) & (ends > 0)])
    prev = 0.0
    for stop in [*stops.tolist(), math.inf]:
        rate = float(r[ends > prev].sum())
        if rate > 0:
            at = prev + (need - growth(r, span, prev)) / rate
            if at <= stop:
                return at
        prev = stop
    return math.inf


@dataclass(frozen=True)
class DiskForecast:
    rate: float  # bytes/hour the disk grows now (partitions below their caps)
    rate_low: float  # the 95% interval of that rate
    rate_high: float
    hours_to_90: float  # from the disk's last snapshot; inf: not within what the partitions can grow
    hours_to_90_early: float  # at rate_high (the early end)
    hours_to_90_late: float  # at rate_low
    hours_to_full: float
    hours_to_full_early: float
    hours_to_full_late: float


def disk_rate_se(partition_ses: np.ndarray, residual_t: np.ndarray, residual_sum: np.ndarray,
                 ) -> float:
    """Standard error of a disk's rate: from the sum of its partitions' residuals at each snapshot (which keeps
    what they share, a daily cycle every topic follows) when there are enough snapshots, else the partitions'
    errors added as independent."""
    if len(residual_t) >= MIN_POINTS:
        order = np.argsort(residual_t)
        t, r = residual_t[order], residual_sum[order]
        se = slope_se(t, r, 0.0, 0.0)
        if not math.isnan(se):
            return se
    known = partition_ses[np.isfinite(partition_ses)]
    return float(math.sqrt(np.sum(known ** 2))) if len(known) else math.nan


def forecast_disk(used: float, total: float | None, rates: np.ndarray, rooms: np.ndarray, se: float,
                  level: float = 0.9) -> DiskForecast:
    """Time to `level` and to full of a disk holding `used` bytes of `total`, from the rates and rooms of the
    partitions on it. The interval scales every growing partition's rate by the disk's rate bounds."""
    rates = np.asarray(rates, dtype=float)
    rooms = np.asarray(rooms, dtype=float)
    active = (rates > 0) & (rooms > 0) | (rates < 0)
    rate = float(rates[active].sum())
    spread = Z95 * se if not math.isnan(se) else 0.0
    low, high = rate - spread, rate + spread
    if total is None or math.isnan(total) or total <= 0:
        nan = math.nan
        return DiskForecast(rate, low, high, nan, nan, nan, nan, nan, nan)

    def three(target: float) -> tuple[float, float, float]:
        need = target - used
        if need <= 0:
            return 0.0, 0.0, 0.0
        if rate <= 0:  # nothing grows: only the early end of the interval reaches the target, at its rate
            return math.inf, (need / high if high > 0 else math.inf), math.inf
        late = hours_to(need, rates * (low / rate), rooms) if low > 0 else math.inf
        return hours_to(need, rates, rooms), hours_to(need, rates * (high / rate), rooms), late

    t90, t90_early, t90_late = three(level * total)
    full, full_early, full_late = three(float(total))
    return DiskForecast(rate, low, high, t90, t90_early, t90_late, full, full_early, full_late)


def projection(used: float, rates: np.ndarray, rooms: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """The disk's projected usage at each of `hours` (for the report's plot)."""
    rates, rooms = np.asarray(rates, dtype=float), np.asarray(rooms, dtype=float)
    hours = np.asarray(hours, dtype=float)
    # growth() at every hour at once: a row per hour, summed along it as growth sums its one row.
    return used + np.clip(rates[None, :] * hours[:, None], np.minimum(rooms, 0), np.maximum(rooms, 0)).sum(axis=1)


# --- Many partitions at once (the forecast's compact history: every partition on one grid of snapshots) ---

def row_medians(a: np.ndarray) -> np.ndarray:
    """np.median(a, axis=1) of a 2-D array, the same numbers (nan for a row with a nan), found by sorting each
    row (_middles): numpy's median partitions at two places (the middle and the last, to see a nan), which takes
    its scalar selection, where a sort, like a partition at one place, takes the vectorised one (4,096 rows of 31
    points: 1.8 -> 0.5 ms; docs/forecast-performance.md, "Medians at one place")."""
    a = np.array(a, dtype=float)  # sorted in place: a copy, as np.median makes
    if a.shape[1] == 0:
        return np.full(len(a), math.nan)
    bad = np.isnan(a).any(axis=1)
    mid = _middles(a)
    mid[bad] = math.nan
    return mid


def _middles(a: np.ndarray) -> np.ndarray:
    """Each row's middle value of `a` (2-D, no nan, sorted in place), or the mean of its two middle ones. Sorted,
    not partitioned: numpy's SIMD sort (x86-simd-sort) of rows of many equal values, as the pairs' slopes of a
    steadily growing partition are (60 distinct among 465), took half the time of its selection (213,000 rows of
    465 pairs: 0.83 against 1.60 s), and the same on random values and on rows of 31
    (docs/forecast-performance.md, "Sorted, not selected")."""
    k = a.shape[1] // 2
    a.sort(axis=1)
    if a.shape[1] % 2:
        return a[:, k].copy()
    return (a[:, k - 1] + a[:, k]) / 2


# Rows whose pairs' slopes are made and sorted at once in _median_slopes: 0.9 MB of slopes at 31 points, so
# that the sort finds them in the cache their making left them in (256 rows: 0.60 -> 0.49 s for 213,000 rows
# of 31 points, against 4,096 at once; 128 and 512 were slower).
SLOPE_ROWS = 256


def _median_slopes(t: np.ndarray, y: np.ndarray, guess: np.ndarray | None = None) -> np.ndarray:
    """theil_sen's slope for each row of `y` (b, n), all on the times `t` (n,), strictly increasing: SLOPE_ROWS
    rows at a time. `guess`: a slope per row that may be its answer (_median_slopes_of)."""
    pairs = _pairs(t)
    if len(y) <= SLOPE_ROWS:
        return _median_slopes_of(pairs, y, guess)
    out = np.empty(len(y))
    for lo in range(0, len(y), SLOPE_ROWS):
        out[lo:lo + SLOPE_ROWS] = _median_slopes_of(pairs, y[lo:lo + SLOPE_ROWS],
                                                    None if guess is None else guess[lo:lo + SLOPE_ROWS])
    return out


def _median_slopes_of(pairs: tuple[np.ndarray, np.ndarray, np.ndarray], y: np.ndarray,
                      guess: np.ndarray | None = None) -> np.ndarray:
    """theil_sen's slope for each row of `y` (b, n), all on the same times, strictly increasing, whose `pairs`
    (_pairs) are given. A row whose `guess` (nan: none) is its pairs' middle value is answered by counting, not
    sorting (_guessed)."""
    # Every pair of each row made in place by two takes of the pairs' ends along the rows: each row's pairs
    # contiguous, ready for its sort. Made a lag at a time on the rows turned (n, b), they had to be turned back
    # by a copy of every pair before the sort, which with the lags' 30 small operations took as long as the
    # sort itself: 204,800 rows of 31 points, 1.2-1.9 s against 1.0 s (docs/forecast-performance.md, "The pairs
    # made where they are sorted"). The same pairs, each the same subtraction and division: the same slopes.
    first, last, apart = pairs
    slopes = np.take(y, last, axis=1)
    slopes -= np.take(y, first, axis=1)
    slopes /= apart
    if guess is None or not np.isfinite(guess).any():  # nothing to try (a first fit): not two counts for none
        return _middles(slopes)
    out, missed = _guessed(slopes, guess)
    if len(missed) == len(out):
        return _middles(slopes)
    if len(missed):
        out[missed] = _middles(slopes[missed])
    return out


def _pairs(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, last, apart): the columns of every pair i < j of the times `t` and the time between them, in the
    order of the upper triangle (np.triu_indices)."""
    first, last = np.triu_indices(len(t), 1)
    return first, last, t[last] - t[first]


def _guessed(by_row: np.ndarray, guess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out, missed): each row's middle value of `by_row` (b, m), as np.median finds it, where `guess` (b,) is
    it (out holds the guess there), and the rows where it is not (or is nan). A value is the middle exactly when
    fewer than half the values are below it and more than half are not above it: two counts, where a sort moves
    every value (a kept fit's slope refitted by age is the same value again for most partitions that grow steadily
    or not at all: 56% of them on the bench's fleet; docs/forecast-performance.md, "The refits by age started
    early, their slopes guessed")."""
    m = by_row.shape[1]
    below = np.count_nonzero(by_row < guess[:, None], axis=1)
    upto = np.count_nonzero(by_row <= guess[:, None], axis=1)
    hit = (below <= (m - 1) // 2) & (upto > m // 2)  # both middles (one when m is odd) are the guess
    return np.where(hit, guess, math.nan), np.flatnonzero(~hit)


def _theil_sen_rows(t: np.ndarray, y: np.ndarray, given: np.ndarray | None = None,
                    guess: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """theil_sen for each row; a row whose slope is `given` (not nan) keeps it: only its intercept is found. `guess`:
    a slope per row that may be its answer (found, not taken: _guessed)."""
    slope = np.array(given, dtype=float) if given is not None else np.full(len(y), math.nan)
    todo = np.isnan(slope)
    if todo.any():
        g = None if guess is None else np.asarray(guess, dtype=float)[todo]
        if len(t) > MAX_POINTS:
            keep = np.unique(np.linspace(0, len(t) - 1, MAX_POINTS).round().astype(int))
            slope[todo] = _median_slopes(t[keep], y[todo][:, keep], g)
        else:
            slope[todo] = _median_slopes(t, y[todo], g)
    return slope, row_medians(y - slope[:, None] * t)


def slope_se_rows(t: np.ndarray, y: np.ndarray, slope: np.ndarray, intercept: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """slope_se for each row (n >= MIN_POINTS, times not all equal), and the residuals' sigma it used."""
    r = y - (intercept[:, None] + slope[:, None] * t)
    sigma = 1.4826 * row_medians(np.abs(r - row_medians(r)[:, None]))
    flat = np.flatnonzero(sigma == 0)  # the standard deviation only where the median's is 0 (rare), not every row's
    if len(flat):
        sigma[flat] = np.std(r[flat], axis=1)
    spread = float(np.sum((t - t.mean()) ** 2))
    centred = r - r.mean(axis=1)[:, None]
    denom = np.sum(centred ** 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(denom > 0, np.sum(centred[:, 1:] * centred[:, :-1], axis=1) / np.where(denom > 0, denom, 1),
                       0.0)
    rho = np.clip(rho, 0.0, 0.95)
    return sigma / math.sqrt(spread) * np.sqrt((1 + rho) / (1 - rho)), sigma


FIT_FIELDS = ("rate", "slope", "se", "intercept", "fit_from", "size_now", "cap", "kind", "points")


def fit_rows(t: np.ndarray, y: np.ndarray, retention_bytes: np.ndarray, retention_ms: np.ndarray,
             ) -> list[PartitionFit]:
    """fit_partition for many partitions on the same times `t` (n,): `y` (b, n), NaN where a partition has no
    point (fit_matrix, one PartitionFit per row)."""
    found = fit_matrix(t, y, retention_bytes, retention_ms)
    columns = [found[f].tolist() for f in FIT_FIELDS]
    return [PartitionFit(*values) for values in zip(*columns, strict=True)]


# fit_matrix's outputs beside FIT_FIELDS, what a kept fit needs (forecast_held keeps them with the history): the
# Theil-Sen slopes of the whole run and of its recent third (the costly part of a fit: every pair's slope), and the
# robust sigma of the residuals around the line used (nan: not fitted as a whole row, nothing to keep).
KEPT_FIELDS = ("whole_slope", "recent_slope", "sigma")


def fit_matrix(t: np.ndarray, y: np.ndarray, retention_bytes: np.ndarray, retention_ms: np.ndarray,
               whole_slope: np.ndarray | None = None, recent_slope: np.ndarray | None = None,
               guesses: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """fit_partition for many partitions on the same times `t` (n,): `y` (b, n), NaN where a partition has no
    point; PartitionFit's fields as arrays (kind: object), and KEPT_FIELDS. The rows with every point and no reset
    are fitted together (numpy over the batch: the pairs' slopes and their medians at once, then caps and kinds);
    the others one by one. The same numbers as fit_partition, row by row; except that a row whose Theil-Sen slopes
    are given (`whole_slope`, `recent_slope`: not nan, kept from an earlier fit) takes them instead of finding
    them again: everything else of its fit (intercepts, kind, error, cap) is found from its points as usual.
    `guesses`: (whole, recent) slopes per row that may be its Theil-Sen slopes (an earlier fit's): the same
    answers, found sooner where they are (_guessed)."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    retention_bytes = np.asarray(retention_bytes, dtype=float)
    retention_ms = np.asarray(retention_ms, dtype=float)
    b, n = y.shape
    out = {f: np.full(b, math.nan) for f in (*FIT_FIELDS, *KEPT_FIELDS)}
    out["kind"], out["points"] = np.full(b, KIND_SHORT, dtype=object), np.zeros(b, dtype="int32")

    def setting(values: np.ndarray, k: int) -> float | None:
        v = values[k]
        return None if math.isnan(v) else float(v)

    whole = whole_rows(t, y)
    rows = np.nonzero(whole)[0]
    if len(rows):
        yy = y[rows]
        slope, intercept = _theil_sen_rows(t, yy, None if whole_slope is None else whole_slope[rows],
                                           None if guesses is None else guesses[0][rows])
        out["whole_slope"][rows] = slope
        recent = t >= t[-1] - (t[-1] - t[0]) * RECENT_SHARE
        plateau = np.zeros(len(rows), dtype=bool)
        if recent.sum() >= MIN_POINTS:
            r_slope, r_intercept = _theil_sen_rows(t[recent], yy[:, recent],
                                                   None if recent_slope is None else recent_slope[rows],
                                                   None if guesses is None else guesses[1][rows])
            out["recent_slope"][rows] = r_slope
            plateau = _plateau(slope, r_slope, True)
            slope = np.where(plateau, r_slope, slope)
            intercept = np.where(plateau, r_intercept, intercept)
        se, sigma = _errors(t, yy, slope, intercept, plateau, recent)
        out["sigma"][rows] = sigma
        _settled_rows(out, rows, t, yy[:, -1], slope, intercept, se, plateau, retention_bytes[rows],
                      retention_ms[rows])
    for row in np.nonzero(~whole)[0].tolist():
        seen = np.isfinite(y[row])
        f = fit_partition(t[seen], y[row, seen], setting(retention_bytes, row), setting(retention_ms, row))
        for name in FIT_FIELDS:
            out[name][row] = getattr(f, name)
    return out


SETTLED = ("rate", "slope", "se", "intercept", "fit_from", "size_now", "cap")  # the fields _settled_rows writes
SETTLE_ROWS = 1 << 20  # carry_matrix settles this many rows or more on two threads
# Rows settled at once there: each step's dozen temporaries (1 MB each) freed and taken again by the next, in the
# processor's cache, where two halves of 6.7M rows made each of them 27 MB of memory touched afresh.
SETTLE_STEP = 1 << 17


def refreshed_rows(t: np.ndarray, y: np.ndarray, whole_slope: np.ndarray, recent_slope: np.ndarray,
                   slope: np.ndarray, intercept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(se, sigma) of rows (whole_rows, each) carried on their kept lines (`slope`, its value `intercept` at t = 0),
    found again from their points now as fit_matrix finds them around its line: a plateau by its kept slopes
    (carry_matrix's test) from the window's recent third, any other row from every point. Its line stays: only how
    far its points are from it, and so its slope's error, is new (forecast_kept.REFRESH_AFTER)."""
    t = np.asarray(t, dtype=float)
    recent = t >= t[-1] - (t[-1] - t[0]) * RECENT_SHARE
    return _errors(t, y, slope, intercept, _plateau(whole_slope, recent_slope, recent.sum() >= MIN_POINTS), recent)


def _plateau(whole_slope: np.ndarray, recent_slope: np.ndarray, told: bool) -> np.ndarray:
    """Which fits are plateaus by their Theil-Sen slopes (fit_matrix's test: the recent third's slope well under
    the whole run's, a growing one), where there are enough recent points to tell (`told`)."""
    if not told:
        return np.zeros(len(whole_slope), dtype=bool)
    return (whole_slope > 0) & (recent_slope < PLATEAU_SHARE * whole_slope)


def _errors(t: np.ndarray, y: np.ndarray, slope: np.ndarray, intercept: np.ndarray, plateau: np.ndarray,
            recent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(se, sigma) of rows around their lines (slope_se_rows): a plateau's from the `recent` points only."""
    se, sigma = np.empty(len(y)), np.empty(len(y))
    for rows, on in ((~plateau, slice(None)), (plateau, recent)):
        if rows.any():
            se[rows], sigma[rows] = slope_se_rows(t[on], y[rows][:, on], slope[rows], intercept[rows])
    return se, sigma


def _settled_rows(out: dict[str, np.ndarray], rows: np.ndarray | slice, t: np.ndarray, size_now: np.ndarray,
                  slope: np.ndarray, intercept: np.ndarray, se: np.ndarray, plateau: np.ndarray,
                  given_bytes: np.ndarray, given_ms: np.ndarray, fields: Collection[str] = SETTLED) -> None:
    """Writes `rows` of fit_matrix's `out` from their lines on the grid `t` (every point, no reset): retention_cap
    and _settle, every row at once (a trend at or past its cap is a plateau), the rate, kind and fit_from."""
    recent = t >= t[-1] - (t[-1] - t[0]) * RECENT_SHARE
    first_recent = float(t[recent][0]) if recent.any() else float(t[0])
    cap = np.where(given_bytes >= 0, given_bytes, math.inf)
    with np.errstate(invalid="ignore"):
        by_time = (given_ms >= 0) & (slope > 0)
        cap = np.where(by_time, np.minimum(cap, slope * given_ms / HOURS_MS), cap)
    settled = plateau | (size_now >= cap)
    cap = np.where(settled & (slope <= 0), np.minimum(cap, size_now), cap)
    rate = np.where(settled, np.where(size_now < cap, np.maximum(0.0, slope), 0.0), slope)
    for name, values in zip(SETTLED, (rate, slope, se, intercept, np.where(plateau, first_recent, float(t[0])),
                                       size_now, cap), strict=True):
        if name not in fields:
            continue
        if name in out:
            out[name][rows] = values
        else:  # every row (carry_matrix): the arrays made here taken, the ones given copied (the caller's)
            out[name] = values if name in ("rate", "fit_from", "cap") else np.array(values, dtype=float)
    if "kind" in out:
        out["kind"][rows] = np.where(settled, KIND_PLATEAU, KIND_TREND)
        out["points"][rows] = len(t)


def whole_rows(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The rows fit_matrix fits together: every point and no reset, on a grid of MIN_POINTS distinct times or more
    (the others it fits one by one)."""
    if grid_whole(t):
        return np.isfinite(y).all(axis=1) & ~resets(y[:, :-1], y[:, 1:]).any(axis=1)
    return np.zeros(len(y), dtype=bool)


def grid_whole(t: np.ndarray) -> bool:
    """Whether the grid `t` lets any row be whole: MIN_POINTS times or more, each after the one before."""
    return len(t) >= MIN_POINTS and bool(np.all(np.diff(t) > 0))


def resets(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Whether each point `cur` is a reset after `prev`: a drop of more than RESET_DROP of the size."""
    with np.errstate(invalid="ignore"):
        return (prev > 0) & (cur < prev * (1 - RESET_DROP))


def residual_rows(t: np.ndarray, y: np.ndarray, slope: np.ndarray, intercept: np.ndarray, fit_from: np.ndarray,
                  ) -> np.ndarray:
    """Rows' residuals about their lines (`slope`, `intercept` at t = 0) at the times `t` (nan before their
    fit_from or where they had no point)."""
    with np.errstate(invalid="ignore"):
        residuals = y - intercept[:, None] - slope[:, None] * t
        residuals[t[None, :] < fit_from[:, None]] = np.nan
    return residuals


def carry_matrix(t: np.ndarray, y: np.ndarray, retention_bytes: np.ndarray, retention_ms: np.ndarray,
                 whole_slope: np.ndarray, recent_slope: np.ndarray, slope: np.ndarray, intercept: np.ndarray,
                 se: np.ndarray, sigma: np.ndarray, kinds: bool = True, fields: Collection[str] = SETTLED,
                 spare: int = 0) -> dict[str, np.ndarray]:
    """fit_matrix's answer for rows (whole_rows, each) whose fit an earlier one carries over (forecast_driver's
    kept fits): its line (`slope`, its value `intercept` at t = 0), its error and sigma as they were found; only
    what the newest point and the grid decide is found again: size_now, the cap, the rate and the kind (a trend
    that reached its cap settles), fit_from. The plateau is the one its kept slopes gave (fit_matrix's test).
    Without `kinds`, no kind nor points: a string object per row was a third of its time at 6.7M rows. Only the
    settled `fields` asked for are found (SETTLED's); with `spare`, their arrays have that many rows more past the
    given ones, left for the caller to fill (an array of every row copied to add one was memory touched afresh)."""
    t = np.asarray(t, dtype=float)
    b = len(y)
    # Not KEPT_FIELDS': they are the kept ones, given (three arrays of every row made and dropped at 6.7M rows).
    # Nor the fields _settled_rows writes for every row: it hands over its own arrays (seven arrays of every row
    # filled with nan, then overwritten: 1 s of a 20M append, most of it memory touched afresh).
    out: dict[str, np.ndarray] = {}
    if kinds:
        out["kind"], out["points"] = np.full(b, KIND_SHORT, dtype=object), np.zeros(b, dtype="int32")
    recent = t >= t[-1] - (t[-1] - t[0]) * RECENT_SHARE
    told = recent.sum() >= MIN_POINTS  # enough recent points to tell a plateau by its kept slopes
    size_now = y[:, -1]

    def settle(rows: slice) -> None:
        plateau = _plateau(whole_slope[rows], recent_slope[rows], told)
        _settled_rows(out, rows, t, size_now[rows], slope[rows], intercept[rows], se[rows], plateau,
                      retention_bytes[rows], retention_ms[rows], fields)

    if b < 2 * SETTLE_ROWS and not spare:
        settle(slice(None))
    else:  # the rows a step at a time on two threads (threads), each writing its own rows of arrays made here
        for name in fields:
            out[name] = np.empty(b + spare)
        threads.each((slice(lo, min(b, lo + SETTLE_STEP)) for lo in range(0, b, SETTLE_STEP)), settle)
    out["whole_slope"], out["recent_slope"], out["sigma"] = whole_slope, recent_slope, sigma
    return out
