"""The driver's append from its kept state (mover/audit/forecast/append.py): every partition's fit, every disk's
residual sums and the state itself are the ones the pass over the window gives, whatever happened between the
snapshots (moves, outages, gaps, deleted and new topics, plateaus, a window that drops its oldest snapshot); a
missing or damaged state costs a pass over the window, never a wrong forecast."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mover.audit import columns as audit_columns
from mover.audit import (
    forecast,
    snapshot,
    synth_history,
    threads,
)
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import fits as forecast_fits
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import replica_adds, replica_map
from mover.audit.forecast import state as forecast_state
from mover.testing.forecast_history import (
    GB,
    checked_both_ways,
    cold_then_newest,
    one_partition_a_disk,
    same_as_reading_every_snapshot,
    window_by_window,
)


@pytest.fixture
def both_ways(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """forecast_fits.fitted checked against the pass over the window at every append (checked_both_ways)."""
    return checked_both_ways(monkeypatch)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("refresh_after", [forecast_kept.REFRESH_AFTER, 2])
def test_appends_from_the_state_are_the_pass_over_the_window(tmp_path: Path, both_ways: list[str],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             refresh_after: int) -> None:
    """A synth fleet (daily cycles, bursts, noise, plateaus, moves, outages), 15 snapshots appended one at a time
    to a 2-day window's history (its oldest dropped each time): each append from the state, and the same as the
    pass over the window; also with the carried fits' sigma and error found again every other append."""
    monkeypatch.setattr(forecast_kept, "REFRESH_AFTER", refresh_after)
    refreshed: list[int] = []
    refresh = forecast_kept.refresh

    def counted(kept, rows, t, y, since):  # noqa: ANN001, ANN202
        refreshed.append(len(rows))
        refresh(kept, rows, t, y, since)

    monkeypatch.setattr(forecast_kept, "refresh", counted)
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=2, brokers=3, disks=2, replicas_per_disk=12,
                                                          days=4, every_hours=2, seed=7), root)
    window_by_window(root, 48.0, len(snapshot.list_snapshots(root)) - 16)
    assert both_ways == ["pass", *["alive", "state"] * 15]
    assert (sum(refreshed) > 0) == (refresh_after == 2), refreshed


def test_deleted_new_and_reset_topics_and_a_growing_window(tmp_path: Path, both_ways: list[str]) -> None:
    """Topics deleted (a gap, then gone), made again (a reset), new, on a window that grows (nothing dropped):
    every append from the state, the same as the pass."""
    rng = np.random.default_rng(5)
    steps = 14

    def grow(rate: float) -> list[float | None]:
        return [1e9 + rate * i + rng.normal(0, 1e6) for i in range(steps)]

    gone = [*grow(1e8)[:8], *[None] * 6]
    again = [*grow(1e8)[:7], 1e6, 2e6, 3e6, 4e6, 5e6, 6e6, 7e6]
    fresh = [*[None] * 9, *grow(1e7)[9:]]
    gap = [*grow(5e7)[:5], None, *grow(5e7)[6:]]
    one_partition_a_disk(tmp_path / "snapshots", {"steady": grow(1e8), "gone": gone, "again": again,
                                                  "fresh": fresh, "gap": gap})
    window_by_window(tmp_path / "snapshots", 1e6, 6)
    assert both_ways == ["pass", *["state"] * 7]


