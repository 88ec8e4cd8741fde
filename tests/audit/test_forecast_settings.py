"""The partitions' retention settings kept beside the driver's history (mover/audit/forecast/settings.py): the
fingerprint of a snapshot's partitions says which partitions and settings it lists; an append whose newest
snapshot has the kept fingerprint, with the history's keys unchanged, reads no settings and gives the forecast of
reading every snapshot; changed settings, a new partition or a kept file that does not read make it read them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mover.audit import snapshot
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import settings as retention
from mover.testing.forecast_history import (
    GB,
    Calls,
    cold_then_newest,
    hand_made_snapshots,
    one_partition_a_disk,
    rewrite,
    same_as_reading_every_snapshot,
)


def _rewrite(path: Path, change) -> None:  # noqa: ANN001 (a function of the partitions' frame)
    rewrite(path, "partitions", change)


def _reads(monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> Calls:
    """forecast_settings.read, counted (or refused)."""
    return Calls(monkeypatch, retention, "read", refuse)


def _head_starts(monkeypatch: pytest.MonkeyPatch) -> list[retention.HeadStart | None]:
    """forecast_settings.head_start's answers, recorded."""
    made: list[retention.HeadStart | None] = []
    real = retention.head_start

    def recorded(*args: object) -> retention.HeadStart | None:
        made.append(real(*args))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(retention, "head_start", recorded)
    return made


def test_the_fingerprint_is_the_partitions_and_their_settings(tmp_path: Path) -> None:
    root = tmp_path / "s"
    hand_made_snapshots(root)
    paths = snapshot.list_snapshots(root)
    prints = [retention.fingerprint(p) for p in paths]
    assert None not in prints
    # `gone` is deleted halfway: the same partitions and settings before, and again after.
    assert len(set(prints[:6])) == 1 and len(set(prints[6:])) == 1 and prints[0] != prints[-1]
    first = prints[-1]
    lists, capped, bare = paths[-3:]
    # The replica lists are not settings: not hashed.
    _rewrite(lists, lambda p: p.assign(replicas=[np.array([9], dtype="int32")] * len(p)))
    assert retention.fingerprint(lists) == first
    _rewrite(capped, lambda p: p.assign(retention_bytes=np.where(p["topic"] == "capped", int(120 * GB), -1)))
    assert retention.fingerprint(capped) not in (None, first)
    # No settings at all (a writer that does not know them): another fingerprint, not none.
    _rewrite(bare, lambda p: p.drop(columns=list(snapshot.PARTITIONS_RETENTION)))
    assert retention.fingerprint(bare) not in (None, first)


def test_an_append_of_the_same_partitions_reads_no_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    hand_made_snapshots(root)
    paths = cold_then_newest(root)
    before = forecast_columns.manifest(root)["retention"]
    _reads(monkeypatch, refuse=True)
    started = _head_starts(monkeypatch)
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and not started  # the same copies: none read ahead either
    same_as_reading_every_snapshot(appended)  # the plateau of `capped` (retention.bytes) included
    after = forecast_columns.manifest(root)["retention"]
    assert after == before  # the same file named again
    assert (forecast_history.where(root) / after["file"]).is_file()
    assert forecast_driver.compute(paths).kept == "kept"  # nothing new: the kept settings too


