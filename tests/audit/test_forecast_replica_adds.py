"""A newest snapshot holding the kept map's copies in its order with some added or gone
(mover/audit/forecast/replica_adds.py): partitions created (their copies among the others' and past the last),
a replica added to a partition, a topic deleted, every copy of a dir gone, a copy on a dir no copy was on. Its
append looks up only the copies added, makes the map a read of the whole snapshot makes, and gives the forecast of
reading every snapshot; whether the map was in the disks' order or not, in one file or many row groups."""

from __future__ import annotations

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
from mover.audit.forecast import replica_adds, replica_map
from mover.testing.forecast_history import (
    END,
    GB,
    Calls,
    checked_both_ways,
    cold_then_newest,
    same_as_reading_every_snapshot,
    same_replica_map,
)

DIRS = ("/d0", "/d1", "/d2", "/d3")
# Broker 1's copies on /d0-/d2 (none on /d3), broker 2's on every dir; t0-t3 with a second replica on broker 2.
COPIES = ([(1, f"t{k}", DIRS[k % 3]) for k in range(12)] + [(2, f"u{k}", DIRS[k % 4]) for k in range(8)]
          + [(2, f"t{k}", "/d3") for k in range(4)])
# The newest snapshot's copies added, each before the copy of the name given (None: past the last): partitions
# created among the others and at the end, a replica of t5 added on broker 2, a copy on broker 1's /d3 (no copy
# of broker 1's there before).
ADDED = [((1, "n0", "/d1"), "t2"), ((2, "n0", "/d2"), "t2"), ((1, "n1", "/d3"), "u3"), ((2, "t5", "/d0"), "u5"),
         ((1, "n2", "/d0"), None), ((2, "n3", "/d1"), None)]
# Its copies gone: topic t7 deleted, broker 2's only copy on /d2 of u (u2, u6) moved off the broker, and t1's second
# replica.
GONE = {(1, "t7"), (2, "u2"), (2, "u6"), (2, "t1")}


def _listed(copies: list[tuple[int, str, str]], order: np.ndarray | None) -> list[tuple[int, str, str]]:
    return copies if order is None else [copies[k] for k in order]


def _changed(copies: list[tuple[int, str, str]], added: bool, gone: bool, at_end: bool = False,
             ) -> list[tuple[int, str, str]]:
    """`copies` (in their order) with ADDED put in (`at_end`: only those past the last) and GONE left out."""
    out: list[tuple[int, str, str]] = []
    seen: set[str] = set()
    for copy in copies:
        if added and not at_end and copy[1] not in seen:  # before the first copy of that topic
            out += [new for new, before in ADDED if before == copy[1]]
        seen.add(copy[1])
        if not (gone and (copy[0], copy[1]) in GONE):
            out.append(copy)
    return out + ([new for new, before in ADDED if before is None] if added else [])