def moving_fleet(root: Path, steps: int, placed: dict[str, list[list[int]]]) -> None:
    """Two brokers of two dirs; each topic's partition 0 grows steadily (with a little noise) on the dirs
    `placed[topic][step]` (numbers 0..3: broker n // 2 + 1, dir n % 2; an empty list: the broker is down then,
    its dirs missing from that snapshot). A snapshot every 6 hours."""
    rng = np.random.default_rng(11)
    end = datetime(2026, 11, 20, tzinfo=UTC)
    rates = {topic: 1e8 * (1 + i) for i, topic in enumerate(placed)}
    down = {s for s in range(steps) for where in placed.values() if not where[s]}
    for s in range(steps):
        at = end - timedelta(hours=6.0 * (steps - 1 - s))
        rows = [(n // 2 + 1, f"/d{n % 2}", topic, int(1e10 + rates[topic] * s + rng.normal(0, 1e6)))
                for topic, where in placed.items() for n in where[s]]
        replicas = pd.DataFrame(rows, columns=["broker", "log_dir", "topic", "size_bytes"]).assign(
            cluster="c", partition=0, offset_lag=0, is_future=False).astype({"size_bytes": "int64"})
        brokers = [b for b in (1, 2) if not (s in down and b == 2)]
        log_dirs = pd.DataFrame([(b, f"/d{d}") for b in brokers for d in (0, 1)], columns=["broker", "log_dir"]).assign(
            cluster="c", total_bytes=int(1e13), usable_bytes=int(1e13), error=None)
        partitions = pd.DataFrame({"cluster": "c", "topic": list(placed), "partition": 0,
                                   "replicas": [np.array([1, 2], dtype="int32")] * len(placed),
                                   "retention_bytes": -1, "retention_ms": -1})
        synth_history._write_snapshot(root / snapshot.snapshot_name(at), at, log_dirs, replicas, partitions)


def test_copies_moved_between_dirs_and_brokers_down(tmp_path: Path, both_ways: list[str]) -> None:
    """Partitions that keep their fits while their copies move to another dir (one way, then back; one copy to the
    other broker's), and a broker down for a snapshot: the residual sums leave the old dirs and follow the copies,
    as the pass over the window gives them (checked to fail when a moved copy's rows are taken as unchanged)."""
    steps = 16
    stay = [[0, 2]] * steps
    there_and_back = [[0, 2]] * 9 + [[1, 2]] * 3 + [[0, 2]] * 4
    other_broker = [[1, 3]] * 10 + [[1, 2]] * 6
    outage = [[1, 3]] * 12 + [[1]] + [[1, 3]] * 3
    root = tmp_path / "snapshots"
    moving_fleet(root, steps, {"stay": stay, "there-and-back": there_and_back, "other-broker": other_broker,
                               "outage": outage})
    window_by_window(root, 1e6, 7)
    assert both_ways == ["pass", *["state"] * 8]


@pytest.mark.parametrize("as_runs", [True, False])
def test_copies_moved_to_another_broker_or_in_place_take_the_state(
        tmp_path: Path, both_ways: list[str], monkeypatch: pytest.MonkeyPatch, as_runs: bool) -> None:
    """An append whose copies moved to another broker (the rows known from the copies gone and added:
    forecast_replica_adds; without it, read whole, their sets compared: moved_copies) and one whose copies moved
    between the dirs of their brokers in place (the moved rows known: forecast_replica_moves) both take the state,
    with the answer of the pass over the window."""
    if not as_runs:
        monkeypatch.setattr(replica_adds, "MOST_EDITS", 0)
    steps = 16
    root = tmp_path / "snapshots"
    moving_fleet(root, steps, {"stay": [[0, 2]] * steps, "moves": [[0, 2]] * 10 + [[0, 1]] * 6,
                               "in place": [[0, 2]] * 12 + [[1, 2]] * 4})
    compared = []
    real = forecast_append.moved_copies

    def counted(*args: Any) -> Any:
        compared.append(1)
        return real(*args)

    monkeypatch.setattr(forecast_append, "moved_copies", counted)
    window_by_window(root, 1e6, 7)
    assert both_ways == ["pass", *["state"] * 8]
    # The append of step 10 (moved to another broker) compares the sets only when read whole; at 12 the moved rows
    # are known.
    assert len(compared) == (0 if as_runs else 1)


def test_a_missing_or_damaged_state_costs_a_pass(tmp_path: Path, both_ways: list[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The state file gone, cut short, its rows' file cut short, or the manifest without one (an older driver's):
    that append makes the pass
    over the window and gives the cold forecast (every fit found again: REFIT_AFTER 1), and writes a state the next
    append takes up."""
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=1, brokers=2, disks=2, replicas_per_disk=6,
                                                          days=2, every_hours=4, seed=3), root)
    every = snapshot.list_snapshots(root)
    where = forecast_history.where(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in every[-5:]:
        path.rename(aside / path.name)
    forecast_driver.compute(every[:-5])

    def damage(how: str) -> None:
        manifest = json.loads((where / "manifest.json").read_text())
        state = where / manifest["state"]
        if how == "gone":
            state.unlink()
        elif how == "short":
            state.write_bytes(state.read_bytes()[:100])
        elif how == "rows short":
            rows = where / manifest["state_rows"][1]
            rows.write_bytes(rows.read_bytes()[:-8])
        elif how == "older":
            del manifest["state"]
            (where / "manifest.json").write_text(json.dumps(manifest))

    for i, how in enumerate(("gone", "short", "rows short", "older", "whole")):
        damage(how)
        (aside / every[-5 + i].name).rename(every[-5 + i])
        result = forecast_driver.compute(every[:len(every) - 4 + i])
        assert result.kept == "appended 1"
        cold = forecast.compute_local(result.snapshots)
        pd.testing.assert_frame_equal(result.disks, cold.disks, check_exact=False, rtol=1e-9)
        assert "state" in json.loads((where / "manifest.json").read_text())
    assert both_ways == ["pass", "pass", "pass", "pass", "pass", "state"]


def test_the_copies_file_is_named_again_while_the_copies_are_the_same(tmp_path: Path, both_ways: list[str]) -> None:
    """The state's copies are a file of their own: an append whose copies are the ones kept names it again (not
    written: 160 MB at 20M replicas), one with a new copy writes a new one; an older driver's state, its copies in
    the state file, is taken up and the next write gives them their own file."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {"a": [100 * GB + GB * i for i in range(9)],
                                "b": [100 * GB + 2 * GB * i for i in range(9)],
                                "c": [None] * 7 + [50 * GB, 51 * GB]})
    every = snapshot.list_snapshots(root)
    where = forecast_history.where(root)
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in every[6:]:
        path.rename(aside / path.name)

    def manifest() -> dict:
        return json.loads((where / "manifest.json").read_text())

    def appended(at: int) -> None:
        (aside / every[at].name).rename(every[at])
        result = forecast_driver.compute(every[:at + 1])
        assert result.kept == "appended 1"
        pd.testing.assert_frame_equal(result.disks, forecast.compute_local(result.snapshots).disks,
                                      check_exact=False, rtol=1e-9)

    forecast_driver.compute(every[:6])
    cold = manifest()
    appended(6)  # the same two copies
    same = manifest()
    assert same["copies"] == cold["copies"] and same["state"] != cold["state"]
    # An older driver's state: its copies and its rows' counts in the state file, neither file in the manifest.
    state = forecast_state.load(where / same["state"], same["rows"], len(same["snapshots"]), where / same["copies"],
                                 (where / same["state_rows"][0], where / same["state_rows"][1]),
                                 forecast_held._grid_hours(same["snapshots"]))
    assert state is not None
    rows = {name: getattr(state, name) for name in (*forecast_state.ROW_INTS, *forecast_state.ROW_FLOATS)}
    with open(where / same["state"], "wb") as out:
        np.savez(out, **state.arrays(), **rows, copy_rows=state.copy_rows, copy_disks=state.copy_disks)
    del same["copies"], same["state_rows"]
    (where / "manifest.json").write_text(json.dumps(same))
    appended(7)  # c's copy is new
    moved = manifest()
    assert moved["copies"] not in (cold["copies"], None) and not (where / cold["copies"]).exists()
    # New copies that are the replica map's in its disks' order: its file named for them, not one more written.
    assert moved["copies"] == moved["replica_map"]["map"] and cold["copies"] == cold["replica_map"]["map"]
    arrays = np.load(where / moved["copies"])
    pair = replica_map.copies_of(arrays)
    assert arrays.shape == (3, 3) and pair is not None and pair.shape == (2, 3)
    assert both_ways == ["pass", "state", "state"]
    # A map's file of three rows not in the disks' order, or of another type, holds no copies a state may name.
    unordered = arrays.copy()
    unordered[2, 0] = 0
    assert replica_map.copies_of(unordered) is None and replica_map.copies_of(arrays.astype(np.int64)) is None
    np.testing.assert_array_equal(replica_map.copies_of(np.zeros((5, 4), dtype=np.int32)), np.zeros((2, 4)))


