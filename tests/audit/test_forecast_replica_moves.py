"""A newest snapshot holding the kept map's copies in its order, some moved to other dirs of their brokers
(mover/audit/forecast/replica_moves.py): its append reads only the sizes and the dirs, makes the map a read of the
whole snapshot makes, and gives the forecast of reading every snapshot; whether the map was in the disks' order or
not, the moves patched one at a time or the order found again, a copy moved to a dir no copy was on (of a broker
whose neighbour has such a dir) or out of the last copy's dir."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mover.audit import snapshot, synth_history
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import replica_map, replica_moves
from mover.testing.forecast_history import (
    END,
    GB,
    Calls,
    cold_then_newest,
    rewrite,
    same_as_reading_every_snapshot,
    same_replica_map,
)

DIRS = ("/d0", "/d1", "/d2", "/d3")
# Broker 1's copies on /d0-/d2 (none on /d3), broker 2's on every dir.
COPIES = [(1, f"t{k}", DIRS[k % 3]) for k in range(12)] + [(2, f"u{k}", DIRS[k % 4]) for k in range(8)]
# The newest snapshot's moves: within a dir's run, to a dir of copies, to broker 1's /d3 (no copy of its there, one
# of broker 2's), and every copy of broker 1's /d2 away (none left there).
MOVES = {"t0": "/d1", "t3": "/d3", "t2": "/d1", "t5": "/d0", "t8": "/d1", "t11": "/d0", "u1": "/d0"}


def _split(path: Path, frame: pd.DataFrame) -> None:
    """Snapshot `path`'s replicas written as `frame` in two files of row groups of 3 (each its own dictionaries)."""
    shutil.rmtree(path / "replicas")
    (path / "replicas").mkdir()
    half = len(frame) // 2
    frame.iloc[:half].to_parquet(path / "replicas" / "part-0.parquet", index=False, row_group_size=3)
    frame.iloc[half:].to_parquet(path / "replicas" / "part-1.parquet", index=False, row_group_size=3)


def _moved(frame: pd.DataFrame, moves: dict[str, str] = MOVES) -> pd.DataFrame:
    return frame.assign(log_dir=[moves.get(t, d) for t, d in zip(frame["topic"], frame["log_dir"], strict=True)])


def _fleet(root: Path, shuffled: bool, count: int = 8, split: bool = False) -> list[Path]:
    """COPIES growing steadily over `count` snapshots (listed in the disks' order, or in one order of their own,
    the same each time; with `split`, in two files of many row groups), the newest with MOVES made in place; its
    history made up to the one before."""
    order = (np.random.default_rng(4).permutation(len(COPIES)) if shuffled
             else np.lexsort(([d for *_, d in COPIES], [b for b, _, _ in COPIES])))
    for i in range(count):
        at = END - timedelta(hours=6.0 * (count - 1 - i))
        replicas = pd.DataFrame({"cluster": "c", "broker": [b for b, _, _ in COPIES],
                                 "log_dir": [d for *_, d in COPIES], "topic": [t for _, t, _ in COPIES], "partition": 0,
                                 "size_bytes": [int((10 + k) * GB + (k + 1) * GB * i / 4) for k in range(len(COPIES))],
                                 "offset_lag": 0, "is_future": False}).iloc[order].reset_index(drop=True)
        log_dirs = pd.DataFrame({"cluster": "c", "broker": [b for b in (1, 2) for _ in DIRS],
                                 "log_dir": [d for _ in (1, 2) for d in DIRS], "total_bytes": int(1e13),
                                 "usable_bytes": int(1e13), "error": None})
        partitions = pd.DataFrame({"cluster": "c", "topic": [t for _, t, _ in COPIES], "partition": 0,
                                   "replicas": [np.array([b], dtype="int32") for b, _, _ in COPIES],
                                   "retention_bytes": -1, "retention_ms": -1})
        synth_history._write_snapshot(root / snapshot.snapshot_name(at), at, log_dirs, replicas, partitions)
    paths = snapshot.list_snapshots(root)
    for path in paths:
        frame = pd.read_parquet(path / "replicas")
        frame = _moved(frame) if path == paths[-1] else frame
        if split:
            _split(path, frame)
        elif path == paths[-1]:
            rewrite(path, "replicas", lambda _, frame=frame: frame)
    cold_then_newest(root)
    return paths


