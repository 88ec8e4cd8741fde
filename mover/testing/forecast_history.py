"""Snapshot histories the forecast tests (tests/audit/test_forecast*.py, test_spark_cluster.py) forecast, each disk's
answer known, and the checks they make of a forecast: `hand_made_snapshots` (13 snapshots, every 4 hours: growth, a
move, a deleted topic, a plateau under retention.bytes, a broker missing from the last two), `one_partition_a_disk`
(each partition's size at each snapshot given), `same_as_reading_every_snapshot` (a forecast against the pandas
reference, forecast.compute_local), `window_by_window` (the forecast run at each new snapshot, appended to its kept
history), `cold_then_newest` (the history kept without the newest snapshot), `rewrite` (a snapshot's dataset
changed in place), `Calls` (a function of a module counted, or refused), `checked_both_ways` (every append
that takes the kept state checked against the pass over the window) and `same_replica_map` (a map made otherwise
against a whole read's).

    hand_made_snapshots(tmp_path / "snapshots")
    one_partition_a_disk(root, {"steady": [1e11 + 1e9 * i for i in range(8)], "gone": [1e11] * 4 + [None] * 4})
    same_as_reading_every_snapshot(forecast_driver.compute(snapshot.list_snapshots(root)))
    appended = window_by_window(root, since=48.0, start=len(snapshot.list_snapshots(root)) - 16)
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import forecast, snapshot, synth_history
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import fits as forecast_fits
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept

GB = 1e9
END = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # hand_made_snapshots' last
STEPS = 13  # hand_made_snapshots': every 4 hours, two days


def hand_made_snapshots(root: Path) -> None:
    """One broker of two 1 TB dirs. d0: `grow` (10 GB/h, retention.bytes unlimited) and, until the middle, `still`
    (500 GB, not growing), which then moves to d1. d1: `capped` (grew 5 GB/h until its retention.bytes, 100 GB,
    six hours in) and `gone` (200 GB, deleted in the middle). Broker 2's single dir grows 1 GB/h and misses the
    last two snapshots."""
    for i in range(STEPS):
        h = 4.0 * i
        at = END - timedelta(hours=4.0 * (STEPS - 1 - i))
        d0 = [("grow", 0, 100 * GB + 10 * GB * h)]
        d1 = [("capped", 0, min(100 * GB, 70 * GB + 5 * GB * h))]
        half = i >= STEPS // 2
        (d1 if half else d0).append(("still", 0, 500 * GB))
        if not half:
            d1.append(("gone", 0, 200 * GB))
        rows = [("c", 1, "/d0", t, p, s) for t, p, s in d0] + [("c", 1, "/d1", t, p, s) for t, p, s in d1]
        dirs = [("c", 1, "/d0", 1000 * GB), ("c", 1, "/d1", 1000 * GB)]
        if i < STEPS - 2:
            rows.append(("c", 2, "/d0", "other", 0, 300 * GB + 1 * GB * h))
            dirs.append(("c", 2, "/d0", 1000 * GB))
        replicas = pd.DataFrame(rows, columns=["cluster", "broker", "log_dir", "topic", "partition", "size_bytes"])
        replicas = replicas.assign(offset_lag=0, is_future=False, size_bytes=replicas["size_bytes"].astype("int64"))
        log_dirs = pd.DataFrame(dirs, columns=["cluster", "broker", "log_dir", "total_bytes"])
        log_dirs = log_dirs.assign(error=None, total_bytes=log_dirs["total_bytes"].astype("int64"))
        log_dirs["usable_bytes"] = log_dirs["total_bytes"]
        topics = ["grow", "still", "capped", "other"] + ([] if half else ["gone"])
        partitions = pd.DataFrame({"cluster": "c", "topic": topics, "partition": 0,
                                   "replicas": [np.array([1 if t != "other" else 2], dtype="int32") for t in topics],
                                   "retention_bytes": [int(100 * GB) if t == "capped" else -1 for t in topics],
                                   "retention_ms": -1})
        synth_history._write_snapshot(root / snapshot.snapshot_name(at), at, log_dirs, replicas, partitions)


def one_partition_a_disk(root: Path, sizes: dict[str, list[float | None]]) -> None:
    """One broker, a dir per partition (`sizes`: each one's size at each snapshot, every 6 hours; None: the topic is
    gone then, its dir empty)."""
    count = len(next(iter(sizes.values())))
    end = datetime(2026, 11, 20, tzinfo=UTC)
    for i in range(count):
        at = end - timedelta(hours=6.0 * (count - 1 - i))
        here = {t: s[i] for t, s in sizes.items() if s[i] is not None}
        replicas = pd.DataFrame({"cluster": "c", "broker": 1, "log_dir": [f"/{t}" for t in here], "topic": list(here),
                                 "partition": 0, "size_bytes": np.array([int(v) for v in here.values()], dtype="int64"),
                                 "offset_lag": 0, "is_future": False})
        log_dirs = pd.DataFrame({"cluster": "c", "broker": 1, "log_dir": [f"/{t}" for t in sizes],
                                 "total_bytes": int(1e13), "usable_bytes": int(1e13), "error": None})
        partitions = pd.DataFrame({"cluster": "c", "topic": list(here), "partition": 0,
                                   "replicas": [np.array([1], dtype="int32")] * len(here), "retention_bytes": -1,
                                   "retention_ms": -1})
        synth_history._write_snapshot(root / snapshot.snapshot_name(at), at, log_dirs, replicas, partitions)


def same_as_reading_every_snapshot(result: forecast.ForecastResult) -> None:
    """`result`'s disks and history are the ones the pandas reference gives reading every one of its snapshots."""
    local = forecast.compute_local(result.snapshots)
    pd.testing.assert_frame_equal(local.disks, result.disks, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(local.history.astype(result.history.dtypes), result.history)


def window_by_window(root: Path, since: float, start: int) -> forecast.ForecastResult:
    """The forecast of every window of `since` hours from the `start`-th snapshot on, as a forecast run at each new
    snapshot does: the first window cold, then each snapshot appended to the kept history (and its oldest dropped)."""
    every = snapshot.list_snapshots(root)
    shutil.rmtree(forecast_history.where(root), ignore_errors=True)
    aside = root.parent / "aside"
    aside.mkdir(exist_ok=True)
    for path in every[start + 1:]:  # each comes back as the newest snapshot in its turn
        path.rename(aside / path.name)
    for i in range(start, len(every)):
        if i > start:
            (aside / every[i].name).rename(every[i])
        paths = forecast.window(every[i], since)
        result = forecast_driver.compute(paths, since)
        assert result.kept == ("rebuilt" if i == start else "appended 1"), (i, result.kept)
    return result


def cold_then_newest(root: Path) -> list[Path]:
    """The forecast of every snapshot but the newest (its history kept), the newest then back: every snapshot."""
    *older, newest = paths = snapshot.list_snapshots(root)
    aside = root.parent / newest.name
    newest.rename(aside)
    assert forecast_driver.compute(older).kept == "rebuilt"
    aside.rename(newest)
    return paths


def rewrite(path: Path, dataset: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    """Snapshot `path`'s `dataset` (e.g. "replicas") read, changed by `change` and written back as one file."""
    frame = change(pd.read_parquet(path / dataset))
    shutil.rmtree(path / dataset)
    (path / dataset).mkdir()
    frame.to_parquet(path / dataset / "part-0.parquet", index=False)


class Calls:
    """`owner.name` (a module's function) replaced for the test (`monkeypatch`): each call's first argument
    recorded in `firsts`, then the real one called, or an AssertionError raised when `refuse`."""

    def __init__(self, monkeypatch: Any, owner: Any, name: str, refuse: bool = False) -> None:
        self.firsts: list[Any] = []
        real = getattr(owner, name)

        def called(first: Any, *rest: Any, **named: Any) -> Any:
            self.firsts.append(first)
            if refuse:
                raise AssertionError(f"{name}({first}) called")
            return real(first, *rest, **named)

        monkeypatch.setattr(owner, name, called)


def _same(mine: np.ndarray, theirs: np.ndarray, what: str, scale: float = 0.0) -> None:
    np.testing.assert_allclose(np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float), rtol=1e-9,
                               atol=scale * 1e-9, equal_nan=True, err_msg=what)


def checked_both_ways(monkeypatch: Any) -> list[str]:
    """forecast_fits.fitted made to check, at every forecast its state applies to, that the pass over the
    window (on a copy of the kept fits) gives the same fits, residual sums and state; the ways taken, in order."""
    taken: list[str] = []
    original = forecast_fits.from_state

    def checked(held, t, retention, partition, disk, disks):  # noqa: ANN001, ANN202
        whole_held = copy.copy(held)
        whole_held.kept = np.array(held.kept)
        quick = original(held, t, retention, partition, disk, disks)
        taken.append("state" if quick is not None else "pass")
        if quick is None:
            return None
        found, _ = forecast_fits.fitted_whole(whole_held, t, retention, partition, disk, disks)
        rows = len(held.keys)
        for name in ("rate", "se", "cap"):
            _same(quick.found[name], found[name][:rows], name)
        totals, seen, mine = quick.sums()  # found again when the forecast asks: the same sums
        theirs = whole_held.state
        scale = float(np.abs(theirs.totals).max()) if theirs.totals.size else 0.0
        # Residuals of sizes of up to 1e11 bytes taken off and added again in another order than the pass's: their
        # sums may round apart by 1e-7 bytes where they are nearly 0 (a byte's error is then still seen).
        _same(totals, theirs.totals.T, "totals", max(scale, 1e3))
        np.testing.assert_array_equal(seen, theirs.counts.T > 0)
        kept = np.array(held.kept)
        resistant = np.full(rows, np.nan)  # the slopes now of the rows found again, the others' unread
        resistant[~quick.carried] = quick.resistant
        forecast_kept.keep_fits(kept, 0, rows, quick.found, ~quick.carried, resistant, held.appended)
        _same(kept, whole_held.kept, "kept fits")
        for name in ("gaps", "resets", "first_count", "last_count", "copy_rows", "copy_disks"):
            np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name), err_msg=name)
        for name in ("first_sum", "last_sum", "fit_from"):
            _same(getattr(mine, name), getattr(theirs, name), name)
        _same(mine.counts, theirs.counts, "counts")
        pd.testing.assert_frame_equal(mine.disks, theirs.disks)
        return quick

    monkeypatch.setattr(forecast_fits, "from_state", checked)
    counted = forecast_append.alive

    def alive(state, dropped, grid, appended, old):  # noqa: ANN001, ANN202
        found = counted(state, dropped, grid, appended, old)
        np.testing.assert_array_equal(found, grid.alive())  # the counts moved on: every column's answer
        taken.append("alive")
        return found

    monkeypatch.setattr(forecast_append, "alive", alive)
    # On these small fleets most rows change at some append: the state's way taken whatever their share.
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 1.0)
    return taken


def same_replica_map(found: Any, whole: Any) -> None:
    """A replica map (forecast_replica_map.ReplicaMap) made otherwise than by reading its snapshot whole (moves
    patched, runs found) is the one a whole read finds, `whole`: the same fingerprints and rows, each copy on the
    disk of the same names, only disks with copies, an order by disk stable with its arrays in it."""
    assert (found.fingerprint, found.placed) == (whole.fingerprint, whole.placed)
    np.testing.assert_array_equal(found.rows, whole.rows)
    names = [list(zip(*(m.disks[c].iloc[m.group] for c in ("cluster", "broker", "log_dir")), strict=True))
             for m in (found, whole)]
    assert names[0] == names[1]
    assert sorted(map(tuple, found.disks.itertuples(index=False))) == sorted(
        map(tuple, whole.disks.itertuples(index=False)))
    assert list(found.disks.dtypes) == list(whole.disks.dtypes)
    order = found.by_disk if len(found.by_disk) else np.arange(len(found.rows))
    np.testing.assert_array_equal(order, np.argsort(found.group, kind="stable"))
    rows, group = found.ordered_rows()
    np.testing.assert_array_equal(rows, found.rows[order])
    np.testing.assert_array_equal(group, found.group[order])