def test_a_history_without_a_state_gains_one_when_already_the_window(tmp_path: Path,
                                                                     both_ways: list[str]) -> None:
    """A history that is already the window but has no state (an older driver's) is written again with one, so
    that the next append needs no pass."""
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=1, brokers=2, disks=2, replicas_per_disk=6,
                                                          days=2, every_hours=4, seed=4), root)
    paths = snapshot.list_snapshots(root)
    forecast_driver.compute(paths)
    where = forecast_history.where(root)
    manifest = json.loads((where / "manifest.json").read_text())
    del manifest["state"]
    (where / "manifest.json").write_text(json.dumps(manifest))
    assert forecast_driver.compute(paths).kept == "kept"
    assert "state" in json.loads((where / "manifest.json").read_text())
    assert forecast_driver.compute(paths).kept == "kept"
    assert both_ways == ["pass", "pass", "state"]


@pytest.mark.parametrize("first, second, same", [
    ([1, 5, 6], [2, 3, 7], False),  # the same sums and sums of squares (what power sums needed the cubes for)
    ([3, 1, 2], [1, 2, 3], True),
    ([4, 4], [4], False),
    ([0, 9], [9, 0], True),
    ([7, 7, 2], [7, 2, 2], False),
])
def test_copies_sets_told_apart_by_their_marks(first: list[int], second: list[int], same: bool) -> None:
    before = (np.zeros(len(first), np.int64), np.array(first))
    now = (np.zeros(len(second), np.int64), np.array(second))
    counts = (audit_columns.group_sums(before[0], 1), audit_columns.group_sums(now[0], 1))
    moved, has = forecast_append.moved_copies(before, now, 1, forecast_append.disk_marks(10), counts)
    assert bool(moved[0]) is not same and bool(has[0])