def _fleet(root: Path, shuffled: bool, added: bool, gone: bool, split: bool = False, count: int = 8,
           noise: bool = False, at_end: bool = False, more: tuple[tuple[int, str, str], ...] = (),
           early: tuple[tuple[int, str, str], ...] = ()) -> list[Path]:
    """COPIES and `more` growing steadily over `count` snapshots (listed in the disks' order, or in one order of
    their own, the same each time; with `split`, in two files of row groups of 3; with `noise`, off their lines),
    the newest with ADDED (`at_end`: only those past the last) and GONE, `early` copies in all but the last two
    (a partition of the history with no copy in the kept map's snapshot); its history made up to the one before."""
    copies_now = [*COPIES, *more]
    order = (np.random.default_rng(4).permutation(len(copies_now)) if shuffled
             else np.lexsort(([d for *_, d in copies_now], [b for b, _, _ in copies_now])))
    listed = _listed(copies_now, order)
    brokers = sorted({b for b, _, _ in copies_now})
    size = {(b, t): (10 + k) * GB for k, (b, t, _) in enumerate(copies_now + [c for c, _ in ADDED] + list(early))}
    size[2, "t5"] = size[1, "t5"]  # a replica added holds the partition's data: its fit carried, only its copies new
    for i in range(count):
        at = END - timedelta(hours=6.0 * (count - 1 - i))
        copies = _changed(listed, added, gone, at_end) if i == count - 1 else listed
        copies = copies + list(early) if i < count - 2 else copies
        replicas = pd.DataFrame({"cluster": "c", "broker": [b for b, _, _ in copies],
                                 "log_dir": [d for *_, d in copies], "topic": [t for _, t, _ in copies],
                                 "partition": 0,
                                 # Steady growth, with `noise` each partition's fit has residuals, which its
                                 # disks' rate errors sum.
                                 "size_bytes": [int(size[b, t] * (1 + i / 40)
                                                    + (((sum(map(ord, t)) + 7 * i) % 13) * GB / 8 if noise else 0))
                                                for b, t, _ in copies],
                                 "offset_lag": 0, "is_future": False})
        log_dirs = pd.DataFrame({"cluster": "c", "broker": [b for b in brokers for _ in DIRS],
                                 "log_dir": [d for _ in brokers for d in DIRS], "total_bytes": int(1e13),
                                 "usable_bytes": int(1e13), "error": None})
        topics = sorted({t for _, t, _ in copies})
        partitions = pd.DataFrame({"cluster": "c", "topic": topics, "partition": 0,
                                   "replicas": [np.array(sorted({b for b, t, _ in copies if t == topic}),
                                                         dtype="int32") for topic in topics],
                                   "retention_bytes": -1, "retention_ms": -1})
        path = root / snapshot.snapshot_name(at)
        synth_history._write_snapshot(path, at, log_dirs, replicas, partitions)
        if split:
            shutil.rmtree(path / "replicas")
            (path / "replicas").mkdir()
            half = len(replicas) // 2
            for k, part in enumerate((replicas.iloc[:half], replicas.iloc[half:])):
                part.to_parquet(path / "replicas" / f"part-{k}.parquet", index=False, row_group_size=3)
    return cold_then_newest(root)


def _kept(root: Path) -> tuple[replica_map.ReplicaMap, int]:
    data = forecast_columns.manifest(root)
    kept = replica_map.load(forecast_history.where(root), data["replica_map"], data["rows"])
    assert kept is not None and kept.by_row is not None
    return kept, data["rows"]


def _same_map(found: replica_map.ReplicaMap, whole: replica_map.ReplicaMap, count: int) -> None:
    """The map made from the runs is the one a read of the whole snapshot finds (same_replica_map), its places by
    row copies_by_row's."""
    same_replica_map(found, whole)
    places = forecast_partition_sizes.copies_by_row(found.rows, count)
    if places is None:  # a row of more than three copies: none
        assert found.by_row is None
    else:
        assert found.by_row is not None
        np.testing.assert_array_equal(found.by_row, places)