@pytest.mark.parametrize("how", ["settings", "file", "partition", "keys"])
def test_anything_else_reads_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Changed settings, a kept file that does not read, a partition new in the newest snapshot, settings kept for
    other keys files: read again, with the answer of reading every snapshot."""
    root = tmp_path / "s"
    if how == "partition":
        one_partition_a_disk(root, {"a": [100 * GB + GB * i for i in range(8)],
                                    "b": [None] * 7 + [50 * GB]})
    else:
        hand_made_snapshots(root)
    paths = cold_then_newest(root)
    before = forecast_columns.manifest(root)["retention"]
    if how == "settings":
        _rewrite(paths[-1], lambda p: p.assign(retention_bytes=np.where(p["topic"] == "capped", int(90 * GB), -1)))
    elif how == "file":
        np.save(forecast_history.where(root) / before["file"], np.zeros((2, 1)))  # another row count
    elif how == "keys":  # as if found for keys written since (the same count of rows)
        where = forecast_history.where(root) / forecast_history.MANIFEST
        data = json.loads(where.read_text())
        data["retention"]["keys"] = ["keys-elsewhere.parquet"]
        where.write_text(json.dumps(data))
    reads = _reads(monkeypatch)
    started = _head_starts(monkeypatch)
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and reads.firsts == [paths[-1]]
    # Read ahead, beside the copies found, where those were added (a partition new); else read after them.
    assert [s is not None for s in started] == ([True] if how == "partition" else [])
    same_as_reading_every_snapshot(appended)
    after = forecast_columns.manifest(root)["retention"]
    assert after["file"] != before["file"]
    assert (after["fingerprint"] != before["fingerprint"]) == (how not in ("file", "keys"))
    assert after["fingerprint"] == retention.fingerprint(paths[-1])  # the newest's (found ahead or after)
    kept = np.load(forecast_history.where(root) / after["file"])
    assert kept.shape == (2, after["rows"])
    if how == "settings":  # the new setting is the one kept
        assert 90 * GB in kept[0]


def _partitions(where: Path, rows: list[tuple[str, str, int, float | None, float | None]] | None,
                settings: bool = True) -> Path:
    """A snapshot dir whose partitions dataset lists `rows` (cluster, topic, partition, bytes, ms: None a null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (where / "partitions").mkdir(parents=True)
    rows = rows or []
    columns = {"cluster": pa.array([r[0] for r in rows], pa.string()),
               "topic": pa.array([r[1] for r in rows], pa.string()),
               "partition": pa.array([r[2] for r in rows], pa.int32()),
               "replicas": pa.array([[1] for _ in rows], pa.list_(pa.int32()))}
    if settings:
        columns["retention_bytes"] = pa.array([r[3] for r in rows], pa.int64())
        columns["retention_ms"] = pa.array([r[4] for r in rows], pa.int64())
    pq.write_table(pa.table(columns), where / "partitions" / "part-00000.parquet", row_group_size=7)
    return where


def _keys(rows: list[tuple[str, str, int]]) -> pd.DataFrame:
    return pd.DataFrame({"cluster": pd.Categorical([r[0] for r in rows]),
                         "topic": pd.Categorical([r[1] for r in rows]),
                         "partition": np.array([r[2] for r in rows], dtype=np.int32)})


def _expected(listed: list[tuple[str, str, int, float | None, float | None]],
              keys: list[tuple[str, str, int]]) -> tuple[np.ndarray, np.ndarray]:
    by = {(c, t, p): (b, m) for c, t, p, b, m in listed}
    got = [by.get(k, (None, None)) for k in keys]
    return tuple(np.array([np.nan if v[j] is None else v[j] for v in got], dtype=float) for j in (0, 1))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("flaw", [None, "gap", "far", "twice"])
def test_settings_laid_out_by_topic_are_each_partitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       seed: int, flaw: str | None) -> None:
    """Topics of 1-6 partitions listed in any order, some settings null, keys of partitions and topics the snapshot
    lacks, a topic's numbers with a gap: each key's settings by the topics' slots (no partition looked up among the
    keys) are its own; with numbers far apart or a partition listed twice, they are looked up by partition_rows,
    with the same answer.
    A head start on the first keys gives the same for the keys added after it."""
    rng = np.random.default_rng(seed)
    listed = []
    for c in ("c1", "c2"):
        for t in range(5):
            setting = (float(rng.integers(1, 9)) * GB if rng.random() < 0.5 else -1.0,
                       None if rng.random() < 0.3 else float(rng.integers(1, 9) * 3_600_000))
            # Kafka's are a topic's; a snapshot's are each partition's: some differ within a topic.
            apart = rng.random() < 0.5
            listed += [(c, f"t{t}", p, setting[0] + (p * GB if apart else 0), setting[1])
                       for p in range(int(rng.integers(1, 7)))]
    if flaw == "gap":  # a topic's partitions 0 .. n-1 and 9: a place for each number up to it
        listed.append(("c1", "t0", 9, 5.0, None))
    elif flaw == "far":  # numbers far apart: past SPARSE places a partition
        listed.append(("c1", "t0", 10_000, 5.0, None))
    elif flaw == "twice":  # a partition listed twice (alike: any lookup's answer is the same)
        listed.append(listed[3])
    order = rng.permutation(len(listed))
    listed = [listed[i] for i in order]
    keys = list(dict.fromkeys((c, t, p) for c, t, p, *_ in listed if rng.random() < 0.8))  # a history's: once each
    keys += [("c1", "t0", 7), ("c2", "gone", 0), ("c9", "t1", 0), ("c1", "t1", 6)]
    keys = [keys[i] for i in rng.permutation(len(keys))]
    latest = _partitions(tmp_path / "snap", listed)
    monkeypatch.setattr(retention, "STEP", 4 + seed)  # the keys looked up a few at a time
    table = retention.read_partitions(latest)
    assert (retention.slotted(table) is None) == (flaw in ("far", "twice"))
    lookups = Calls(monkeypatch, forecast_partition_sizes, "partition_rows")
    want = _expected(listed, keys)
    for got in (retention.read(latest, _keys(keys)),
                retention.read(latest, _keys(keys), retention.head_start(latest, _keys(keys[:5])))):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert bool(lookups.firsts) == (flaw in ("far", "twice"))


def test_partitions_without_settings_are_not_looked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partitions dataset with no settings column (a writer that has none): every key's settings nan, the
    partitions not read."""
    latest = _partitions(tmp_path / "snap", [("c", "t", 0, None, None)], settings=False)
    keys = _keys([("c", "t", 0), ("c", "u", 1)])
    Calls(monkeypatch, retention, "read_partitions", refuse=True)
    for started in (None, retention.head_start(latest, keys.iloc[:1])):
        got = retention.read(latest, keys, started)
        assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and len(got[0]) == 2


def test_no_head_start_for_the_kept_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies added with the partitions as they were (a replica reassigned to another broker): the kept settings'
    fingerprint, so none read ahead; another fingerprint, read."""
    latest = _partitions(tmp_path / "snap", [("c", "t", 0, 5.0, None), ("c", "t", 1, 5.0, None)])
    keys = _keys([("c", "t", 0), ("c", "t", 1)])
    with monkeypatch.context() as m:
        Calls(m, retention, "read_partitions", refuse=True)
        assert retention.head_start(latest, keys, {"fingerprint": retention.fingerprint(latest)}) is None
    started = retention.head_start(latest, keys, {"fingerprint": "another"})
    assert started is not None and started.found is not None
    np.testing.assert_array_equal(started.found[0], [5.0, 5.0])