def test_rows_of_many_copies_on_many_disks_told_apart() -> None:
    """Rows of 8 copies among 40,000 disks (the power sums before were past their exact range there, and the
    append made the pass over the window): each row whose set changed by one copy, or whose copies only came in
    another order, is told for what it is."""
    rng = np.random.default_rng(3)
    rows_count, copies, disks = 2000, 8, 40_000
    before_disks = rng.integers(0, disks, (rows_count, copies))
    now_disks = np.array([rng.permutation(r) for r in before_disks])
    changed = rng.random(rows_count) < 0.5
    now_disks[changed, 0] = (now_disks[changed, 0] + rng.integers(1, disks, int(changed.sum()))) % disks
    rows = np.repeat(np.arange(rows_count), copies)
    order = rng.permutation(len(rows))  # each side's copies in an order of its own
    before = (rows[order], before_disks.ravel()[order])
    now = (rows, now_disks.ravel())
    counts = (audit_columns.group_sums(before[0], rows_count), audit_columns.group_sums(now[0], rows_count))
    moved, has = forecast_append.moved_copies(before, now, rows_count, forecast_append.disk_marks(disks), counts)
    np.testing.assert_array_equal(moved, changed)
    assert has.all()


@pytest.mark.parametrize("step", [7, 1 << 20])
def test_mark_sums_in_steps_are_each_rows_sum(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """mark_sums summed a step of copies at a time are each row's marks summed modulo 2^64, whatever the step."""
    monkeypatch.setattr(audit_columns, "STEP_ROWS", step)
    rng = np.random.default_rng(5)
    rows, disks = rng.integers(0, 40, 500).astype(np.int32), rng.integers(0, 3000, 500).astype(np.int32)
    marks = forecast_append.disk_marks(3000)
    expected = [sum(int(marks[d]) for r, d in zip(rows, disks, strict=True) if r == row) % (1 << 64)
                for row in range(41)]
    assert forecast_append.mark_sums(rows, disks, 41, marks).tolist() == expected
    np.testing.assert_array_equal(marks, forecast_append.disk_marks(3000))  # the same marks at every call


def test_the_appended_forecast_from_the_state_is_a_cold_one_when_every_fit_is_found_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With REFIT_AFTER 1 every partition is refitted at every append: appended from the state, the forecast is the
    cold one's to rounding, its refits run a few batches at a time."""
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=1, brokers=3, disks=2, replicas_per_disk=8,
                                                          days=3, every_hours=3, seed=9), root)
    monkeypatch.setattr(forecast_kept, "REFIT_AFTER", 1)
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 1.0)
    # The refits in batches of 3 rows, two batches at a time (threads): each writes only its own rows.
    monkeypatch.setattr(forecast_kept, "FIT_BATCH", 3)
    monkeypatch.setattr(threads, "workers", lambda: 2)
    # The copies' residuals summed in chunks of 4 copies (add_residuals).
    monkeypatch.setattr(forecast_append, "COPY_CHUNK", 4)
    appended = window_by_window(root, 36.0, len(snapshot.list_snapshots(root)) - 5)
    cold = forecast.compute_local(appended.snapshots, 36.0)
    pd.testing.assert_frame_equal(appended.disks, cold.disks, check_exact=False, rtol=1e-9)


