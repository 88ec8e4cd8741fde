"""The forecast's compact history (mover/audit/forecast/history.py): built from the snapshots when missing, a new
snapshot appended (and the ones leaving the window dropped) instead of reading the window again, rebuilt when it does
not match the snapshots, each path's version taken up by the other; every way the same forecast as reading all the
snapshots (forecast.compute_local)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from mover.audit import (
    forecast,
    snapshot,
    synth_history,
)
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.testing.forecast_history import (
    hand_made_snapshots,
    one_partition_a_disk,
    same_as_reading_every_snapshot,
    window_by_window,
)

DISK_KEYS = ["cluster", "broker", "log_dir"]


def kept_fits(root: Path) -> pd.DataFrame:
    """The driver's kept history (forecast_columns, version 3): each row's keys and kept fit."""
    data = forecast_columns.manifest(root)
    assert data is not None
    where = forecast_history.where(root)
    keys = pd.concat([pq.read_table(where / f).to_pandas() for f in data["keys"]], ignore_index=True)
    kept = forecast_columns.kept_fits(root)
    assert kept is not None
    return keys.assign(**{name: kept[:, j] for j, name in enumerate(forecast_kept.KEPT)})


@pytest.mark.timeout(900)
def test_appended_kept_dropped_and_rebuilt(tmp_path: Path, spark) -> None:  # noqa: ANN001
    root = tmp_path / "snapshots"
    hand_made_snapshots(root)
    *older, newest = snapshot.list_snapshots(root)
    aside = tmp_path / newest.name
    newest.rename(aside)
    # The driver takes up Spark's history (version 1) and writes it as its own (version 2, a file per snapshot);
    # Spark's steps read version 1 only: they have the driver's written as version 1, then take it up.
    first = forecast.compute(spark, older, on_driver=False)
    assert first.kept == "rebuilt" and forecast_history.read_manifest(root) == [p.name for p in older]
    aside.rename(newest)
    paths = snapshot.list_snapshots(root)
    added = forecast.compute(spark, paths, on_driver=True)
    assert added.kept == "appended 1"
    same_as_reading_every_snapshot(added)
    assert forecast_held.stored_snapshots(root) == [p.name for p in paths]
    assert forecast_history.read_manifest(root) is None
    assert forecast.compute(spark, paths, on_driver=True).kept == "kept"
    assert forecast_history.update(spark, paths).how == "kept"
    assert forecast_history.read_manifest(root) == [p.name for p in paths] and forecast_columns.manifest(root) is None
    assert forecast_history.update(spark, paths).how == "kept"
    # The last 24 hours: the snapshots before leave the front of the kept history, nothing is read again.
    recent = forecast.window(paths[-1], 24.0)
    shorter = forecast.compute(spark, recent, on_driver=False)
    assert shorter.kept == "appended 0" and forecast_history.read_manifest(root) == [p.name for p in recent]
    same_as_reading_every_snapshot(shorter)
    assert forecast.compute(spark, recent, on_driver=True).kept == "kept"  # Spark's, taken up
    assert forecast_held.stored_snapshots(root) == [p.name for p in recent] == forecast_columns.manifest(
        root)["snapshots"]
    shortest = forecast.compute(spark, forecast.window(paths[-1], 12.0), on_driver=True)
    assert shortest.kept == "appended 0"
    same_as_reading_every_snapshot(shortest)
    # A history that does not match the snapshots (one of them gone from the middle of it) is rebuilt.
    shutil.rmtree(recent[3])
    rest = snapshot.list_snapshots(root)[-6:]
    rebuilt = forecast.compute(spark, rest, on_driver=True)
    assert rebuilt.kept == "rebuilt"
    same_as_reading_every_snapshot(rebuilt)
    on_spark = forecast.compute(spark, rest, on_driver=False)  # the driver's history, taken up
    assert on_spark.kept == "kept"
    same_as_reading_every_snapshot(on_spark)
    # So is one of another version; and an older snapshot's forecast keeps nothing.
    manifest = forecast_history.where(root) / forecast_history.MANIFEST
    manifest.write_text(json.dumps({"version": 0, "snapshots": [p.name for p in rest]}))
    assert forecast_history.read_manifest(root) is None
    assert forecast_history.update(spark, rest[:-1]).how == "in memory"
    assert json.loads(manifest.read_text())["version"] == 0


@pytest.mark.timeout(900)
def test_spark_takes_up_the_drivers_history(tmp_path: Path, spark) -> None:  # noqa: ANN001
    """The driver's history (version 2) with a snapshot newer than it: Spark's steps have it written as version 1
    (its rows and sizes, nulls where it had no point) and append the newest, the cold forecast's answer; a driver's
    history that does not match the snapshots is rebuilt as before, not rewritten first."""
    root = tmp_path / "snapshots"
    hand_made_snapshots(root)
    *older, newest = snapshot.list_snapshots(root)
    aside = tmp_path / newest.name
    newest.rename(aside)
    assert forecast.compute(spark, older, on_driver=True).kept == "rebuilt"
    written = kept_fits(root)
    where = forecast_history.where(root)
    data = forecast_columns.manifest(root)
    sizes = np.column_stack([np.load(where / f) for f in data["sizes"]])
    assert forecast_history.update(spark, older).how == "kept"
    series = pq.read_table(where / "series").to_pandas()
    assert series[["cluster", "topic", "partition"]].to_dict("records") == written[
        ["cluster", "topic", "partition"]].astype({"partition": "int32"}).to_dict("records")
    assert np.array_equal(np.array([[np.nan if v is None else v for v in row] for row in series["sizes"]]), sizes,
                          equal_nan=True) and np.isnan(sizes).any()
    aside.rename(newest)
    paths = snapshot.list_snapshots(root)
    added = forecast.compute(spark, paths, on_driver=False)
    assert added.kept == "appended 1"
    same_as_reading_every_snapshot(added)
    # The driver's again, then a snapshot gone from the middle of its grid: rebuilt, the version 2 not rewritten.
    assert forecast.compute(spark, paths, on_driver=True).kept == "kept"
    assert forecast_columns.manifest(root) is not None
    shutil.rmtree(paths[3])
    rest = snapshot.list_snapshots(root)
    rebuilt = forecast.compute(spark, rest, on_driver=False)
    assert rebuilt.kept == "rebuilt" and forecast_history.read_manifest(root) == [p.name for p in rest]
    same_as_reading_every_snapshot(rebuilt)


def test_first_fits_ages_are_staggered_by_blocks_of_rows(monkeypatch) -> None:  # noqa: ANN001
    """A first fit's age is its block of STAGGER_ROWS rows, modulo REFIT_AFTER: each append finds a REFIT_AFTER-th
    of the fits too old, in runs of whole blocks (their rows read from that share of each column's pages), and
    every fit once in REFIT_AFTER appends."""
    monkeypatch.setattr(forecast_kept, "STAGGER_ROWS", 4)
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 3)
    rows = 30
    kept = np.full((rows, len(forecast_kept.KEPT)), np.nan, order="F")
    found = {name: np.ones(rows) for name in ("whole_slope", "recent_slope", "slope", "intercept", "sigma", "se")}
    forecast_kept.keep_fits(kept, 0, rows, found, np.ones(rows, dtype=bool), np.zeros(rows), 0)
    assert kept[:, 5].tolist() == [float((r // 4) % 3) for r in range(rows)]
    due = []
    for appended in range(1, 4):
        old = np.flatnonzero(kept[:, 5] + appended >= 3)  # _reused's test of the age
        due.append(set(old.tolist()) - set().union(*due) if due else set(old.tolist()))
    assert [sorted(d) for d in due] == [[r for r in range(rows) if (r // 4) % 3 == k] for k in (2, 1, 0)]


@pytest.mark.parametrize("refresh_after", [forecast_kept.REFRESH_AFTER, 3])
def test_an_appended_forecast_is_a_cold_one_within_its_tolerance(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                                 refresh_after: int) -> None:
    """A fleet grown by synth (daily cycles, bursts, noise, plateaus, moves, outages: gaps), forecast as it grows:
    15 snapshots appended one by one to a 2-day window's kept history, its fits kept where they still hold (also
    with their sigma and error found again every third append). Against a cold forecast of the same window: every
    disk's rate within 3% (what a kept Theil-Sen slope can be off by), its times to 90% and to full within 5%; and
    refitting at every snapshot (REFIT_AFTER 1) is exact."""
    monkeypatch.setattr(forecast_kept, "REFRESH_AFTER", refresh_after)
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=2, brokers=3, disks=2, replicas_per_disk=12,
                                                          days=4, every_hours=2, seed=7), root)
    since, start = 48.0, len(snapshot.list_snapshots(root)) - 16
    appended = window_by_window(root, since, start)
    cold = forecast_driver.compute(appended.snapshots, since, keep_history=False)
    assert cold.kept == "in memory"
    mine, theirs = (r.disks.set_index(DISK_KEYS).sort_index() for r in (appended, cold))
    kept = kept_fits(root)
    assert (kept["age"] > 0).sum() > len(kept) / 5  # fits were kept, not all found again
    ok = theirs["status"] != "offline"
    np.testing.assert_allclose(mine.loc[ok, "rate_bytes_per_hour"], theirs.loc[ok, "rate_bytes_per_hour"], rtol=0.03)
    compared = 0
    for column in ("hours_to_90", "hours_to_full"):
        finite = ok & np.isfinite(theirs[column]) & (theirs[column] > 0)
        compared += finite.sum()
        np.testing.assert_allclose(mine.loc[finite, column], theirs.loc[finite, column], rtol=0.05)
    assert compared >= 4
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    exact = window_by_window(root, since, start)
    pd.testing.assert_frame_equal(exact.disks, cold.disks, check_exact=False, rtol=1e-9)


def test_a_partition_that_changes_behaviour_is_refitted(tmp_path: Path) -> None:
    """Two partitions grow steadily (with a little noise) over 20 snapshots; then one of them grows 5 times faster
    for two snapshots. Appended one at a time, the steady one keeps its fit, the changed one is off its kept line's
    band and refitted: its disk's forecast is the cold one (its kept slope, the band not checked, is 0.05% slow:
    Theil-Sen moves little for two points, which is why it is robust; checked to fail so)."""
    rng = np.random.default_rng(3)
    steps = 22
    steady = [1e11 + 1e9 * i + rng.normal(0, 1e7) for i in range(steps)]
    changed = [1e11 + 1e9 * min(i, 19) + 5e9 * max(0, i - 19) + rng.normal(0, 1e7) for i in range(steps)]
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {"steady": steady, "changed": changed})
    appended = window_by_window(root, 1e6, steps - 3)
    kept = kept_fits(root).set_index("topic")
    assert kept.loc["steady", "age"] > kept.loc["changed", "age"] == 0
    cold = forecast_driver.compute(appended.snapshots, keep_history=False)
    mine, theirs = (r.disks.set_index("log_dir") for r in (appended, cold))
    pd.testing.assert_series_equal(mine.loc["/changed"], theirs.loc["/changed"], check_exact=False, rtol=1e-9)
    assert mine.loc["/steady", "rate_bytes_per_hour"] == pytest.approx(theirs.loc["/steady", "rate_bytes_per_hour"],
                                                                       rel=1e-3)


def test_the_kept_history_read_in_batches_is_the_stored_one(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """forecast_held._read_kept copies each batch's sizes from Arrow's buffers and makes its nulls nan from the
    validity bits: read in batches of 7 rows from two files (each batch a slice, offsets not at 0, nulls anywhere),
    with the first columns dropped, it gives the sizes, keys and kept fits as they were written."""
    import pyarrow as pa

    rng = np.random.default_rng(4)
    count, where = 5, forecast_history.where(tmp_path)
    (where / "series").mkdir(parents=True)
    (where / "dirs").mkdir()
    written = []
    for part, rows in enumerate((23, 16)):
        sizes = rng.integers(0, 1000, (rows, count)).astype(float)
        sizes[rng.random((rows, count)) < 0.3] = np.nan
        kept = rng.random((rows, len(forecast_kept.KEPT)))
        kept[rng.random(kept.shape) < 0.2] = np.nan
        flat = sizes.ravel()
        columns = {"cluster": pa.array([f"c{part}"] * rows), "topic": pa.array([f"t{i % 4}" for i in range(rows)]),
                   "partition": pa.array(np.arange(rows, dtype="int32")),
                   "sizes": pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype="int32") * count),
                                                     pa.array(flat, mask=np.isnan(flat)))}
        for j, name in enumerate(forecast_kept.KEPT):
            columns[name] = pa.array(kept[:, j], mask=np.isnan(kept[:, j]))
        pq.write_table(pa.table(columns), where / "series" / f"part-{part}.parquet", row_group_size=10)
        written.append((sizes, kept))
    pq.write_table(pa.Table.from_pandas(pd.DataFrame({c: [] for c in forecast_history.DIRS}),
                                        schema=forecast_columns.dirs_schema(), preserve_index=False),
                   where / "dirs" / "part-0.parquet")
    (where / forecast_history.MANIFEST).write_text(json.dumps({"version": forecast_history.VERSION,
                                                               "snapshots": [f"s{i}" for i in range(count)]}))
    monkeypatch.setattr(forecast_held, "READ_BATCH", 7)
    read = forecast_held._read_kept(tmp_path, drop=2)
    assert read is not None
    keys, sizes, _, kept = read
    want = np.concatenate([s for s, _ in written])
    np.testing.assert_array_equal(sizes, want[:, 2:])
    np.testing.assert_array_equal(kept, np.concatenate([k for _, k in written]))
    assert keys["cluster"].astype(str).tolist() == ["c0"] * 23 + ["c1"] * 16
    assert keys["partition"].tolist() == [*range(23), *range(16)]