def _kept(root: Path) -> tuple[replica_map.ReplicaMap, int]:
    data = forecast_columns.manifest(root)
    kept = replica_map.load(forecast_history.where(root), data["replica_map"], data["rows"])
    assert kept is not None and kept.placed is not None
    return kept, data["rows"]


def _same_map(moved: replica_map.ReplicaMap, whole: replica_map.ReplicaMap) -> None:
    """The map made from the moves is the one a read of the whole snapshot finds (same_replica_map)."""
    same_replica_map(moved, whole)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("patched", [True, False])
@pytest.mark.parametrize("shuffled", [False, True])
def test_copies_moved_in_place_read_only_their_sizes_and_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              shuffled: bool, patched: bool, split: bool) -> None:
    root = tmp_path / "s"
    paths = _fleet(root, shuffled, split=split)
    kept, rows = _kept(root)
    assert bool(len(kept.by_disk)) == shuffled
    if not patched:  # the order by disk found again whole
        monkeypatch.setattr(replica_moves, "PATCHED_MOVES", 0)
    moved = replica_moves.read_as_moved(paths[-1], rows, kept)
    assert moved is not None and moved.found is not None and moved.found.files is None
    keys = forecast_held.update(paths, keep=False).keys
    on_keys, _, _, whole = forecast_held._one(paths[-1], keys)
    assert whole is not None
    _same_map(moved.found, whole)
    # The medians found while the order is patched are the whole read's.
    read = forecast_held._read_as_found(paths[-1], rows, kept, medians=True, ordered=False)
    assert isinstance(read, forecast_members.Read) and read.medians is not None
    np.testing.assert_array_equal(read.medians, on_keys.column[:rows])
    before = forecast_columns.manifest(root)["replica_map"]
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        # The rows whose copies moved are the moved copies' (the state's copies the map's): no sets compared.
        Calls(m, forecast_append, "moved_copies", refuse=True)
        # The medians gathered from the map's places by row: the copies' rows and order are its own.
        Calls(m, forecast_partition_sizes, "group_medians", refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)
    after = forecast_columns.manifest(root)["replica_map"]
    assert after["snapshot"] == paths[-1].name and after["map"] != before["map"]
    assert after["by_row"] == before["by_row"]  # named again, not written
    assert (after["fingerprint"], after["placed"]) == (whole.fingerprint, before["placed"])
    assert forecast_columns.manifest(root)["copies"] == after["map"]  # the state's copies: the map's file
    again, _ = _kept(root)
    _same_map(again, whole)


def test_other_moves_are_not_read_as_moved(tmp_path: Path) -> None:
    """A copy moved to another broker, another order, a map of before (no PLACED fingerprint), a null dir: not
    read as moved (the append reads the snapshot whole)."""
    root = tmp_path / "s"
    paths = _fleet(root, False)
    kept, rows = _kept(root)
    assert replica_moves.read_as_moved(paths[-1], rows, kept) is not None
    assert replica_moves.read_as_moved(paths[-1], rows, replica_map.ReplicaMap(**{**kept.__dict__,
                                                                                 "placed": None})) is None
    assert replica_moves.read_as_moved(paths[-1], 1, kept) is None  # rows past the history's
    newest = paths[-1]
    for change in (lambda r: r.assign(broker=[2, *r["broker"].iloc[1:]]), lambda r: r.iloc[::-1],
                   lambda r: r.assign(log_dir=[None, *r["log_dir"].iloc[1:]])):
        frame = pd.read_parquet(newest / "replicas")
        rewrite(newest, "replicas", change)
        assert replica_moves.read_as_moved(newest, rows, kept) is None
        rewrite(newest, "replicas", lambda _: frame)  # noqa: B023 (called at once)