@pytest.mark.parametrize("chunk", [3, 64])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("runs", [False, True])
def test_residuals_summed_in_chunks_are_each_disks_sums(monkeypatch: pytest.MonkeyPatch, chunk: int,
                                                        in_order: bool, runs: bool) -> None:
    """add_residuals in chunks of 3 copies or in one (64), copy by copy or by runs of one disk (the copies in disk
    order or not): each disk's sum of its copies' residuals at each column and the count of those it has, a missing
    one counted out; taken off with sign -1."""
    monkeypatch.setattr(forecast_append, "COPY_CHUNK", chunk)
    rng = np.random.default_rng(5)
    rows, copies, disks, columns = 11, 40, 5, range(2, 5)
    residuals = rng.normal(size=(rows, len(columns)))
    residuals[rng.random(residuals.shape) < 0.2] = np.nan
    at, on = rng.integers(0, rows, copies), rng.integers(0, disks, copies).astype(np.int32)
    if in_order:
        on.sort()
    totals, counts = np.ones((6, disks)), np.ones((6, disks))
    forecast_append.add_residuals(totals, counts, columns, residuals, at, on, -1.0, runs=runs)
    want_totals, want_counts = np.ones((6, disks)), np.ones((6, disks))
    for i, j in enumerate(columns):
        for c in range(copies):
            value = residuals[at[c], i]
            if np.isfinite(value):
                want_totals[j, on[c]] -= value
                want_counts[j, on[c]] -= 1
    np.testing.assert_allclose(totals, want_totals, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(counts, want_counts)


def test_changes_added_once_are_the_old_taken_off_and_the_new_added() -> None:
    """add_changes (the same copies before and after) gives add_residuals' sums of the old residuals taken off and
    the new ones added, to rounding, and the same counts: residuals that came, went or stayed missing."""
    rng = np.random.default_rng(8)
    rows, copies, disks, surv, n = 30, 90, 6, 4, 6
    before, after = rng.normal(size=(rows, surv)), rng.normal(size=(rows, n))
    before[rng.random(before.shape) < 0.2] = np.nan
    after[rng.random(after.shape) < 0.2] = np.nan
    at, on = rng.integers(0, rows, copies), rng.integers(0, disks, copies).astype(np.int32)
    want_totals, want_counts = rng.normal(size=(n, disks)), rng.integers(0, 50, (n, disks)).astype(float)
    totals, counts = want_totals.copy(), want_counts.copy()
    forecast_append.add_residuals(want_totals, want_counts, range(surv), before, at, on, -1.0)
    forecast_append.add_residuals(want_totals, want_counts, range(n), after, at, on, 1.0)
    forecast_append.add_changes(totals, counts, before, after, at, on)
    np.testing.assert_allclose(totals, want_totals, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(counts, want_counts)


def test_the_newest_replicas_rows_from_their_groups_are_the_ones_found_by_name(tmp_path: Path) -> None:
    """The rows an append gives the newest snapshot's replicas (forecast_held._one:
    forecast_partition_sizes.sizes_on_keys, forecast_members.Read.rows) are the rows partition_rows finds by their
    names, a new partition's included; a snapshot with a future copy gives none (members_of then finds them by
    name)."""
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=2, brokers=3, disks=2, replicas_per_disk=10,
                                                          days=1, every_hours=12, seed=2), root)
    paths = snapshot.list_snapshots(root)

    def rewrite(replicas: pd.DataFrame) -> None:
        shutil.rmtree(paths[-1] / "replicas")
        (paths[-1] / "replicas").mkdir()
        replicas.to_parquet(paths[-1] / "replicas" / "part-0.parquet")

    # In an order of their own: the groups' first appearance is not the names' order.
    rewrite(pd.read_parquet(paths[-1] / "replicas").sample(frac=1.0, random_state=3))
    held = forecast_held.update(paths[:-1], keep=False)
    some = len(held.keys) - 3  # three partitions new to the history
    keys, _, _, _, read, _ = forecast_held._appended(held.keys.iloc[:some], forecast_columns.Grid([], some),
                                                       np.full((some, len(forecast_kept.KEPT)), np.nan), paths[-1:])
    assert read is not None and read.rows is not None and len(keys) > len(held.keys) - 3
    found = forecast_partition_sizes.partition_rows(keys, read.frame)
    assert (found >= 0).all()
    np.testing.assert_array_equal(read.rows, found)
    assert forecast_held._one(paths[-1], keys)[2].rows is not None
    replicas = pd.read_parquet(paths[-1] / "replicas")
    replicas.loc[replicas.index[0], "is_future"] = True
    rewrite(replicas)
    assert forecast_held._one(paths[-1], keys)[2].rows is None


