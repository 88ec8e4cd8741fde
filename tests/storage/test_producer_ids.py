"""Producer ids already in the logs: the log layer reports the highest one it loaded, and the allocator starts above
it (issue 14: on a Kafka broker's dirs moverd handed out id 0, which the logs held, and the producer's first batch
was refused with OUT_OF_ORDER_SEQUENCE_NUMBER)."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mover.api.init_producer_id import FIRST_PRODUCER_ID, PRODUCER_ID_BLOCK_FILE, ProducerIdManager
from mover.config.broker import BrokerConfig
from mover.errors import ResourceLimitError
from mover.log.log_manager import LogManager
from mover.storage.log import Log, LogConfig
from mover.storage.names import SNAPSHOT_SUFFIX, TopicPartition
from mover.storage.producer_state import ProducerStateManager, highest_producer_id, list_snapshots
from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient, init_producer_id, produce

TP = TopicPartition("ids", 0)
SMALL = LogConfig(segment_bytes=1024)


def idempotent(log: Log, state: ProducerStateManager, pid: int, n: int, *, first_seq: int = 0) -> None:
    """n batches of producer `pid` (epoch 0) through the producer state, as a broker appends them: a roll writes a
    snapshot, as Kafka's does."""
    for seq in range(first_seq, first_seq + n):
        state.append(log, make_batch([b"x" * 100], producer_id=pid, producer_epoch=0, base_sequence=seq))


def plain(log: Log, n: int) -> None:
    for _ in range(n):
        log.append(make_batch([b"p" * 100]))


def reopen(log: Log) -> Log:
    log.flush()
    log.close()
    return Log.open(log.dir, log.tp, log.config, recovery_point=log.recovery_point)


def test_an_empty_or_plain_log_holds_no_producer_id(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "ids-0", TP, SMALL)
    assert highest_producer_id(log) == -1
    plain(log, 30)
    assert highest_producer_id(reopen(log)) == -1


def test_an_id_in_the_last_segment_is_seen_by_the_open_walk(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "ids-0", TP, SMALL)
    plain(log, 20)
    log.append(make_batch([b"x"], producer_id=41, producer_epoch=0, base_sequence=0))  # no state: no snapshot
    log = reopen(log)
    assert log.max_producer_id == 41 and log.producer_ids_from <= log.log_end_offset - 1
    assert not list_snapshots(log.dir)
    assert highest_producer_id(log) == 41


def test_an_id_in_a_snapshot_only(tmp_path: Path) -> None:
    # Kafka's layout: producer 77's batches in old segments, a snapshot at each roll; the last segment starts with
    # another producer's batch (the one that rolled it) and plain ones. Only the snapshot still names 77.
    log = Log.open(tmp_path / "ids-0", TP, SMALL)
    state = ProducerStateManager(TP)
    idempotent(log, state, 77, 8)
    seq = 0
    base = log.active_segment.base_offset
    while log.active_segment.base_offset == base:
        idempotent(log, state, 3, 1, first_seq=seq)
        seq += 1
    plain(log, 1)
    log = reopen(log)
    newest = max(o for o, _ in list_snapshots(log.dir))
    # (moverd snapshots at the log end after the append that rolled: one batch past the segment base)
    assert log.max_producer_id == 3 and log.producer_ids_from <= newest, "the test wants 77 only in the snapshot"
    assert highest_producer_id(log) == 77


def test_an_id_between_the_newest_snapshot_and_the_last_segment_is_walked(tmp_path: Path) -> None:
    # Written by an allocator moverd never heard of, after the last snapshot, then rolled past by plain appends
    # (which write no snapshot): neither the snapshot nor the open walk of the last segment holds it.
    log = Log.open(tmp_path / "ids-0", TP, SMALL)
    state = ProducerStateManager(TP)
    idempotent(log, state, 5, 12)
    log.append(make_batch([b"x" * 100], producer_id=900, producer_epoch=0, base_sequence=0))
    plain(log, 40)
    log = reopen(log)
    assert log.max_producer_id == -1, "the test wants the id out of the last segment"
    assert highest_producer_id(log) == 900


def test_an_id_appended_since_the_open_is_in_the_producer_state(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "ids-0", TP, SMALL)
    state = ProducerStateManager(TP)
    idempotent(log, state, 3, 1)
    idempotent(log, state, 12, 1)
    assert highest_producer_id(log, state) == 12
    # A snapshot past the log end (a crash lost the tail it covered) is not trusted, as the state build does not.
    log = reopen(log)
    assert highest_producer_id(log) == 12