@pytest.mark.parametrize("seed", range(6))
def test_a_splice_is_a_delete_then_an_insert(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """_spliced of a source (or of 0, 1, 2, ... made a step at a time) is np.insert of np.delete, places out at
    either end, inserts together and at the end included."""
    monkeypatch.setattr(replica_moves, "STEP", 3)
    rng = np.random.default_rng(seed)
    length = int(rng.integers(1, 40))
    source = rng.integers(0, 1000, length).astype(np.int32)
    out = np.sort(rng.choice(length, int(rng.integers(0, length + 1)), replace=False)).astype(np.int64)
    left = length - len(out)
    into = np.sort(rng.integers(0, left + 1, int(rng.integers(0, 8)))).astype(np.int64)
    values = rng.integers(0, 1000, len(into)).astype(np.int32)
    for given in (source, None):
        whole = np.arange(length, dtype=np.int32) if given is None else given
        np.testing.assert_array_equal(replica_moves._spliced(given, length, out, into, values, np.int32),
                                      np.insert(np.delete(whole, out), into, values))


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_a_patched_order_is_the_stable_order_of_the_groups_now(seed: int, ordered: bool) -> None:
    """Many copies over a few disks, some moved (to disks of copies, to new ones, a disk emptied): the map's order
    patched is the stable order of the new groups, and its rows the rows in it."""
    rng = np.random.default_rng(seed)
    copies, disks = 500, 9
    group = np.sort(rng.integers(0, 6, copies)) if ordered else rng.integers(0, 6, copies)
    group = group.astype(np.int32)
    rows = rng.integers(0, 300, copies).astype(np.int32)
    by_disk = forecast_members.by_disk_order(group, disks)
    names = pd.DataFrame({"cluster": "c", "broker": 1, "log_dir": [f"/d{g}" for g in range(disks)]})
    kept = replica_map.ReplicaMap("s", "f", rows, group, by_disk, names)
    at = np.sort(rng.choice(copies, int(rng.integers(1, 60)), replace=False))
    now = group.copy()
    now[at] = rng.integers(0, disks, len(at))
    now[group == 2] = 7  # every copy of disk 2 away
    at = np.flatnonzero(now != group)
    order, in_order = replica_moves._patched_order(kept, at, now, kept.per_disk())
    np.testing.assert_array_equal(order, np.argsort(now, kind="stable"))
    np.testing.assert_array_equal(in_order, rows[order])


def test_moves_say_which_rows_moved_only_of_the_copies_of_their_map(tmp_path: Path) -> None:
    """forecast_append.moved_in_place: the moved copies' rows when the state's copies are the map's (in its disks'
    order, on disks of the same names), else None (the copies' sets are compared)."""
    root = tmp_path / "s"
    paths = _fleet(root, True)
    kept, rows = _kept(root)
    moved = replica_moves.read_as_moved(paths[-1], rows, kept)
    assert moved is not None and moved.found is not None and moved.found.moved_from is not None
    at = moved.found.moved_from[1]
    assert len(at) == len(MOVES)
    in_order, group = kept.ordered_rows()
    disks = kept.disks.astype({"broker": "int64"})
    found = forecast_append.moved_in_place(moved.found.moved_from, np.array(in_order), np.array(group), disks)
    assert found is not None
    np.testing.assert_array_equal(np.sort(found), np.sort(kept.rows[at]))
    swapped = np.array(in_order)
    swapped[[0, 1]] = swapped[[1, 0]]
    renamed = disks.assign(log_dir=disks["log_dir"].where(disks.index > 0, "/elsewhere"))
    assert not np.array_equal(swapped, in_order) and not np.array_equal(group[::-1], group)
    for copies, on, names in ((swapped, group, disks), (in_order, group[::-1], disks), (in_order, group, renamed),
                              (in_order[1:], group[1:], disks)):
        assert forecast_append.moved_in_place(moved.found.moved_from, np.array(copies), np.array(on), names) is None


def test_two_snapshots_of_moves_appended_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history two snapshots behind, both new ones with copies moved in place (the second moving some back and
    others on): each read by its sizes and dirs, the second from the map the first made, with the forecast of
    reading every snapshot; the map kept is the newest's."""
    root = tmp_path / "s"
    paths = _fleet(root, True)
    again = {"t0": "/d0", "t1": "/d2", "u2": "/d0"}  # t0 back where it was, two more moved
    for path, moves in ((paths[-2], MOVES), (paths[-1], again)):
        rewrite(path, "replicas", lambda r, moves=moves: _moved(r, moves))
    placed = {replica_map.fingerprints(p)[1] for p in paths}
    assert len(placed) == 1 and len({replica_map.fingerprints(p)[0] for p in paths[-3:]}) == 3
    *older, one, two = paths
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in (one, two):
        path.rename(aside / path.name)
    assert forecast_driver.compute(older).kept == "rebuilt"
    for path in (one, two):
        (aside / path.name).rename(path)
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 2"
    same_as_reading_every_snapshot(appended)
    kept, _ = _kept(root)
    keys = forecast_held.update(paths, keep=False).keys
    whole = forecast_held._one(paths[-1], keys)[3]
    assert whole is not None and kept.snapshot == paths[-1].name
    _same_map(kept, whole)


def test_a_copy_moved_to_a_dir_not_listed_is_left_out(tmp_path: Path) -> None:
    """A copy moved in place onto a dir its broker's log_dirs do not list (a writer's mistake): the map made of the
    moves is taken, the copies are then read whole where a disk is not listed, and the copy is left out, as reading
    every snapshot does."""
    root = tmp_path / "s"
    paths = _fleet(root, True)
    rewrite(paths[-1], "replicas", lambda r: _moved(r, {"t4": "/not-listed"}))
    kept, rows = _kept(root)
    moved = replica_moves.read_as_moved(paths[-1], rows, kept)
    assert moved is not None and moved.found is not None and "/not-listed" in set(moved.found.disks["log_dir"])
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)