@pytest.mark.parametrize(("most", "kind"), [(31, np.uint8), (300, np.uint16), (70_000, np.int32), (-1, np.int32)])
def test_the_rows_counts_are_written_in_the_smallest_type_and_read_back(tmp_path: Path, most: int,
                                                                         kind: type) -> None:
    """save_rows writes the rows' counts in the smallest type that holds them (int32 for anything negative) and
    load reads them back as they were; a state written as int32 (an earlier driver's) is read too."""
    rng = np.random.default_rng(2)
    rows, snapshots = 50, 4
    ints = [rng.integers(0, max(most, 1), rows).astype(np.int32) for _ in forecast_state.ROW_INTS]
    ints[0][7] = most
    floats = [rng.normal(size=rows) for _ in forecast_state.ROW_FLOATS]
    disks = pd.DataFrame({"cluster": ["c"], "broker": [1], "log_dir": ["/d"]})
    state = forecast_state.State(ints[0], ints[1], floats[0], ints[2], floats[1], ints[3], floats[2],
                                  np.zeros((snapshots, 1)), np.zeros((snapshots, 1)), np.zeros(3, np.int32),
                                  np.zeros(3, np.int32), disks)
    files = tmp_path / "ints.npy", tmp_path / "floats.npy"
    forecast_state.save(tmp_path / "state.npz", state)
    forecast_state.save_copies(tmp_path / "copies.npy", state)
    forecast_state.save_rows(*files, state)
    assert np.load(files[0]).dtype == kind
    if kind != np.int32:  # an earlier driver's int32 counts
        np.save(files[0], np.load(files[0]).astype(np.int32))
    back = forecast_state.load(tmp_path / "state.npz", rows, snapshots, tmp_path / "copies.npy", files)
    assert back is not None
    for name, values in zip(("gaps", "resets", "first_count", "last_count"), (ints[0], ints[1], ints[2], ints[3]),
                            strict=True):
        assert np.array_equal(getattr(back, name), values), name
    # A copy's row or disk out of range, either way, is not a state of this history (nor in the state file itself).
    for row, value in ((None, 0), (0, rows), (0, -1), (1, 1), (1, -1)):  # one disk: 1 is past it
        pair = np.zeros((2, 3), dtype=np.int32)
        if row is not None:
            pair[row, 2] = value
        np.save(tmp_path / "copies.npy", pair)
        with open(tmp_path / "whole.npz", "wb") as f:
            np.savez(f, **state.arrays(), **{"copy_rows": pair[0].astype(np.int64), "copy_disks": pair[1],
                                             **{k: getattr(state, k) for k in forecast_state.STATE_KEYS[:7]}})
        taken = (forecast_state.load(tmp_path / "state.npz", rows, snapshots, tmp_path / "copies.npy", files),
                 forecast_state.load(tmp_path / "whole.npz", rows, snapshots))
        assert all((found is None) == (row is not None) for found in taken), (row, value)


