"""Replica on its own: the append path (one parse and CRC check per append, producer state, the replica lock),
offline replicas, retention paused while a move is attached. A real Log on real files."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mover.errors import KafkaStorageError
from mover.log.replica import Replica
from mover.moves import ReplicaMove
from mover.storage import record_batch
from mover.storage.errors import CorruptRecordError
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.storage.producer_state import OutOfOrderSequenceError
from mover.testing.batches import make_batch, make_batches
from mover.wire import ErrorCode
from throttle.token_bucket import TokenBucket

TP = TopicPartition("r", 0)


@pytest.fixture
def replica(tmp_path: Path) -> Replica:
    r = Replica(TP, Log.open(tmp_path / "d1" / str(TP), TP, LogConfig()), tmp_path / "d1")
    yield r
    if r.log is not None:
        r.log.close()


def test_each_batch_is_crc_checked_once_per_append(replica: Replica, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[int] = []
    real = record_batch.check_crc

    def counting(buf: record_batch.Buffer, header: record_batch.BatchHeader, pos: int) -> None:
        checked.append(pos)
        real(buf, header, pos)

    monkeypatch.setattr(record_batch, "check_crc", counting)
    assert replica.append(make_batches([[b"a"], [b"b", b"c"]])).last_offset == 2
    assert len(checked) == 2, "plain batches: one CRC check each"
    checked.clear()
    info = replica.append(make_batch([b"i"], producer_id=7, producer_epoch=0, base_sequence=0))
    assert info.first_offset == 3
    assert len(checked) == 1, "an idempotent batch too, although the producer state looks at it"


def test_idempotent_retries_and_gaps(replica: Replica) -> None:
    first = make_batch([b"x"], producer_id=9, producer_epoch=0, base_sequence=0)
    assert replica.append(first).first_offset == 0
    assert replica.append(first).first_offset == 0, "a retry is answered with its original offset"
    assert replica.log.log_end_offset == 1, "and not written again"
    with pytest.raises(OutOfOrderSequenceError) as e:
        replica.append(make_batch([b"y"], producer_id=9, producer_epoch=0, base_sequence=5))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_corrupt_batch_is_refused_before_anything_is_written(replica: Replica) -> None:
    bad = bytearray(make_batch([b"v" * 50]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        replica.append(bytes(bad))
    with pytest.raises(CorruptRecordError):
        replica.append(b"")
    assert replica.log.log_end_offset == 0


def test_an_offline_replica_refuses_appends(replica: Replica) -> None:
    replica.offline_reason = "log dir /d1 is offline"
    assert replica.offline
    with pytest.raises(KafkaStorageError, match="offline"):
        replica.append(make_batch([b"v"]))


def test_appends_wait_for_the_replica_lock(replica: Replica) -> None:
    done = threading.Event()

    def append() -> None:
        replica.append(make_batch([b"late"]))
        done.set()

    with replica.lock:  # what the swap's last step holds
        t = threading.Thread(target=append)
        t.start()
        assert not done.wait(0.2)
        assert replica.log.log_end_offset == 0
    t.join(10)
    assert done.is_set() and replica.log.log_end_offset == 1


def test_retention_is_paused_while_a_move_is_attached(replica: Replica, tmp_path: Path) -> None:
    assert not replica.retention_paused
    replica.move = ReplicaMove(replica, tmp_path / "d1", tmp_path / "d2", TokenBucket(None), LogConfig())
    assert replica.retention_paused
    replica.move = None
    assert not replica.retention_paused


def test_try_append_does_only_what_cannot_block(tmp_path: Path) -> None:
    """The event loop's quick path: it appends when nothing would wait, and otherwise does nothing at all (None),
    leaving the append to the thread pool: a held lock, a roll (fsyncs), a producer-state build (reads files)."""
    small = LogConfig(segment_bytes=500)
    r = Replica(TP, Log.open(tmp_path / "d1" / str(TP), TP, small), tmp_path / "d1")
    try:
        assert r.try_append(make_batch([b"a"])) is None, "first append: state not checked (snapshot check, I/O)"
        assert r.append(make_batch([b"a"])).first_offset == 0
        assert r.try_append(make_batch([b"b"])).first_offset == 1
        assert r.log.log_end_offset == 2

        # Another thread holds the lock (a swap's last step): no waiting on the loop.
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with r.lock:
                held.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(10)
        try:
            assert r.try_append(make_batch([b"c"])) is None
        finally:
            release.set()
            t.join()
        assert r.log.log_end_offset == 2

        # A batch that would roll the segment: the roll fsyncs, so not on the loop.
        segments = len(r.log.segments())
        assert r.try_append(make_batch([b"x" * 450])) is None
        assert len(r.log.segments()) == segments and r.log.log_end_offset == 2

        # Idempotent batches before the producer state is built: the build reads files.
        assert r.try_append(make_batch([b"i"], producer_id=3, producer_epoch=0, base_sequence=0)) is None
        assert r.append(make_batch([b"i"], producer_id=3, producer_epoch=0, base_sequence=0)).first_offset == 2
        info = r.try_append(make_batch([b"j"], producer_id=3, producer_epoch=0, base_sequence=1))
        assert info is not None and info.first_offset == 3

        # The same checks as append: a corrupt batch is refused, nothing written.
        bad = bytearray(make_batch([b"z"]))
        bad[-1] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            r.try_append(bytes(bad))
        assert r.log.log_end_offset == 4
        assert not r.lock._is_owned(), "the lock is released on every path"  # type: ignore[attr-defined]
    finally:
        r.log.close()
