"""The swap writes the active segment's index entries appended since its last unlocked copy from memory (not by
copying the files under the replica lock), and the copy keeps them in memory: its index files must still equal a
never-moved copy's, byte for byte, before and after more appends."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.moves.future_log_copy import FutureLogCopy
from mover.storage.log import Log
from mover.storage.names import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TopicPartition
from mover.testing.batches import make_batch
from mover.testing.log_manager import alter_replica_log_dir
from mover.testing.records import read_records
from mover.testing.wait import wait_for


def index_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)}


@pytest.mark.parametrize("roll_in_window", [False, True])
def test_index_entries_appended_just_before_the_lock(make_config, manager_of, tmp_path: Path, monkeypatch,
                                                     roll_in_window: bool) -> None:
    # An index entry for every batch, so every append in the window adds entries the unlocked copy missed.
    cfg = make_config(**{"log.segment.bytes": 40_000, "log.index.interval.bytes": 1})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    shadow = Log.open(tmp_path / "shadow" / "t-0", tp, m.log_config())
    n = 0

    def append(count: int) -> None:
        nonlocal n
        for _ in range(count):
            batch = make_batch([f"v{n}".encode().ljust(200, b".")], timestamp_ms=1_000_000 + n)
            n += 1
            m.append(tp, batch)
            shadow.append(batch)

    append(300)  # a few segments, the active one with entries
    window = 200 if roll_in_window else 20  # 200 x ~270 B crosses a 40 kB segment: a roll in the window
    original = FutureLogCopy.copy_small_files
    appended = []

    def copy_then_append(self, source, *, locked):  # noqa: ANN001
        original(self, source, locked=locked)
        if not locked and not appended:
            # Between the unlocked copy of the small files and the lock: the entries the lock must still write.
            appended.append(True)
            append(window)

    monkeypatch.setattr(FutureLogCopy, "copy_small_files", copy_then_append)
    src = m.replicas[tp].log_dir
    dst = d2 if src == d1 else d1
    assert alter_replica_log_dir(m, tp, str(dst)) == 0
    wait_for(lambda: m.replicas[tp].log_dir == dst and m.replicas[tp].move is None, message="move")
    assert appended
    live = m.replicas[tp].log
    assert index_files(live.dir) == index_files(shadow.dir)
    # The copy appends its next entries where the file ends, from the entries it kept (or reloaded).
    append(30)
    live.flush()
    shadow.flush()
    assert index_files(live.dir) == index_files(shadow.dir)
    assert [v for _, v in read_records(live.dir)] == [v for _, v in read_records(shadow.dir)]
    # A lookup through the copy's index finds every offset.
    for offset in (0, n // 2, n - 1):
        got = live.read(offset, 1)
        assert got.length > 0
        got.close()
    shadow.close()