def test_fit_from_is_written_as_its_column_of_the_grid_when_it_is_one(tmp_path: Path) -> None:
    """A state that knows its grid's hours writes each row's fit_from as the column it is at (a fifth row of the
    counts, nan as 0) and load gives the same hours back, nan included; without the hours such a state is not read;
    a fit_from that is not a time of the grid is written as hours."""
    rng = np.random.default_rng(3)
    rows, hours = 40, np.array([-72.0, -49.5, -24.25, 0.0])
    counts = [rng.integers(0, 4, rows).astype(np.int32) for _ in forecast_state.ROW_INTS]
    disks = pd.DataFrame({"cluster": ["c"], "broker": [1], "log_dir": ["/d"]})
    files = tmp_path / "ints.npy", tmp_path / "floats.npy"

    def written(fit_from: np.ndarray) -> tuple[int, forecast_state.State | None, forecast_state.State | None]:
        state = forecast_state.State(counts[0], counts[1], rng.normal(size=rows), counts[2], rng.normal(size=rows),
                                      counts[3], fit_from, np.zeros((4, 1)), np.zeros((4, 1)),
                                      np.zeros(2, np.int32), np.zeros(2, np.int32), disks, hours=hours)
        forecast_state.save(tmp_path / "state.npz", state)
        forecast_state.save_copies(tmp_path / "copies.npy", state)
        forecast_state.save_rows(*files, state)
        with_hours = forecast_state.load(tmp_path / "state.npz", rows, 4, tmp_path / "copies.npy", files, hours)
        without = forecast_state.load(tmp_path / "state.npz", rows, 4, tmp_path / "copies.npy", files)
        return len(np.load(files[0])), with_hours, without

    on_grid = hours[rng.integers(0, 4, rows)]
    on_grid[::7] = np.nan
    width, back, without = written(on_grid)
    assert width == 5 and np.load(files[1]).shape == (2, rows) and np.load(files[0]).dtype == np.uint8
    assert back is not None and np.array_equal(back.fit_from, on_grid, equal_nan=True)
    assert np.array_equal(back.first_sum, np.load(files[1])[0]) and without is None
    off_grid = on_grid.copy()
    off_grid[3] = -30.0
    width, back, without = written(off_grid)
    assert width == 4 and back is not None and without is not None
    assert np.array_equal(back.fit_from, off_grid, equal_nan=True)


def test_reused_in_steps_is_reused_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """reused() judged a few rows at a time gives what it gives for every row at once, over rows each reused or
    refitted for its own reason (no fit, too old, drifted, a new point off its line)."""
    rng = np.random.default_rng(11)
    rows, t = 40, np.arange(8.0)
    kept = np.column_stack([rng.choice([np.nan, 1.0], rows, p=[.1, .9]), np.ones(rows), rng.normal(1, .1, rows),
                            rng.normal(10, 1, rows), rng.uniform(.1, 2, rows), rng.integers(0, 34, rows),
                            rng.normal(1, .2, rows), np.ones(rows)])
    newest = rng.normal(12, 2, (rows, 8))
    resistant = kept[:, 6] * rng.choice([1.0, 1.5], rows)
    whole = forecast_kept.reused(kept, 2, t, newest, resistant)
    assert 0 < whole.sum() < rows
    monkeypatch.setattr(forecast_kept, "REUSED_ROWS", 3)
    assert np.array_equal(forecast_kept.reused(kept, 2, t, newest, resistant), whole)


