"""ProducerStateManager on a real Log: building outside the lock, snapshots in Kafka's format, the replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.storage.log import Log, LogConfig
from mover.storage.names import SNAPSHOT_SUFFIX, TopicPartition, segment_file_name
from mover.storage.producer_state import (
    OutOfOrderSequenceError,
    ProducerStateManager,
    list_snapshots,
    read_snapshot,
)
from mover.testing.batches import make_batch

TP = TopicPartition("ps", 0)


def open_log(tmp_path: Path, **cfg: int) -> Log:
    return Log.open(tmp_path / "ps-0", TP, LogConfig(**cfg))


def test_prepared_state_is_completed_under_the_lock(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = ProducerStateManager(TP)
    for seq in range(10):
        first.append(log, make_batch([b"v"], producer_id=5, producer_epoch=0, base_sequence=seq))
    # A fresh manager (a restart): prepared from the log as it is now...
    state = ProducerStateManager(TP)
    state.prepare(log)
    # ...then more batches arrive before the first locked append (another producer, plain appends).
    first.append(log, make_batch([b"w"], producer_id=6, producer_epoch=0, base_sequence=0))
    log.append(make_batch([b"plain"]))
    assert state.append(log, make_batch([b"v"], producer_id=5, producer_epoch=0,
                                        base_sequence=9)).first_offset == 9  # duplicate
    assert state.append(log, make_batch([b"w"], producer_id=6, producer_epoch=0,
                                        base_sequence=0)).first_offset == 10  # seen in the replay
    with pytest.raises(OutOfOrderSequenceError):
        state.append(log, make_batch([b"w"], producer_id=6, producer_epoch=0, base_sequence=2))
    assert state.append(log, make_batch([b"w2"], producer_id=6, producer_epoch=0, base_sequence=1)).first_offset == 12
    assert log.log_end_offset == 13


def test_snapshots_on_roll_are_kafkas_format_and_bounded(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2048)
    state = ProducerStateManager(TP)
    for seq in range(200):
        state.append(log, make_batch([b"x" * 50], producer_id=9, producer_epoch=3, base_sequence=seq))
    snaps = sorted(list_snapshots(log.dir))
    assert 1 <= len(snaps) <= 2
    offset, path = snaps[-1]
    assert path.name == segment_file_name(offset, SNAPSHOT_SUFFIX)
    (entry,) = read_snapshot(path)
    # The snapshot holds the state as of its offset: the producer's last batch before it.
    assert (entry.producer_id, entry.epoch) == (9, 3)
    assert entry.batches[-1].last_offset == offset - 1 and entry.batches[-1].last_seq == offset - 1
    # A restart builds from it, then walks only the tail.
    again = ProducerStateManager(TP)
    assert again.append(log, make_batch([b"x" * 50], producer_id=9, producer_epoch=3,
                                        base_sequence=199)).first_offset == 199
    assert again.append(log, make_batch([b"x" * 50], producer_id=9, producer_epoch=3,
                                        base_sequence=200)).first_offset == 200


def test_a_torn_snapshot_is_ignored(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    state = ProducerStateManager(TP)
    for seq in range(3):
        state.append(log, make_batch([b"v"], producer_id=1, producer_epoch=0, base_sequence=seq))
    (log.dir / segment_file_name(2, SNAPSHOT_SUFFIX)).write_bytes(b"\x00\x01garbage")
    again = ProducerStateManager(TP)
    # The walk from the log start still finds every batch.
    assert again.append(log, make_batch([b"v"], producer_id=1, producer_epoch=0, base_sequence=0)).first_offset == 0
    assert again.append(log, make_batch([b"v"], producer_id=1, producer_epoch=0, base_sequence=3)).first_offset == 3
