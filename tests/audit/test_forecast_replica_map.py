"""The newest snapshot's replicas as found, kept beside the driver's history (mover/audit/forecast/replica_map.py):
the fingerprint says which copies a snapshot holds, not their sizes; an append (or a forecast with nothing new) of
a snapshot of the kept fingerprint reads only the sizes and gives the forecast of reading every snapshot; any other
snapshot (another order, a future copy) is read whole, with the same answer, but for copies moved in place
(test_forecast_replica_moves.py)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mover.audit import columns as audit_columns
from mover.audit import snapshot
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import replica_adds, replica_map
from mover.testing.forecast_history import (
    GB,
    Calls,
    cold_then_newest,
    one_partition_a_disk,
    rewrite,
    same_as_reading_every_snapshot,
)


def _fleet(root: Path, count: int = 8) -> list[Path]:
    """Four partitions growing steadily, a dir each, the same copies in every snapshot."""
    one_partition_a_disk(root, {f"t{k}": [100 * GB + (k + 1) * GB * i for i in range(count)] for k in range(4)})
    return snapshot.list_snapshots(root)


def _rewrite(path: Path, change) -> None:  # noqa: ANN001 (a function of the replicas' frame)
    rewrite(path, "replicas", change)


def _shuffled_fleet(root: Path, on_first: list[str], seed: int) -> list[Path]:
    """_fleet's partitions two a dir (`on_first` on /t0, the others on /t1), every snapshot's replicas listed in one
    order of their own (the same each time: one fingerprint), not the disks'; its history made up to the newest."""
    paths = _fleet(root)

    def two_a_dir_shuffled(r: pd.DataFrame) -> pd.DataFrame:
        return r.assign(log_dir=np.where(r["topic"].isin(on_first), "/t0", "/t1")).sample(frac=1.0,
                                                                                         random_state=seed)

    for path in paths:
        _rewrite(path, two_a_dir_shuffled)
    cold_then_newest(root)
    return paths


def _moved_fleet(root: Path, listed_again: bool = False) -> list[Path]:
    """_fleet with t0's replica moved onto t1's dir in the newest snapshot (other copies than the map's; with
    `listed_again`, its replicas listed in another order too), its history made up to the one before."""
    paths = _fleet(root)
    _rewrite(paths[-1], lambda r: r.assign(log_dir=["/t1", *r["log_dir"].iloc[1:]]).iloc[::-1 if listed_again else 1])
    cold_then_newest(root)
    return paths