def test_an_error_in_the_disks_sums_fails_the_append_before_the_history_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disks' residual sums of an append are found on a thread of their own while the disks' rows are found:
    an error there fails the forecast, the kept history as it was (its write waits for the sums), and the next
    append forecasts as reading every snapshot does."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {f"t{k}": [100 * GB + (k + 1) * GB * i for i in range(7)] for k in range(3)})
    paths = snapshot.list_snapshots(root)
    cold_then_newest(root)
    before = forecast_columns.manifest(root)
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 1.0)  # the state's way on a fleet this small
    where: list[str] = []

    def failing(*args: object, **kwargs: object) -> None:
        where.append(threading.current_thread().name)
        raise OSError("a column's file went away")

    with monkeypatch.context() as m:
        m.setattr(forecast_append, "add_residuals", failing)
        with pytest.raises(OSError, match="went away"):
            forecast_driver.compute(paths)
    assert where and where[0].startswith("forecast-ahead")  # not the main thread's
    assert forecast_columns.manifest(root) == before
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)


def test_an_append_that_gives_up_on_the_state_leaves_the_kept_fits_as_read(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the append from the state gives way to the pass over the window (too many rows changed), the kept
    fits it hands over are the ones read: no fit refreshed by age in place first (the pass judges each fit's band
    with the sigma it was kept with, then refreshes it itself)."""
    monkeypatch.setattr(forecast_kept, "REFRESH_AFTER", 2)
    monkeypatch.setattr(forecast_append, "MOST_CHANGED", 0.0)
    gave_up: list[bool] = []
    original = forecast_fits.from_state

    def checked(held, t, retention, partition, disk, disks):  # noqa: ANN001, ANN202
        before = np.array(held.kept)
        quick = original(held, t, retention, partition, disk, disks)
        if quick is None:
            gave_up.append(True)
            np.testing.assert_array_equal(np.asarray(held.kept), before)
        return quick

    monkeypatch.setattr(forecast_fits, "from_state", checked)
    root = tmp_path / "snapshots"
    synth_history.write_history(synth_history.GrowthShape(clusters=1, brokers=2, disks=2, replicas_per_disk=6,
                                                          days=2, every_hours=4, seed=3), root)
    window_by_window(root, 24.0, len(snapshot.list_snapshots(root)) - 5)
    assert len(gave_up) >= 3


@pytest.mark.parametrize("outputs_fail", [False, True])
def test_the_outputs_are_written_while_the_history_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      outputs_fail: bool) -> None:
    """The driver hands its answer to `meanwhile` (the command's outputs) while the kept history is still being
    written, and returns once it is: the answer's `kept` final then. Outputs that fail leave the history written
    all the same (the two are independent), and the error is the caller's."""
    root = tmp_path / "snapshots"
    one_partition_a_disk(root, {f"t{k}": [100 * GB + (k + 1) * GB * i for i in range(7)] for k in range(3)})
    paths = cold_then_newest(root)
    before = forecast_columns.manifest(root)
    answered = threading.Event()
    seen: dict[str, object] = {}
    original = forecast_held.keep

    def keep(where: Path, held: forecast_held.Held) -> None:
        seen["answered before the write"] = answered.wait(60)
        original(where, held)

    def meanwhile(result: forecast.ForecastResult) -> None:
        seen["kept then"] = result.kept
        seen["disks"] = len(result.disks)
        answered.set()
        if outputs_fail:
            raise OSError("the out dir is full")

    monkeypatch.setattr(forecast_held, "keep", keep)
    if outputs_fail:
        with pytest.raises(OSError, match="out dir is full"):
            forecast.compute(None, paths, meanwhile=meanwhile, on_driver=True)  # type: ignore[arg-type]
    else:
        result = forecast.compute(None, paths, meanwhile=meanwhile, on_driver=True)  # type: ignore[arg-type]
        assert result.kept == "appended 1"
        same_as_reading_every_snapshot(result)
    assert seen == {"answered before the write": True, "kept then": "", "disks": 3}
    after = forecast_columns.manifest(root)
    assert after is not None and after != before and after["snapshots"][-1] == paths[-1].name