def test_a_map_of_before_gains_its_fingerprint_without_the_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                ) -> None:
    """A kept map of before (no "placed"): the append of a snapshot of its copies keeps that snapshot's fingerprint
    without the dirs with the map (its files named again), so the next snapshot's moves in place are read as such."""
    root = tmp_path / "s"
    paths = _fleet(root, True)
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in paths[-2:]:
        path.rename(aside / path.name)
    assert forecast_driver.compute(paths[:-2]).kept == "rebuilt"
    where = forecast_history.where(root)
    data = forecast_columns.manifest(root)
    placed = data["replica_map"].pop("placed")  # as a driver of before wrote it
    (where / "manifest.json").write_text(json.dumps(data))
    (aside / paths[-2].name).rename(paths[-2])
    assert forecast_driver.compute(paths[:-1]).kept == "appended 1"  # the same copies
    after = forecast_columns.manifest(root)["replica_map"]
    assert after["placed"] == placed and after["map"] == data["replica_map"]["map"]
    (aside / paths[-1].name).rename(paths[-1])
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)


def test_the_same_dirs_written_otherwise_keep_the_maps_order(tmp_path: Path) -> None:
    """The newest snapshot's dirs the kept ones, only encoded otherwise (log_dir without a dictionary): its
    fingerprint differs, the one without the dirs does not, no copy moved, and the map's arrays stand as they are."""
    root = tmp_path / "s"
    paths = _fleet(root, True)
    kept, rows = _kept(root)
    frame = pd.read_parquet(paths[-2] / "replicas")
    shutil.rmtree(paths[-1] / "replicas")
    (paths[-1] / "replicas").mkdir()
    frame.to_parquet(paths[-1] / "replicas" / "part-0.parquet", index=False,
                     use_dictionary=[c for c in frame.columns if c != "log_dir"])
    assert replica_map.fingerprints(paths[-1]) != replica_map.fingerprints(paths[-2])
    assert replica_map.fingerprints(paths[-1])[1] == kept.placed
    moved = replica_moves.read_as_moved(paths[-1], rows, kept)
    assert moved is not None and moved.found is not None and not len(moved.found.moved_from[1])
    assert moved.found.group is kept.group and moved.found.by_disk is kept.by_disk
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)
