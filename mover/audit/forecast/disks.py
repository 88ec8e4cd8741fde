"""A disk's forecast from the partitions on it: disk_row (one disk, numpy over its copies; Spark's forecast_group
calls it per disk) and disk_rows, the same for all the disks of a fleet at once in whole-array numpy, for the
forecast on the driver (forecast_driver.compute: 1.4 ms a disk one at a time was a fifth of an appending run at
4,000 disks). The same model, the same numbers up to rounding (the tests compare). The rows are forecast's
_DISK_SCHEMA columns after the disk's keys.

A disk's growth after h hours is G(h) = sum of r_i x min(h, end_i) over its copies, end_i the hour copy i has used
its room (forecast_model.room / its rate; inf: none). With the copies sorted by end, G at each end is a running sum
(A_k + end_k x (R - C_k): the grown copies' rooms, and the others' rates still running), so the first end where G
reaches a level gives forecast_model.hours_to's answer in its segment; a rate scaled by c reaches it at 1/c of that
time (G_c(h) = G(c h)), which gives the interval's ends and the early and late projections from the same sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import threads
from mover.audit.forecast import model as model

LEVEL = 0.9
TOP = 3  # partitions named per disk
PROJECTION_POINTS = 25
WEEK_H = 168.0


class _Growth:
    """G(h) of every disk: its copies (with a rate) sorted by (disk, end), with the running sums."""

    def __init__(self, total_rate: np.ndarray, unbounded: np.ndarray, disk: np.ndarray, rates: np.ndarray,
                 rooms: np.ndarray, ends: np.ndarray) -> None:
        """Per disk the rate of its moving copies (`total_rate`) and of those with no end (`unbounded`: the rate
        left once every copy with a room has used it, 0 exactly when none is unbounded); and the copies with an end
        (disk, rate, room, end), in the disks' order. Only these are sorted: most copies of a fleet without
        retention have none."""
        self.total_rate, self.unbounded = total_rate, unbounded
        order = np.lexsort((ends, disk))
        self.disk, self.rate, self.end = disk[order], rates[order], ends[order]
        # Running sums within each disk (inclusive): the rooms used up (A: a copy's growth once its room is used is
        # its room, r x end) and the rates of those copies (C); each disk's own (a running sum over the whole fleet
        # less its start would lose a small disk's bytes in the fleet's, and a room no growth reaches would make
        # every later disk's inf).
        sums = pd.DataFrame({"a": rooms[order], "c": self.rate}).groupby(self.disk, sort=False).cumsum()
        self.a, self.c = sums["a"].to_numpy(), sums["c"].to_numpy()
        with np.errstate(over="ignore", invalid="ignore"):
            self.g = self.a + self.end * (self.total_rate[self.disk] - self.c)

    def hours_to(self, need: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """forecast_model.hours_to for each disk where `wanted` (need > 0), at its own rates; else nan."""
        out = np.full(len(need), np.nan)
        hit = np.flatnonzero((self.g >= need[self.disk]) & wanted[self.disk])
        first_disk, first = np.unique(self.disk[hit], return_index=True)
        at = np.full(len(need), -1)
        at[first_disk] = hit[first]
        # Per disk, the last breakpoint before the crossing (or the last finite one when it never reaches the level).
        last_finite = np.full(len(need), -1)
        if len(self.disk):
            ends_of = np.flatnonzero(np.diff(self.disk, append=-1))  # each disk's last sorted copy
            last_finite[self.disk[ends_of]] = ends_of
        prev = np.where(at >= 0, at - 1, last_finite)
        if not len(self.disk):  # no copy with an end: each disk's growth is one line from 0
            prev_ok, e0, g0, rate = np.zeros(len(need), dtype=bool), 0.0, 0.0, self.total_rate
        else:
            p = np.maximum(prev, 0)
            prev_ok = (prev >= 0) & (self.disk[p] == np.arange(len(need)))
            e0 = np.where(prev_ok, self.end[p], 0.0)
            g0 = np.where(prev_ok, self.g[p], 0.0)
            rate = self.total_rate - np.where(prev_ok, self.c[p], 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            found = e0 + (need - g0) / rate
            never = e0 + (need - g0) / self.unbounded
        found = np.where(at >= 0, found, np.where(self.unbounded > 0, never, math.inf))
        out[wanted] = found[wanted]
        return out

    def at(self, hours: np.ndarray) -> np.ndarray:
        """G(h) of each disk (rows) at each of its hours (columns, finite, >= 0)."""
        out = hours * self.total_rate[:, None]  # a disk with no copy that ends: its copies' rates all along
        ending = np.unique(self.disk)
        if len(ending):
            # Only the disks with a copy that ends are merged with their copies (a fleet with no retention reached
            # has few: the merge of every disk's 25 hours was 0.3 s of 40,000 disks' projections).
            out[ending] = self._at(ending, hours[ending])
        return out

    def _at(self, ending: np.ndarray, hours: np.ndarray) -> np.ndarray:
        """at() of the disks `ending` (sorted: every disk with a copy that ends), their hours `hours`."""
        disks, points = hours.shape
        q_disk = np.repeat(ending, points)
        q_hour = hours.ravel()
        # Copies and queries merged in (disk, hour) order, a copy before a query at its own end: the copies before a
        # query in its disk are the ones whose room is used up by then.
        kind = np.concatenate([np.zeros(len(self.disk), dtype=np.int8), np.ones(len(q_disk), dtype=np.int8)])
        all_disk = np.concatenate([self.disk, q_disk])
        all_value = np.concatenate([self.end, q_hour])
        order = np.lexsort((kind, all_value, all_disk))
        copies_before = np.cumsum(kind[order] == 0) - 1  # global index of the last copy at or before each entry
        is_query = kind[order] == 1
        last = np.empty(len(q_disk), dtype=np.int64)
        last[order[is_query] - len(self.disk)] = copies_before[is_query]
        ok = (last >= 0) & (self.disk[np.maximum(last, 0)] == q_disk) if len(self.disk) else np.zeros(len(q_disk),
                                                                                                       dtype=bool)
        k = np.maximum(last, 0)
        a = np.where(ok, self.a[k] if len(self.disk) else 0.0, 0.0)
        c = np.where(ok, self.c[k] if len(self.disk) else 0.0, 0.0)
        return (a + q_hour * (self.total_rate[q_disk] - c)).reshape(disks, points)


def disk_rows(disk: np.ndarray, disks: int, used: np.ndarray, total: np.ndarray,
              disk_se: np.ndarray | Callable[[], np.ndarray],
              rows: np.ndarray, rates: np.ndarray, sizes: np.ndarray, caps: np.ndarray, ses: np.ndarray,
              names: Callable[[np.ndarray], list[str]]) -> dict[str, Any]:
    """disk_row of every disk 0 .. disks-1: `disk` (sorted) names each current copy's disk, with its size and its
    partition's row of `rates` (0: unknown), `caps` (inf: none) and `ses` (rate errors), -1 being their last
    (`names` gives the names of copies by position: only the top ones are named); per disk its used bytes (future
    copies too), size (nan: unknown) and rate error (nan: from its copies' errors; or what gives them, asked once
    the copies' sums are found: the driver finds them meanwhile on another thread). The rows' columns: the numbers
    as arrays, the rest as lists (the projections each a float array)."""
    # Per copy, a chunk of whole disks at a time (the per-disk sums added up, the copies with an end and each
    # disk's top copies kept): a dozen temporaries of every copy (160 MB each at 20M) were memory touched afresh,
    # 4.7 s of a 20M forecast's disk rows, 2.8 s of them alone.
    squares, known, rate, growing, total_rate, unbounded = (np.zeros(disks) for _ in range(6))

    # A chunk's copies are whole disks no other chunk has: each adds to its own disks' sums, so the chunks run on
    # two threads (threads), their copies with an end and their top copies returned in the chunks' order.
    def chunk(bounds: tuple[int, int]) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        lo, hi = bounds
        # The chunk's rows made numpy's index type once, for three takes (an int32 index is converted at each
        # gather: 0.92 -> 0.76 s for three gathers of 20M copies in a probe).
        d, row = disk[lo:hi], rows[lo:hi].astype(np.intp, copy=False)
        r, chunk_ses = rates.take(row), ses.take(row)
        rooms = np.where(r >= 0, np.maximum(0.0, caps.take(row) - sizes[lo:hi]), -sizes[lo:hi])
        se_known = np.isfinite(chunk_ses)
        starts = _starts(d) if len(d) else d[:0]
        up = (r > 0) & (rooms > 0)  # growing into room it has
        for into, weights in ((squares, np.where(se_known, chunk_ses, 0.0) ** 2), (known, se_known),
                              (rate, np.where(up | (r < 0), r, 0.0)), (growing, up)):
            _add_runs(into, d, starts, weights)
        # The moving copies' rates (a copy at rate 0 adds an exact 0: the same sums) summed on the chunk's own runs,
        # not on copies picked out and their runs found again; only the few copies with an end are picked. An end
        # (room / rate) is finite only where the room is: those are divided, not every copy (most have no cap).
        _add_runs(total_rate, d, starts, r)
        at = np.flatnonzero(np.isfinite(rooms))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            ends = rooms[at] / r[at]  # a copy at rate 0: inf or nan, never finite
        at, ends = at[np.isfinite(ends)], ends[np.isfinite(ends)]
        without_end = r.copy()
        without_end[at] = 0.0
        _add_runs(unbounded, d, starts, without_end)
        # The partitions driving each disk: the most growth in a week, the first three with any (stable in copy
        # order). A week's growth clipped to the copy's room (model.growth) is above 0 only for a copy growing
        # into room: the lesser of the two there, the others left out (-inf), with no clip of every copy between
        # bounds of its own (np.clip with array bounds: a third of this chunk's time, docs/audit.md).
        week = np.minimum(r * WEEK_H, rooms)
        return ((d[at], r[at], rooms[at], ends),
                lo + _top(d, np.where(up & (week > 0), week, -np.inf), starts))

    done = threads.each(_chunks(disk), chunk)
    ends_of, tops = [ends for ends, _ in done], [top for _, top in done]
    from_copies = np.where(known > 0, np.sqrt(squares), np.nan)
    if callable(disk_se):
        disk_se = disk_se()
    se = np.where(np.isnan(disk_se), from_copies, disk_se)
    spread = np.where(np.isnan(se), 0.0, model.Z95 * np.nan_to_num(se))
    low, high = rate - spread, rate + spread
    with_end = [np.concatenate(part) for part in zip(*ends_of, strict=True)] if ends_of else \
        [disk[:0], sizes[:0], sizes[:0], sizes[:0]]
    growth = _Growth(total_rate, unbounded, *with_end)
    sized = np.isfinite(total) & (total > 0)
    times = {}
    for name, level in (("hours_to_90", LEVEL), ("hours_to_full", 1.0)):
        need = level * np.where(sized, total, 0.0) - used
        grows = sized & (need > 0) & (rate > 0)
        mid = growth.hours_to(need, grows)
        with np.errstate(divide="ignore", invalid="ignore"):
            early = np.where(grows, mid * (rate / high), np.where(high > 0, need / high, math.inf))
            late = np.where(grows & (low > 0), mid * (rate / low), math.inf)
        mid = np.where(grows, mid, math.inf)
        for key, value in ((name, mid), (name + "_early", early), (name + "_late", late)):
            value = np.where(need <= 0, 0.0, value)
            times[key] = np.where(sized, value, np.nan)
    top = np.concatenate(tops) if tops else np.zeros(0, dtype=np.int64)
    top_disk = disk[top]
    cut = np.searchsorted(top_disk, np.arange(1, disks))
    horizon = np.where(np.isfinite(times["hours_to_full"]), times["hours_to_full"], WEEK_H)
    end = np.minimum(np.maximum(horizon * 1.15, 24.0), 60 * 24.0)
    # In C order: linspace along axis 1 hands back a transposed view, so each disk's row (and every projection made
    # from the grid) was strided, and Arrow converts a strided row value by value: the four projection columns
    # took 0.3-0.5 s of a 20M append's output write on two threads, against 0.04 s contiguous (in a probe, 0.61
    # against 0.037 s for 40,000 rows of 100).
    grid = np.ascontiguousarray(np.linspace(0.0, end, PROJECTION_POINTS, axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        early_scale = np.where(rate > 0, high / rate, 1.0)
        late_scale = np.where(rate > 0, np.maximum(0.0, low / rate), 1.0)
    projected = {key: used[:, None] + growth.at(grid * s[:, None])
                 for key, s in (("projection_bytes", np.ones(disks)), ("projection_early", early_scale),
                                ("projection_late", late_scale))}
    # Each disk's copies from where its run starts (`disk` is sorted): a search per disk, not a count of every copy
    # (np.bincount made an index copy of 20M copies first: 0.12 s warm, 1.1-1.5 s in memory touched afresh).
    # The numbers searched for in the copies' own integer type: numpy would otherwise make an int64 copy of all
    # 20M int32 disk numbers to search them (docs/forecast-performance.md, "Fewer fresh pages").
    counts = np.diff(np.searchsorted(disk, np.arange(disks + 1, dtype=disk.dtype)))
    # The top copies' names and rates as lists cut at each disk's bounds: slices of one list, not np.split's array
    # per disk made into a list again (80,000 small arrays at 40,000 disks).
    # No disk (every copy of the newest snapshot on a dir it does not list): no bounds, not one pair of them.
    bounds = list(pairwise([0, *cut.tolist(), len(top)])) if disks else []
    top_names, top_rates = names(top), rates[rows[top]].tolist()
    return {
        # The numbers as arrays, not lists: a frame made of 40,000-value lists found their types again value by
        # value (0.1 s of a 20M append's serial end, against 0.02 s of arrays).
        "used_bytes": used.astype(np.int64), "rate_bytes_per_hour": rate, "rate_low": low, "rate_high": high,
        **times, "partitions": counts.astype(np.int64), "growing": growing.astype(np.int64),
        "top_partitions": [top_names[a:b] for a, b in bounds],
        "top_rates": [top_rates[a:b] for a, b in bounds],
        # Each disk's projections a row of one array (views), not lists: 40,000 disks x 4 x PROJECTION_POINTS
        # Python floats made, then read back by Arrow (docs/forecast-performance.md, "Fewer fresh pages").
        "projection_hours": list(grid), **{k: list(v) for k, v in projected.items()},
    }


CHUNK = 1 << 20  # copies at once in disk_rows (whole disks: a chunk ends where a disk does)


def _chunks(disk: np.ndarray) -> list[tuple[int, int]]:
    """(lo, hi) ranges of about CHUNK copies of `disk` (sorted), each ending where a disk does."""
    n = len(disk)
    if n <= CHUNK:
        return [(0, n)] if n else []
    starts = _starts(disk)
    cuts = np.unique(starts[np.minimum(np.searchsorted(starts, np.arange(CHUNK, n, CHUNK)), len(starts) - 1)])
    edges = [0, *(int(c) for c in cuts if 0 < c < n), n]
    return list(zip(edges[:-1], edges[1:], strict=True))


def run_sums(disk: np.ndarray, weights: np.ndarray, disks: int) -> np.ndarray:
    """np.bincount(disk, weights, minlength=disks) for `disk` sorted, by its runs: no index copy of every copy (a
    bincount of int32 codes makes one in numpy's index type first: 160 MB touched afresh at 20M copies)."""
    into = np.zeros(disks)
    _add_runs(into, disk, None, weights)
    return into


def _add_runs(into: np.ndarray, disk: np.ndarray, starts: np.ndarray | None, weights: np.ndarray) -> None:
    """np.bincount(disk, weights) added to `into`, for `disk` sorted (`starts`: _starts(disk), or None to find
    them): each disk's run of copies summed at once (np.add.reduceat: 0.2 ms per million copies, a weighted bincount
    4 ms, its adds scattered one copy at a time; the chunks of 20M copies took 0.5 s that way)."""
    if not len(disk):
        return
    if starts is None:
        starts = _starts(disk)
    into[disk[starts]] += np.add.reduceat(np.asarray(weights, dtype=np.float64), starts)


def _starts(disk: np.ndarray) -> np.ndarray:
    """Where each disk's copies start in `disk` (sorted, not empty): a search per disk number in its range, not a
    pass over every copy."""
    first = np.searchsorted(disk, np.arange(disk[0], disk[-1] + 1, dtype=disk.dtype))  # no int64 copy (above)
    return first[np.diff(first, append=len(disk)) > 0]  # numbers no copy has: an empty run, left out


def _top(disk: np.ndarray, left: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """The copies (positions) driving each disk, by disk then rank: per disk its TOP largest `left` (each copy's
    week's growth where above 0, -inf where it has none), a tie to the earlier copy (disk_row's stable order).
    `disk` is sorted. Only the copies at or above a bound per disk are sorted: the least of the maxima of TOP parts
    of its run, each the value of another of its copies, so its TOP largest are all at or above it (a disk of fewer
    copies: all of them). Two passes over every copy, where picking a maximum TOP times took a dozen (and sorting
    every copy: lexsort of 2M copies, 0.8 s). `starts`: _starts(disk) when the caller has them."""
    if not len(disk):
        return np.zeros(0, dtype=np.int64)
    starts = _starts(disk) if starts is None else starts
    lengths = np.diff(np.append(starts, len(disk)))
    parts = (starts[:, None] + lengths[:, None] * np.arange(TOP)[None, :] // TOP).ravel()
    bound = np.fmax.reduceat(left, parts).reshape(-1, TOP).min(axis=1)
    bound[lengths < TOP] = -np.inf  # some of their parts are empty (reduceat gives those their first value)
    at = np.flatnonzero((left >= np.repeat(bound, lengths)) & (left > -np.inf))
    at = at[np.lexsort((at, -left[at], disk[at]))]
    first = np.searchsorted(disk[at], disk[at], side="left")  # each candidate's disk's first place among them
    return at[np.arange(len(at)) - first < TOP].astype(np.int64, copy=False)


def disk_row(used: float, rates: np.ndarray, sizes: np.ndarray, caps: np.ndarray, ses: np.ndarray,
             names: np.ndarray, disk_se: float, total: float | None) -> dict[str, Any]:
    """One disk's forecast (the _DISK_SCHEMA columns after its keys) from its current copies' rates (0: unknown),
    sizes, caps (inf: none) and rate errors, the disk's used bytes (a future copy takes space too), its rate's
    error (nan: from the partitions' errors) and size (None: unknown)."""
    rooms = np.where(rates >= 0, np.maximum(0.0, caps - sizes), -sizes)  # model.room, every copy at once
    se = disk_se if not math.isnan(disk_se) else model.disk_rate_se(ses, np.array([]), np.array([]))
    f = model.forecast_disk(used, total, rates, rooms, se, LEVEL)
    week = np.clip(rates * WEEK_H, np.minimum(rooms, 0), np.maximum(rooms, 0))
    order = np.argsort(-week, kind="stable")[:TOP]
    order = [i for i in order if week[i] > 0]
    horizon = f.hours_to_full if math.isfinite(f.hours_to_full) else WEEK_H
    grid = np.linspace(0.0, min(max(horizon * 1.15, 24.0), 60 * 24.0), PROJECTION_POINTS)
    scale = (lambda bound: bound / f.rate) if f.rate > 0 else (lambda bound: 1.0)
    return {
        "used_bytes": int(used), "rate_bytes_per_hour": f.rate, "rate_low": f.rate_low, "rate_high": f.rate_high,
        "hours_to_90": f.hours_to_90, "hours_to_90_early": f.hours_to_90_early,
        "hours_to_90_late": f.hours_to_90_late, "hours_to_full": f.hours_to_full,
        "hours_to_full_early": f.hours_to_full_early, "hours_to_full_late": f.hours_to_full_late,
        "partitions": len(rates), "growing": int(((rates > 0) & (rooms > 0)).sum()),
        "top_partitions": [str(names[i]) for i in order], "top_rates": [float(rates[i]) for i in order],
        "projection_hours": grid.tolist(),
        "projection_bytes": model.projection(used, rates, rooms, grid).tolist(),
        "projection_early": model.projection(used, rates * scale(f.rate_high), rooms, grid).tolist(),
        "projection_late": model.projection(used, rates * max(0.0, scale(f.rate_low)), rooms, grid).tolist(),
    }
