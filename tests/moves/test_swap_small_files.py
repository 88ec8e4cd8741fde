"""The swap's promoted copy holds every file of the source's dir, byte for byte, however the source's per-partition
files change around the unlocked listing of the small files (mover/moves/future_log_copy.py, `copy_small_files`):

* a roll whose producer snapshot is written after the listing saw the roll's new active segment (the listing falls
  between the two steps of one idempotent append): the lock must still copy the snapshot;
* a roll after the listing whose snapshot prunes the oldest one the listing copied: the copy must lose it too.

Both happen after the retirement rename, under the source's `-delete` name, the last listing before the lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.log.log_manager import LogManager
from mover.moves.future_log_copy import FutureLogCopy
from mover.storage.names import DirKind, TopicPartition, parse_partition_dir
from mover.storage.producer_state import SNAPSHOTS_TO_KEEP, ProducerStateManager
from mover.testing.batches import make_batch
from mover.testing.log_manager import alter_replica_log_dir
from mover.testing.records import read_records
from mover.testing.wait import wait_for

TP = TopicPartition("t", 0)
SEGMENT_BYTES = 20_000
PRODUCER_ID = 11


def dir_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.mark.parametrize("when", ["snapshot_after_listing", "prune_after_listing"])
def test_the_promoted_copy_equals_the_source_file_for_file(make_config, manager_of, monkeypatch, when: str) -> None:
    # The retired source stays on disk for the comparison.
    cfg = make_config(**{"log.segment.bytes": SEGMENT_BYTES, "log.segment.delete.delay.ms": 600_000})
    m: LogManager = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("t", 1)
    values: list[bytes] = []
    seq = 0

    def append_idempotent(vs: list[bytes]) -> None:
        nonlocal seq
        m.append(TP, make_batch(vs, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=seq))
        seq += len(vs)
        values.extend(vs)

    def roll() -> None:
        log = m.replicas[TP].log
        rolls_from = log.active_segment.base_offset
        # Bigger than what is left of the active segment, never bigger than a segment.
        append_idempotent([f"roll-{seq}-".encode().ljust(SEGMENT_BYTES - 200, b"r")])
        assert log.active_segment.base_offset != rolls_from, "the test's roll did not roll"

    for b in range(100):  # a few segments, each roll with its producer snapshot
        append_idempotent([f"fill-{b}-{i}".encode().ljust(100, b"x") for i in range(5)])
    src = m.replicas[TP].log_dir
    dst = d2 if src == d1 else d1
    assert len(list((src / "t-0").glob("*.snapshot"))) == SNAPSHOTS_TO_KEEP

    real_take_snapshot = ProducerStateManager.take_snapshot
    deferred: list[tuple[ProducerStateManager, object]] = []
    defer = [False]

    def take_snapshot(self, log_) -> None:  # noqa: ANN001
        if defer[0]:
            deferred.append((self, log_))  # written later, as a slow appender would (it holds the replica lock)
        else:
            real_take_snapshot(self, log_)

    original = FutureLogCopy.catch_up_unlocked
    done: list[str] = []

    def catch_up(self, source) -> None:  # noqa: ANN001
        # The last unlocked listing before the lock: the one after the retirement rename.
        if done or parse_partition_dir(source.dir.name).kind is not DirKind.DELETE:
            return original(self, source)
        done.append(source.dir.name)
        if when == "snapshot_after_listing":
            # One idempotent append that rolls, split where a concurrent appender can be split: the roll (its new
            # segment in the Log) before the listing, its producer snapshot after. On this thread: the replica
            # lock is an RLock and the swap does not hold it here.
            defer[0] = True
            roll()
            defer[0] = False
            original(self, source)
            for state, log_ in deferred:
                real_take_snapshot(state, log_)
        else:
            original(self, source)
            roll()  # the listing copied the oldest snapshot, which this roll's snapshot prunes
        return None

    monkeypatch.setattr(ProducerStateManager, "take_snapshot", take_snapshot)
    monkeypatch.setattr(FutureLogCopy, "catch_up_unlocked", catch_up)
    assert alter_replica_log_dir(m, TP, str(dst)) == 0
    wait_for(lambda: m.replicas[TP].move is None, message="the move")
    assert done and m.replicas[TP].log_dir == dst
    if when == "snapshot_after_listing":
        assert deferred, "the roll wrote no producer snapshot"
    (retired,) = [p for p in src.iterdir() if parse_partition_dir(p.name) is not None]
    assert retired.name == done[0]
    source_files, copy_files = dir_files(retired), dir_files(dst / "t-0")
    snapshots = sorted(n for n in source_files if n.endswith(".snapshot"))
    assert len(snapshots) == SNAPSHOTS_TO_KEEP
    assert sorted(n for n in copy_files if n.endswith(".snapshot")) == snapshots
    for name in snapshots:
        assert copy_files[name] == source_files[name], f"{name} differs from the source's"
    # Every file of the source, byte for byte. The copy may also hold the active segment's index files, empty, where
    # the source's new active segment has none yet (indexes are created on first use; the copy's were opened for
    # the locked round's writes, as Kafka always has them).
    extra = {n: b for n, b in copy_files.items() if n not in source_files}
    assert all(not b and n.endswith(("index", "timeindex")) for n, b in extra.items()), sorted(extra)
    assert {n: b for n, b in copy_files.items() if n in source_files} == source_files
    assert [v for _, v in read_records(dst / "t-0")] == values
    # The copy serves the producer on from its state: the next batch in sequence is taken, a retry is not written.
    append_idempotent([b"after"])
    assert [v for _, v in read_records(dst / "t-0")] == values
