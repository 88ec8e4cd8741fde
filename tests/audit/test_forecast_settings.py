"""The partitions' retention settings kept beside the driver's history (mover/audit/forecast/settings.py): the
fingerprint of a snapshot's partitions says which partitions and settings it lists; an append whose newest
snapshot has the kept fingerprint, with the history's keys unchanged, reads no settings and gives the forecast of
reading every snapshot; changed settings, a new partition or a kept file that does not read make it read them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mover.audit import snapshot
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import history as forecast_history
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
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
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
    appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and reads.firsts == [paths[-1]]
    same_as_reading_every_snapshot(appended)
    after = forecast_columns.manifest(root)["retention"]
    assert after["file"] != before["file"]
    assert (after["fingerprint"] != before["fingerprint"]) == (how not in ("file", "keys"))
    kept = np.load(forecast_history.where(root) / after["file"])
    assert kept.shape == (2, after["rows"])
    if how == "settings":  # the new setting is the one kept
        assert 90 * GB in kept[0]