def _reads(monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> Calls:
    """forecast_members.read_replicas, counted (or refused)."""
    return Calls(monkeypatch, forecast_members, "read_replicas", refuse)


def test_the_fingerprint_is_which_copies_not_their_sizes(tmp_path: Path) -> None:
    paths = _fleet(tmp_path / "s")
    prints = {replica_map.fingerprint(p) for p in paths}
    assert len(prints) == 1 and None not in prints  # sizes grow at every snapshot: the same copies
    first = prints.pop()
    doubled, moved, shuffled, bare = paths[-4:]
    # A file of the dataset without the .parquet suffix is read with it, so it is hashed with it.
    (doubled / "replicas" / "more").write_bytes(next((doubled / "replicas").iterdir()).read_bytes())
    assert replica_map.fingerprint(doubled) not in (None, first)

    def move(r: pd.DataFrame) -> pd.DataFrame:
        return r.assign(log_dir=["/t1", *r["log_dir"].iloc[1:]])

    _rewrite(moved, move)
    _rewrite(shuffled, lambda r: r.iloc[::-1])
    _rewrite(bare, lambda r: r.drop(columns=["is_future"]))
    assert replica_map.fingerprint(moved) not in (None, first)
    assert replica_map.fingerprint(shuffled) not in (None, first)
    assert replica_map.fingerprint(bare) is None
    assert replica_map.fingerprint(tmp_path / "nowhere") is None
    # Without the log dirs: a copy moved to another dir is the same copies placed alike, another order is not.
    placed = replica_map.fingerprints(paths[0])[1]
    assert placed is not None and replica_map.fingerprints(moved)[1] == placed
    assert replica_map.fingerprints(shuffled)[1] != placed and replica_map.fingerprints(bare) == (None, None)


def test_the_same_copies_appended_read_only_their_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    _fleet(root)
    paths = cold_then_newest(root)
    before = forecast_columns.manifest(root)["replica_map"]
    assert before["snapshot"] == paths[-2].name and before["count"] == 4
    with monkeypatch.context() as m:
        _reads(m, refuse=True)
        appended = forecast_driver.compute(paths)
        # Nothing new: the disks' copies are the newest's, again as the map found them.
        again = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and again.kept == "kept"
    same_as_reading_every_snapshot(appended)
    pd.testing.assert_frame_equal(appended.disks, again.disks)
    after = forecast_columns.manifest(root)["replica_map"]
    # The same copies: the map's files named again, as of the newest snapshot.
    assert after["snapshot"] == paths[-1].name and (after["map"], after["disks"]) == (before["map"], before["disks"])
    kept = replica_map.load(forecast_history.where(root), after, forecast_columns.manifest(root)["rows"])
    assert kept is not None
    # What the map holds is what reading the snapshot whole finds: rows, groups, the disks' names and their types.
    keys = forecast_held.update(paths, keep=False).keys
    on_keys, _, read, found = forecast_held._one(paths[-1], keys)
    assert found is not None and found.fingerprint == kept.fingerprint
    np.testing.assert_array_equal(kept.rows, on_keys.rows)
    np.testing.assert_array_equal(kept.group, read.disks[0])
    pd.testing.assert_frame_equal(kept.disks, read.disks[1])


def test_copies_listed_partition_by_partition_are_put_in_disk_order(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every snapshot's replicas in one order of their own, not the disks' (as synth lists them): the map keeps
    their order by disk, and the append takes the copies in it, with the forecast of reading every snapshot."""
    root = tmp_path / "s"
    paths = _shuffled_fleet(root, ["t0", "t1"], 3)
    data = forecast_columns.manifest(root)
    where = forecast_history.where(root)
    kept = replica_map.load(where, data["replica_map"], data["rows"])
    assert kept is not None and len(kept.by_disk)  # not in the disks' order
    # Kept in the disks' order too, so that an append gathers none of them.
    assert kept.rows_by_disk is not None and kept.group_by_disk is not None
    assert np.array_equal(kept.rows_by_disk, kept.rows[kept.by_disk])
    assert np.array_equal(kept.group_by_disk, kept.group[kept.by_disk])
    with monkeypatch.context() as m:
        _reads(m, refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)


def test_sizes_of_many_row_groups_put_in_the_disks_order(tmp_path: Path) -> None:
    """The newest snapshot's sizes read as the map found them (on the reading thread), of two files of many row
    groups, its copies in an order of their own: the sizes put in the disks' order and each row's median are those
    of the snapshot read whole."""
    root = tmp_path / "s"
    paths = _fleet(root)
    rng = np.random.default_rng(9)

    def many_copies(r: pd.DataFrame) -> pd.DataFrame:  # 3 replicas of 40 partitions of each topic over 4 dirs
        rows = [{**r.iloc[0].to_dict(), "topic": t, "partition": p, "log_dir": f"/t{(p + k) % 4}",
                 "size_bytes": int(rng.integers(0, 1 << 40))}
                for t in ("t0", "t1", "t2", "t3") for p in range(40) for k in range(3)]
        return pd.DataFrame(rows).sample(frac=1.0, random_state=2)

    for path in paths[-2:]:
        frame = many_copies(pd.read_parquet(path / "replicas"))
        shutil.rmtree(path / "replicas")
        (path / "replicas").mkdir()
        frame.to_parquet(path / "replicas" / "part-0.parquet", index=False, row_group_size=7)
        frame.to_parquet(path / "replicas" / "part-1.parquet", index=False, row_group_size=50)
    cold_then_newest(root)
    data = forecast_columns.manifest(root)
    kept = replica_map.load(forecast_history.where(root), data["replica_map"], data["rows"])
    assert kept is not None and len(kept.by_disk)
    whole = pd.read_parquet(paths[-1] / "replicas")["size_bytes"].to_numpy()
    medians = forecast_partition_sizes.group_medians(kept.rows, whole, data["rows"])
    for ordered in (False, True):
        read = forecast_held._read_as_found(paths[-1], data["rows"], kept, True, ordered)
        assert read is not None and read.medians is not None
        np.testing.assert_array_equal(read.medians, medians)
        if ordered:
            assert not len(read.by_disk)
            np.testing.assert_array_equal(read.sizes, whole[kept.by_disk].astype(float))
            np.testing.assert_array_equal(read.rows, kept.rows[kept.by_disk])
            np.testing.assert_array_equal(read.disks[0], kept.group[kept.by_disk])
        else:
            np.testing.assert_array_equal(read.sizes, whole)


def test_copies_on_dirs_not_listed_are_left_out(tmp_path: Path) -> None:
    """The newest snapshot's copies all on dirs its log_dirs do not list (a writer's mistake): they are left out,
    its listed dirs forecast empty, as reading every snapshot does (the driver's disks' rows failed on no disk)."""
    root = tmp_path / "s"
    paths = _fleet(root)

    def elsewhere(r: pd.DataFrame) -> pd.DataFrame:
        return r.assign(log_dir="/not-listed")

    _rewrite(paths[-1], elsewhere)
    cold_then_newest(root)
    appended = forecast_driver.compute(paths)
    same_as_reading_every_snapshot(appended)
    assert (appended.disks["used_bytes"] == 0).all() and len(appended.disks) == 4


def test_a_map_of_before_without_its_disk_order_is_taken_then_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A map of three rows (written before 2026-12-06) whose copies are not in the disks' order: taken up (only the
    sizes read), its disk order found, and written again with five rows; one out of range is not taken."""
    root = tmp_path / "s"
    paths = _shuffled_fleet(root, ["t0", "t2"], 5)
    where = forecast_history.where(root)
    data = forecast_columns.manifest(root)
    entry = data["replica_map"]
    five = np.load(where / entry["map"])
    assert five.shape[0] == 5
    np.save(where / entry["map"], five[:3])  # as a driver of before wrote it
    older = replica_map.load(where, entry, data["rows"])
    assert older is not None and older.files is None and older.rows_by_disk is None
    with monkeypatch.context() as m:
        _reads(m, refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    after = forecast_columns.manifest(root)["replica_map"]
    assert after["map"] != entry["map"] and np.array_equal(np.load(where / after["map"]), five)
    same_as_reading_every_snapshot(appended)
    assert replica_map.load(where, after, data["rows"]) is not None
    disks = len(pd.read_parquet(where / after["disks"]))
    bounds = [data["rows"], disks, five.shape[1], data["rows"], disks]  # rows, groups, order, the two in order
    for row, bound in enumerate(bounds):
        for value in (bound, -1):  # past its bound (a row past the history's), or below 0
            broken = five.copy()
            broken[row, -1] = value
            np.save(where / after["map"], broken)
            assert replica_map.load(where, after, data["rows"]) is None, (row, value)


def test_other_copies_are_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy moved and the replicas listed in another order: read whole (moves in place alone are not:
    test_forecast_replica_moves.py; copies added or gone among the others in order are not either:
    test_forecast_replica_adds.py), its frame made of the names read as codes (replica_adds.frame_of)."""
    root = tmp_path / "s"
    paths = _moved_fleet(root, listed_again=True)
    before = forecast_columns.manifest(root)["replica_map"]
    reads = Calls(monkeypatch, replica_adds, "frame_of")
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and reads.firsts
    monkeypatch.undo()
    same_as_reading_every_snapshot(appended)
    after = forecast_columns.manifest(root)["replica_map"]
    assert after["snapshot"] == paths[-1].name and after["fingerprint"] != before["fingerprint"]
    assert not {before["map"], before["disks"]} & {p.name for p in forecast_history.where(root).iterdir()}


@pytest.mark.parametrize("early_write_fails", [False, True])
def test_a_new_map_is_written_while_the_fits_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       early_write_fails: bool) -> None:
    """The map of a snapshot of other copies is written with the new columns, on their thread, as soon as the
    snapshot is read (forecast_columns.write_columns), not at the history's write after the fits; the manifest
    names that file. An error there leaves the map to the history's write."""
    root = tmp_path / "s"
    paths = _moved_fleet(root)
    original, saved = replica_map.save, []

    def save(arrays: Path, disks: Path, found: replica_map.ReplicaMap) -> None:
        saved.append((threading.current_thread().name[:14], arrays.name))
        if early_write_fails and saved[-1][0] == "forecast-ahead":
            raise OSError("no room")
        original(arrays, disks, found)

    monkeypatch.setattr(replica_map, "save", save)
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    assert [thread for thread, _ in saved] == ["forecast-ahead", *(["forecast-behin"] if early_write_fails else [])]
    assert forecast_columns.manifest(root)["replica_map"]["map"] == saved[-1][1]
    monkeypatch.undo()
    same_as_reading_every_snapshot(appended)


def test_a_snapshot_with_a_future_copy_keeps_no_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    paths = _fleet(root)

    def with_future(r: pd.DataFrame) -> pd.DataFrame:  # t0 being moved onto t1's dir
        return pd.concat([r, r.iloc[:1].assign(log_dir="/t1", is_future=True)], ignore_index=True)

    _rewrite(paths[-2], with_future)
    cold_then_newest(root)
    assert "replica_map" not in forecast_columns.manifest(root)
    reads = _reads(monkeypatch)
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and paths[-1] in reads.firsts
    monkeypatch.undo()
    same_as_reading_every_snapshot(appended)
    assert forecast_columns.manifest(root)["replica_map"]["snapshot"] == paths[-1].name


def test_a_map_that_does_not_read_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    paths = _fleet(root)
    cold_then_newest(root)
    data = forecast_columns.manifest(root)
    where = forecast_history.where(root)
    np.save(where / data["replica_map"]["map"], np.zeros((3, 2), dtype=np.int32))  # another count
    assert replica_map.load(where, data["replica_map"], data["rows"]) is None
    reads = _reads(monkeypatch)
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and paths[-1] in reads.firsts
    monkeypatch.undo()
    same_as_reading_every_snapshot(appended)


def _medians(monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> Calls:
    """forecast_partition_sizes.group_medians (the medians scattered), counted (or refused)."""
    return Calls(monkeypatch, forecast_partition_sizes, "group_medians", refuse)


def test_the_copies_places_by_row_are_kept_with_the_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The map's copies' places by history row are written with it (copies_by_row of its rows); an append of the
    same copies gathers its medians from them (none scattered) and names the same file again, as does an append
    of copies moved in place (test_forecast_replica_moves.py), whose rows and order are the map's."""
    root = tmp_path / "s"
    _fleet(root)
    paths = cold_then_newest(root)
    data = forecast_columns.manifest(root)
    where, before = forecast_history.where(root), data["replica_map"]
    assert isinstance(before.get("by_row"), str) and before["by_row"]
    kept = replica_map.load(where, before, data["rows"])
    assert kept is not None and kept.by_row is not None and kept.by_row_file == before["by_row"]
    np.testing.assert_array_equal(kept.by_row, forecast_partition_sizes.copies_by_row(kept.rows, data["rows"]))
    # A row with a first place is a row with copies (forecast_append.fitted reads them so for the same copies).
    np.testing.assert_array_equal(kept.by_row[0] < len(kept.rows), audit_columns.marked(kept.rows, data["rows"]))
    with monkeypatch.context() as m:
        _medians(m, refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)
    assert forecast_columns.manifest(root)["replica_map"]["by_row"] == before["by_row"]
    assert (where / before["by_row"]).is_file()


def test_places_that_do_not_read_are_found_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A map whose places' file is not whole, of another shape or with a place past its copies is taken without
    them (the medians scattered, the same answer), and they are found and written again; a map of before without
    them, the same."""
    import json

    for damage in ("cut", "shape", "past", "before"):
        root = tmp_path / damage
        _fleet(root)
        paths = cold_then_newest(root)
        data = forecast_columns.manifest(root)
        where, entry = forecast_history.where(root), data["replica_map"]
        path = where / entry["by_row"]
        places = np.load(path)
        if damage == "cut":
            path.write_bytes(path.read_bytes()[:-4])
        elif damage == "shape":
            np.save(path, places[:2])
        elif damage == "past":
            places[1, 0] = entry["count"] + 1
            np.save(path, places)
        else:  # a map of before: no entry
            del entry["by_row"]
            (where / forecast_history.MANIFEST).write_text(json.dumps(data) + "\n")
        kept = replica_map.load(where, entry, data["rows"])
        assert kept is not None and kept.by_row is None and kept.by_row_file is None
        with monkeypatch.context() as m:
            medians = _medians(m)
            appended = forecast_driver.compute(paths)
        assert appended.kept == "appended 1" and medians.firsts, damage
        same_as_reading_every_snapshot(appended)
        after = forecast_columns.manifest(root)
        assert after["replica_map"]["by_row"] not in ("", entry.get("by_row"))
        again = replica_map.load(where, after["replica_map"], after["rows"])
        assert again is not None and again.by_row is not None


def test_no_places_for_a_row_of_more_than_three_copies(tmp_path: Path) -> None:
    """A map one of whose rows has four copies has no places (save_by_row writes none, and says so: ""), and an
    entry that says so is read as none, not looked for again."""
    found = replica_map.ReplicaMap("s", "f", np.array([0, 0, 1, 0, 0], dtype=np.int32),
                                   np.zeros(5, dtype=np.int32), np.zeros(0, dtype=np.intp),
                                   pd.DataFrame({"cluster": ["c"], "broker": [1], "log_dir": ["/d"]}))
    assert not replica_map.save_by_row(tmp_path / "places.npy", found, 2)
    assert not (tmp_path / "places.npy").exists()
    arrays, disks = tmp_path / "map.npy", tmp_path / "disks.parquet"
    replica_map.save(arrays, disks, found)
    found.by_row_file = ""
    entry = found.entry((arrays.name, disks.name))
    assert entry["by_row"] == ""
    kept = replica_map.load(tmp_path, entry, 2)
    assert kept is not None and kept.by_row is None and kept.by_row_file == ""


@pytest.mark.parametrize("seed", range(3))
def test_a_maps_count_per_disk_is_its_copies_count(seed: int) -> None:
    """ReplicaMap.per_disk (searched for in the groups in the disks' order, found or kept): each disk's count of
    copies, a disk of none counted 0, for a map in the disks' order and one that is not."""
    rng = np.random.default_rng(seed)
    disks = pd.DataFrame({"cluster": "c", "broker": 1, "log_dir": [f"/d{g}" for g in range(7)]})
    group = rng.choice([0, 1, 2, 4, 6], 300).astype(np.int32)  # disks 3 and 5: no copy
    rows = rng.integers(0, 100, len(group)).astype(np.int32)
    for groups in (group, np.sort(group)):
        by_disk = forecast_members.by_disk_order(groups, len(disks))
        found = replica_map.ReplicaMap("s", "f", rows, groups, by_disk, disks)
        np.testing.assert_array_equal(found.per_disk(), np.bincount(groups, minlength=len(disks)))