@pytest.mark.parametrize(("split", "noise"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize(("added", "gone"), [(True, False), (False, True), (True, True)])
def test_copies_added_or_gone_are_looked_up_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffled: bool,
                                                  split: bool, noise: bool, added: bool, gone: bool) -> None:
    """The map found from the runs is a whole read's; the append gives the forecast of reading every snapshot (on
    lines) and the one of the same append reading the snapshot whole (off them: the kept fits carried)."""
    root = tmp_path / "s"
    paths = _fleet(root, shuffled, added, gone, split, noise=noise)
    kept, rows = _kept(root)
    if split:
        monkeypatch.setattr(replica_adds, "PACK_STEP", 3)  # the history's rows packed a few at a time
    prints = replica_map.fingerprints(paths[-1])
    assert prints[0] != kept.fingerprint and prints[1] != kept.placed  # neither the same copies nor moved in place
    codes = replica_adds.read_codes(paths[-1], prints)
    assert codes is not None
    keys = forecast_held.update(paths, keep=False).keys
    found = replica_adds.as_read(codes, kept, keys[:rows].reset_index(drop=True))
    assert found is not None and found.read.found is not None and found.read.found.files is None
    on_keys, _, _, whole = forecast_held._one(paths[-1], keys[:rows].reset_index(drop=True))
    assert whole is not None
    pd.testing.assert_frame_equal(found.new.astype(object), on_keys.new.astype(object))
    assert len(found.new) == (4 if added else 0)  # n0-n3, n0 of two copies
    _same_map(found.read.found, whole, rows + len(found.new))
    np.testing.assert_array_equal(found.read.medians, on_keys.column)
    # The read is in the disks' order: members_of gathers nothing.
    assert not len(found.read.by_disk)
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        # The rows whose copies changed are those of the copies added and gone (the state's copies the map's).
        Calls(m, forecast_append, "moved_copies", refuse=True)
        Calls(m, forecast_partition_sizes, "group_medians", refuse=True)
        # The state's fits, residual sums and state those of the pass over the window (off their lines, every
        # row's residuals count).
        taken = checked_both_ways(m)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and taken[-1] == "state"
    after = forecast_columns.manifest(root)["replica_map"]
    assert after["snapshot"] == paths[-1].name and after["fingerprint"] == prints[0]
    again, count = _kept(root)
    _same_map(again, whole, count)
    if not noise:
        same_as_reading_every_snapshot(appended)
        return
    cold_then_newest(root)
    with monkeypatch.context() as m:
        m.setattr(replica_adds, "MOST_EDITS", 0)
        # Read whole: its frame made of the names read as codes (frame_of), not read again.
        reads = Calls(m, replica_adds, "frame_of")
        Calls(m, forecast_members, "read_replicas", refuse=True)
        read_whole = forecast_driver.compute(paths)
        assert reads.firsts and read_whole.kept == "appended 1"
    pd.testing.assert_frame_equal(appended.disks, read_whole.disks, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(appended.history, read_whole.history)


def test_sizes_in_the_disks_order(tmp_path: Path) -> None:
    """The read's sizes are the snapshot's taken in the disks' order of its map."""
    root = tmp_path / "s"
    paths = _fleet(root, True, True, True)
    kept, rows = _kept(root)
    codes = replica_adds.read_codes(paths[-1], replica_map.fingerprints(paths[-1]))
    assert codes is not None
    keys = forecast_held.update(paths, keep=False).keys[:rows].reset_index(drop=True)
    found = replica_adds.as_read(codes, kept, keys)
    assert found is not None and found.read.found is not None
    sizes = pd.read_parquet(paths[-1] / "replicas")["size_bytes"].to_numpy(float)
    np.testing.assert_array_equal(found.read.sizes, sizes[found.read.found.by_disk])


def test_too_many_changes_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MOST_EDITS places where the lists differ, or MOST_ADDED copies added, the snapshot is read whole (and
    the answer is the same); a future copy or a null name is not read as codes."""
    root = tmp_path / "s"
    paths = _fleet(root, True, True, True)
    for name in ("MOST_EDITS", "MOST_ADDED"):
        with monkeypatch.context() as m:
            m.setattr(replica_adds, name, 0)
            reads = Calls(m, replica_adds, "frame_of")
            appended = forecast_driver.compute(paths)
            assert reads.firsts  # read whole, from the names read as codes
        assert appended.kept == "appended 1"
        same_as_reading_every_snapshot(appended)
        cold_then_newest(root)
    prints = replica_map.fingerprints(paths[-1])
    frame = pd.read_parquet(paths[-1] / "replicas")
    for change in (lambda r: r.assign(is_future=[True, *r["is_future"].iloc[1:]]),
                   lambda r: r.assign(topic=[None, *r["topic"].iloc[1:]])):
        shutil.rmtree(paths[-1] / "replicas")
        (paths[-1] / "replicas").mkdir()
        change(frame).to_parquet(paths[-1] / "replicas" / "part-0.parquet", index=False)  # noqa: B023
        assert replica_adds.read_codes(paths[-1], prints) is None


@pytest.mark.parametrize("seed", range(8))
def test_runs_pair_each_copy_with_its_own(seed: int) -> None:
    """_runs finds, for lists of unique copies with copies added and gone at random places, runs that pair only
    equal copies, and every copy of both lists that is in the other."""
    rng = np.random.default_rng(seed)
    old = rng.permutation(5000)
    keep = rng.random(len(old)) > 0.02
    new = list(old[keep])
    for _ in range(int(rng.integers(1, 60))):
        new.insert(int(rng.integers(0, len(new) + 1)), int(rng.integers(5000, 6000)))
    first = np.sort(np.unique(np.array(new, dtype=np.int64), return_index=True)[1])
    new_key = np.array(new, dtype=np.int64)[first]  # each copy once, where it first comes
    codes = replica_adds.Codes(Path("x"), ("a", "b"), new_key, np.zeros(len(new_key), dtype=np.int64),
                               np.zeros(len(new_key), dtype=np.int64), None, {}, (1, 0, 1))
    kept = replica_map.ReplicaMap("x", "a", np.arange(len(old), dtype=np.int32), np.zeros(len(old), dtype=np.int32),
                                  np.zeros(0, dtype=np.intp), pd.DataFrame())
    runs = replica_adds._runs(codes, kept, old.astype(np.int64), np.zeros(1, dtype=np.int64))
    assert runs is not None
    paired = set()
    for i, j, n in runs:
        np.testing.assert_array_equal(new_key[i:i + n], old[j:j + n])
        paired |= set(old[j:j + n].tolist())
    assert paired == set(old.tolist()) & set(new_key.tolist())


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize(("at_end", "more"), [(True, ()), (False, ((3, "t0", "/d0"), (4, "t0", "/d1")))])
def test_copies_added_past_the_last_or_a_row_of_four(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     shuffled: bool, at_end: bool,
                                                     more: tuple[tuple[int, str, str], ...]) -> None:
    """Copies added only past the last of the map's (every copy of the map keeps its place), and a map with a row
    of four copies (no places by row: the medians scattered), each with a partition of the history that has no copy
    in the kept map's snapshot (its places none): the same map as a whole read, the same forecast."""
    root = tmp_path / "s"
    paths = _fleet(root, shuffled, True, not at_end, at_end=at_end, more=more, early=((1, "e0", "/d0"),))
    data = forecast_columns.manifest(root)
    kept = replica_map.load(forecast_history.where(root), data["replica_map"], data["rows"])
    assert kept is not None and (kept.by_row is None) == bool(more)
    rows = data["rows"]
    codes = replica_adds.read_codes(paths[-1], replica_map.fingerprints(paths[-1]))
    assert codes is not None
    keys = forecast_held.update(paths, keep=False).keys[:rows].reset_index(drop=True)
    found = replica_adds.as_read(codes, kept, keys)
    assert found is not None and found.read.found is not None
    on_keys, _, _, whole = forecast_held._one(paths[-1], keys)
    assert whole is not None
    _same_map(found.read.found, whole, rows + len(found.new))
    np.testing.assert_array_equal(found.read.medians, on_keys.column)
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        Calls(m, forecast_append, "moved_copies", refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    same_as_reading_every_snapshot(appended)


def test_runs_of_copies_listed_in_another_order_stop_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies listed in another order are most of them out of place: _runs gives up once MOST_ADDED copies were
    passed over (the snapshot is then read whole), after a few searches, not MOST_EDITS of them."""
    monkeypatch.setattr(replica_adds, "MOST_ADDED", 500)
    old = np.arange(200_000, dtype=np.int64)
    new_key = np.random.default_rng(1).permutation(old)
    codes = replica_adds.Codes(Path("x"), ("a", "b"), new_key, np.zeros(len(new_key), dtype=np.int64),
                               np.zeros(len(new_key), dtype=np.int64), None, {}, (1, 0, 1))
    kept = replica_map.ReplicaMap("x", "a", np.arange(len(old), dtype=np.int32), np.zeros(len(old), dtype=np.int32),
                                  np.zeros(0, dtype=np.intp), pd.DataFrame())
    searched = Calls(monkeypatch, replica_adds, "_met")
    assert replica_adds._runs(codes, kept, old, np.zeros(1, dtype=np.int64)) is None
    assert len(searched.firsts) < 50


@pytest.mark.parametrize("split", [False, True])
def test_the_frame_of_the_codes_is_the_one_read(tmp_path: Path, split: bool) -> None:
    """Where the runs do not apply, the frame made of what read_codes read is read_replicas' own: the same columns,
    dtypes, categories and codes."""
    root = tmp_path / "s"
    paths = _fleet(root, True, True, True, split)
    codes = replica_adds.read_codes(paths[-1], replica_map.fingerprints(paths[-1]))
    assert codes is not None
    pd.testing.assert_frame_equal(replica_adds.frame_of(codes), forecast_members.read_replicas(paths[-1]))