def test_the_count_survives_a_swap(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "d1" / "ids-0", TP, SMALL)
    plain(log, 5)
    log.append(make_batch([b"x"], producer_id=66, producer_epoch=0, base_sequence=0))
    plain(log, 30)
    log = reopen(log)
    copy_dir = tmp_path / "d2" / "ids-0.move"
    shutil.copytree(log.dir, copy_dir)
    future = Log.open(copy_dir, TP, SMALL)
    future.reload_after_copy(log)
    assert highest_producer_id(future) == 66


def _write_kafka_like_dirs(dirs: list[Path], pids: dict[TopicPartition, int]) -> None:
    for i, (tp, pid) in enumerate(sorted(pids.items())):
        log = Log.open(dirs[i % len(dirs)] / str(tp), tp, SMALL)
        state = ProducerStateManager(tp)
        idempotent(log, state, pid, 15)
        plain(log, 3)
        log.flush()
        log.close()


def _started(make_config: Callable[..., BrokerConfig], dirs: list[Path]) -> LogManager:
    manager = LogManager(make_config(dirs))
    manager.startup()
    return manager


def test_the_allocator_starts_above_the_ids_in_the_logs(tmp_path: Path,
                                                        make_config: Callable[..., BrokerConfig]) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    # A Kafka broker's ids (its controller counts from 0) and none of ours: ours begin where Kafka's never get.
    _write_kafka_like_dirs(dirs, {TopicPartition("a", 0): 0, TopicPartition("a", 1): 1, TopicPartition("b", 0): 7})
    manager = _started(make_config, dirs)
    try:
        assert manager.highest_producer_id() == 7
        ids = ProducerIdManager(manager)
        assert (ids.generate(), ids.generate()) == (FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + 1)
    finally:
        manager.shutdown()
    # Ids of ours in the logs that no block file covers (lost with a dir, say), and a block file behind them: the
    # logs win.
    _write_kafka_like_dirs(dirs, {TopicPartition("c", 0): FIRST_PRODUCER_ID + 4321})
    for d in dirs:
        (d / PRODUCER_ID_BLOCK_FILE).write_text(f"0\n{FIRST_PRODUCER_ID + 5}\n")
    manager = _started(make_config, dirs)
    try:
        assert manager.highest_producer_id() == FIRST_PRODUCER_ID + 4321
        assert ProducerIdManager(manager).generate() == FIRST_PRODUCER_ID + 4322
    finally:
        manager.shutdown()


def test_the_block_files_are_read_through_the_log_layers_storage_guard(
        tmp_path: Path, make_config: Callable[..., BrokerConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator reads its block files through LogManager.read_broker_file: an I/O error takes that dir offline
    (storage_guard, the one place an OSError becomes a failed dir) and the other dirs' copies still count; a process
    limit fails the allocation and takes no dir offline."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    manager = _started(make_config, [d1, d2])
    try:
        (d1 / PRODUCER_ID_BLOCK_FILE).mkdir()  # reading it fails with IsADirectoryError, an OSError of that dir
        (d2 / PRODUCER_ID_BLOCK_FILE).write_text(f"0\n{FIRST_PRODUCER_ID + 7000}\n")
        assert ProducerIdManager(manager).generate() == FIRST_PRODUCER_ID + 7000
        assert not manager.dirs[d1].online and manager.dirs[d2].online

        def out_of_descriptors(self: Path) -> bytes:
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(Path, "read_bytes", out_of_descriptors)
        with pytest.raises(ResourceLimitError, match="EMFILE"):
            ProducerIdManager(manager).generate()
        assert manager.dirs[d2].online, "a process limit is not a disk failure"
    finally:
        monkeypatch.undo()
        manager.shutdown()


@pytest.mark.parametrize("held", [0, FIRST_PRODUCER_ID])
def test_a_new_producer_on_dirs_holding_an_id_is_not_refused(tmp_path: Path, held: int) -> None:
    # The failure of issue 14, end to end: logs holding a producer's batches and no block file of ours, the id a
    # Kafka broker's (0, as there) or one of ours whose block file is gone (the first id moverd would give).
    tp = TopicPartition("k", 0)
    d1 = tmp_path / "d1"
    log = Log.open(d1 / "k-0", tp, SMALL)
    idempotent(log, ProducerStateManager(tp), held, 20)
    log.flush()
    log.close()
    assert any(p.name.endswith(SNAPSHOT_SUFFIX) for p in (d1 / "k-0").iterdir())
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        answer = init_producer_id(c)
        assert answer["error_code"] == 0 and answer["producer_id"] == max(held + 1, FIRST_PRODUCER_ID)
        r = produce(c, "k", 0, make_batch([b"new"], producer_id=answer["producer_id"], producer_epoch=0,
                                          base_sequence=0))
        assert r["error_code"] == 0, r
        assert r["base_offset"] == 20
