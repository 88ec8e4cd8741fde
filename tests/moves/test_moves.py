"""Moves through the LogManager's Python API, on real files (and real tmpfs mounts for separate disks)."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

from mover.config.dynamic import THROTTLE_KEY, AlterOp, Scope
from mover.log.log_manager import LogManager
from mover.moves import MoveState
from mover.moves.requests import ReplicaStatus
from mover.storage.checkpoint import read_checkpoint
from mover.storage.log import Log
from mover.storage.names import DirKind, TopicPartition, parse_partition_dir
from mover.testing.batches import make_batch
from mover.testing.log_manager import alter_replica_log_dir, cancel_move, set_throttle
from mover.testing.records import log_bytes, read_records
from mover.testing.wait import wait_for


def kinds(log_dir: Path) -> dict[str, DirKind]:
    out = {}
    for name in os.listdir(log_dir):
        parsed = parse_partition_dir(name)
        if parsed is not None:
            out[name] = parsed.kind
    return out


def fill(manager: LogManager, tp: TopicPartition, batches: int, per_batch: int = 10, size: int = 100) -> list[bytes]:
    values = []
    for b in range(batches):
        vs = [f"{tp}-{b}-{i}-".encode().ljust(size, b"x") for i in range(per_batch)]
        manager.append(tp, make_batch(vs))
        values.extend(vs)
    return values


def moved(m: LogManager, tp: TopicPartition, dest: Path) -> ReplicaStatus:
    """Move `tp` to `dest` and wait until the move ended; its final status as DescribeReplicaMoves reports it."""
    codes, request_id = m.alter_replica_log_dirs([(tp, str(dest))])
    assert codes[tp] == 0 and request_id is not None
    wait_for(lambda: m.requests.describe(request_id)[0].done, message=f"move of {tp}")
    (status,) = m.requests.describe(request_id)[0].replicas
    return status


def test_move_and_back(make_config, manager_of, tmp_path: Path) -> None:
    cfg = make_config(**{"log.segment.bytes": 20_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    src = m.replicas[tp].log_dir
    dst = d2 if src == d1 else d1
    values = fill(m, tp, 50)
    before = log_bytes(src / "t-0")
    assert len(before) > 2, "the test wants several segments"

    status = moved(m, tp, dst)
    assert status.state == MoveState.COMPLETED.value, status.error_message
    assert m.replicas[tp].log_dir == dst
    assert log_bytes(dst / "t-0") == before
    assert [v for _, v in read_records(dst / "t-0")] == values
    assert kinds(dst) == {"t-0": DirKind.CURRENT}
    assert list(kinds(src).values()) == [DirKind.DELETE]
    # Checkpoint entries follow the partition.
    assert tp in read_checkpoint(dst / "recovery-point-offset-checkpoint")
    assert tp not in read_checkpoint(src / "recovery-point-offset-checkpoint")
    # The retired copy goes after log.segment.delete.delay.ms.
    wait_for(lambda: not kinds(src), message=".delete removal")
    # Appends continue on the new copy, and the copy moves back.
    values += fill(m, tp, 5)
    assert alter_replica_log_dir(m, tp, str(src)) == 0
    wait_for(lambda: m.replicas[tp].log_dir == src and m.replicas[tp].move is None, message="move back")
    assert [v for _, v in read_records(src / "t-0")] == values


def test_concurrent_appends_while_moving_back_and_forth(make_config, manager_of, tmp_path: Path) -> None:
    """The issue's first test: 4 partitions, appenders running, each partition moved back and forth 3 times;
    every record once and in order, CRCs valid, and the final .log bytes equal a never-moved copy's."""
    cfg = make_config(**{"log.segment.bytes": 64_000, "intra.broker.throttled.rate": 20_000_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("busy", 4)
    tps = [TopicPartition("busy", p) for p in range(4)]
    shadow_cfg = m.log_config()
    shadows = {tp: Log.open(tmp_path / "shadow" / str(tp), tp, shadow_cfg) for tp in tps}
    order_locks = {tp: threading.Lock() for tp in tps}
    expected: dict[TopicPartition, list[bytes]] = {tp: [] for tp in tps}
    stop = threading.Event()
    errors: list[BaseException] = []
    request_ids: list[int] = []

    def appender(seed: int) -> None:
        rnd = random.Random(seed)
        n = 0
        try:
            while not stop.is_set():
                tp = rnd.choice(tps)
                vs = [f"{seed}-{n}-{i}".encode().ljust(rnd.randint(10, 300), b".") for i in range(rnd.randint(1, 8))]
                n += 1
                batch = make_batch(vs)
                # One order per partition for the real log and the shadow, so both assign the same offsets.
                with order_locks[tp]:
                    m.append(tp, batch)
                    shadows[tp].append(batch)
                    expected[tp].extend(vs)
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    try:
        for _round in range(3):
            for target in (d2, d1) if m.replicas[tps[0]].log_dir == d1 else (d1, d2):
                for tp in tps:
                    if m.replicas[tp].log_dir != target:
                        codes, request_id = m.alter_replica_log_dirs([(tp, str(target))])
                        assert codes[tp] == 0 and request_id is not None
                        request_ids.append(request_id)
                wait_for(lambda t=target: all(m.replicas[tp].log_dir == t and m.replicas[tp].move is None
                                               for tp in tps), message=f"moves to {target}")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    statuses = [r for rid in request_ids for req in m.requests.describe(rid) for r in req.replicas]
    assert len(statuses) == len(request_ids)
    assert all(r.state == MoveState.COMPLETED.value for r in statuses), statuses
    for tp in tps:
        replica = m.replicas[tp]
        got = read_records(replica.log.dir)
        assert [v for _, v in got] == expected[tp]
        assert [o for o, _ in got] == list(range(len(expected[tp])))
        assert log_bytes(replica.log.dir) == log_bytes(shadows[tp].dir)
    for s in shadows.values():
        s.close()


def test_unthrottled_copy_moves_a_segment_in_one_system_call(make_config, manager_of, monkeypatch) -> None:
    """An unthrottled move copies each step of up to UNTHROTTLED_STEP bytes with one copy_file_range (the GIL
    released for all of it), not in the throttle's 8 MiB chunks: every step between two is a moment a nice-19 move
    thread holds the GIL that the event loop may need (mover/moves/future_log_copy.py)."""
    from mover.moves import future_log_copy

    asked: list[int] = []
    real = os.copy_file_range

    def counting(src: int, dst: int, count: int, *args: object) -> int:
        asked.append(count)
        return real(src, dst, count, *args)

    m = manager_of(make_config(**{"log.segment.bytes": 64 * 2**20}))
    d1, d2 = m.config.log_dirs
    m.create_topic("big", 1)
    tp = TopicPartition("big", 0)
    dst = d2 if m.replicas[tp].log_dir == d1 else d1
    batch = make_batch([b"x" * 2**20])
    for _ in range(24):
        m.append(tp, batch)
    size = (m.replicas[tp].log_dir / "big-0" / "00000000000000000000.log").stat().st_size
    assert future_log_copy.UNTHROTTLED_STEP >= size > 2 * 8 * 2**20  # more than two of the throttle's chunks
    monkeypatch.setattr(os, "copy_file_range", counting)
    assert moved(m, tp, dst).error_code == 0
    bulk = [n for n in asked if n > 2**20]
    assert bulk == [size], f"copy_file_range asked for {bulk}; the whole segment in one call was expected"


def test_cancel_redirect_and_restart(make_config, manager_of, tmp_path: Path) -> None:
    d3 = tmp_path / "d3"
    cfg = make_config([tmp_path / "d1", tmp_path / "d2", d3], **{"intra.broker.throttled.rate": 200_000})
    m = manager_of(cfg)
    d1, d2, _ = cfg.log_dirs
    tp = TopicPartition("c", 0)
    m.remembered[tp] = d1
    m.create_topic("c", 1)
    assert m.replicas[tp].log_dir == d1
    fill(m, tp, 100, size=1000)  # ~1 MB: several seconds at 200 kB/s

    assert alter_replica_log_dir(m, tp, str(d2)) == 0
    first = m.replicas[tp].move
    wait_for(lambda: first.bytes_copied > 0, message="copy to start")
    assert m.replicas[tp].retention_paused
    # A request for a third dir redirects: the first copy is cancelled and its .move deleted.
    assert alter_replica_log_dir(m, tp, str(d3)) == 0
    assert first.wait(10) and first.state is MoveState.CANCELLED
    assert not (d2 / "c-0.move").exists()
    second = m.replicas[tp].move
    assert second is not None and second.destination_dir == d3
    # Asking again for the dir being copied to changes nothing.
    assert alter_replica_log_dir(m, tp, str(d3)) == 0 and m.replicas[tp].move is second
    # A request for the current dir cancels.
    assert alter_replica_log_dir(m, tp, str(d1)) == 0
    assert second.wait(10) and second.state is MoveState.CANCELLED
    assert not (d3 / "c-0.move").exists()
    assert not m.replicas[tp].retention_paused, "retention resumes when a move is cancelled"
    # `any` cancels too, and a cancelled move can always be started again.
    assert alter_replica_log_dir(m, tp, str(d2)) == 0
    third = m.replicas[tp].move
    assert alter_replica_log_dir(m, tp, "any") == 0
    assert third.wait(10) and third.state is MoveState.CANCELLED
    set_throttle(m, None)
    assert alter_replica_log_dir(m, tp, str(d2)) == 0
    wait_for(lambda: m.replicas[tp].log_dir == d2, message="restarted move")


def test_alter_errors_in_kafka_order(make_config, manager_of, tmp_path: Path) -> None:
    cfg = make_config()
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    m.create_topic("e", 2)
    tp = TopicPartition("e", 0)
    assert alter_replica_log_dir(m, TopicPartition("x" * 240, 0), str(d1)) == 17
    assert alter_replica_log_dir(m, tp, "relative/dir") == 57
    assert alter_replica_log_dir(m, tp, str(d1) + "/") == 57
    assert alter_replica_log_dir(m, tp, str(tmp_path / "nope")) == 57
    assert alter_replica_log_dir(m, TopicPartition("unknown", 0), str(d2)) == 3
    assert alter_replica_log_dir(m, TopicPartition("e", 7), str(d2)) == 3
    assert alter_replica_log_dir(m, tp, str(m.replicas[tp].log_dir)) == 0
    # An unknown topic's destination is remembered and used when the topic appears.
    assert alter_replica_log_dir(m, TopicPartition("later", 0), str(d2)) == 3
    m.create_topic("later", 1)
    assert m.replicas[TopicPartition("later", 0)].log_dir == d2


def test_pool_is_fifo_beyond_its_threads(make_config, manager_of, monkeypatch) -> None:
    cfg = make_config(**{"num.replica.alter.log.dirs.threads": 1, "intra.broker.throttled.rate": 2_000_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    tps = [TopicPartition("q", p) for p in range(4)]
    for tp in tps:
        m.remembered[tp] = d1
    m.create_topic("q", 4)
    for tp in tps:
        fill(m, tp, 20, size=1000)
    ended: list[TopicPartition] = []
    record = m.requests.move_ended
    monkeypatch.setattr(m.requests, "move_ended", lambda mv, state: (ended.append(mv.tp), record(mv, state)))
    moves = []
    for tp in tps:
        assert alter_replica_log_dir(m, tp, str(d2)) == 0
        moves.append(m.replicas[tp].move)
    assert len(m.alter_log_dirs_manager.pool.running()) <= 1
    wait_for(lambda: all(m.replicas[tp].log_dir == d2 and m.replicas[tp].move is None for tp in tps),
             message="all moves")
    assert all(mv is not None and mv.wait(30) and mv.state is MoveState.COMPLETED for mv in moves)
    assert ended == tps, "moves beyond the pool's threads run in FIFO order"


def test_retention_paused_while_moving_and_resumed_after(make_config, manager_of) -> None:
    cfg = make_config(**{"log.segment.bytes": 5_000, "log.retention.bytes": 10_000,
                         "intra.broker.throttled.rate": 100_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    tp = TopicPartition("r", 0)
    m.remembered[tp] = d1
    m.create_topic("r", 1)
    fill(m, tp, 60, size=100)
    assert alter_replica_log_dir(m, tp, str(d2)) == 0
    log_before = m.replicas[tp].log
    start = log_before.log_start_offset
    assert m.log_dirs.run_retention() == 0
    assert log_before.log_start_offset == start, "retention must not run on a moving partition"
    assert cancel_move(m, tp)
    # Resumed: the check the move postponed runs once the move has ended (the next test: without a periodic one).
    wait_for(lambda: m.replicas[tp].move is None and m.replicas[tp].log.log_start_offset > start,
             message="retention after the cancel")


def test_retention_a_move_postponed_runs_when_the_move_ends(make_config, manager_of) -> None:
    # No periodic check comes during the test: only the end of the move can apply the check it postponed.
    cfg = make_config(**{"log.segment.bytes": 5_000, "log.retention.bytes": 10_000,
                         "log.retention.check.interval.ms": 3_600_000, "intra.broker.throttled.rate": 100_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    tp, other = TopicPartition("r", 0), TopicPartition("s", 0)
    for t in (tp, other):
        m.remembered[t] = d1
        m.create_topic(t.topic, 1)
        fill(m, t, 60, size=100)
    start, other_start = m.replicas[tp].log.log_start_offset, m.replicas[other].log.log_start_offset
    assert alter_replica_log_dir(m, tp, str(d2)) == 0
    assert m.log_dirs.run_retention() > 0, "the partition that does not move is trimmed at once"
    assert m.replicas[tp].log.log_start_offset == start
    assert cancel_move(m, tp)
    wait_for(lambda: m.replicas[tp].log.log_start_offset > start, message="the postponed retention check")
    assert m.replicas[tp].log.size <= 10_000 + 5_000
    # Only postponed checks run then: a partition past its retention whose move no check saw waits for the next.
    fill(m, other, 60, size=100)
    trimmed = m.replicas[other].log.log_start_offset
    assert trimmed > other_start
    assert moved(m, other, d2).state == MoveState.COMPLETED.value
    assert m.log_dirs.run_postponed_retention() == 0
    assert m.replicas[other].log.log_start_offset == trimmed


def test_disk_full_refused_up_front(make_config, manager_of, tmpfs) -> None:
    big, small = tmpfs("big", "64m"), tmpfs("small", "4m")
    cfg = make_config([big, small])
    m = manager_of(cfg)
    tp = TopicPartition("f", 0)
    m.remembered[tp] = big
    m.create_topic("f", 1)
    values = fill(m, tp, 500, size=1000)  # ~5 MB: cannot fit in 4 MB
    assert alter_replica_log_dir(m, tp, str(small)) == 56
    assert not (small / "f-0.move").exists()
    assert m.dirs[small].online
    assert [v for _, v in read_records(big / "f-0")] == values
    fill(m, tp, 1)


def test_enospc_mid_copy_aborts_and_cleans_up(make_config, manager_of, tmpfs, monkeypatch) -> None:
    import mover.log.alter_replica_log_dirs as alter_replica_log_dirs

    monkeypatch.setattr(alter_replica_log_dirs, "MOVE_SPACE_MARGIN", 0)  # let the move start; the disk fills under it
    big, small = tmpfs("big", "64m"), tmpfs("small", "8m")
    cfg = make_config([big, small], **{"intra.broker.throttled.rate": 2_000_000})
    m = manager_of(cfg)
    tp = TopicPartition("g", 0)
    m.remembered[tp] = big
    m.create_topic("g", 1)
    values = fill(m, tp, 60, size=100_000 // 10)  # ~6 MB
    assert alter_replica_log_dir(m, tp, str(small)) == 0
    move = m.replicas[tp].move
    wait_for(lambda: move.bytes_copied > 0, message="copy to start")
    # Something else fills the destination disk while the copy runs.
    with open(small / "ballast", "wb") as f:
        try:
            f.write(b"\0" * 8 * 2**20)
        except OSError:
            pass
    assert move.wait(30)
    assert move.state is MoveState.FAILED and "No space" in (move.error or "")
    assert not (small / "g-0.move").exists()
    assert m.dirs[small].online, "a full disk is not a failed disk"
    assert m.replicas[tp].log_dir == big and not m.replicas[tp].retention_paused
    assert [v for _, v in read_records(big / "g-0")] == values
    fill(m, tp, 1)
    os.unlink(small / "ballast")
    assert alter_replica_log_dir(m, tp, str(small)) == 0, "a failed move can be started again"
    wait_for(lambda: m.replicas[tp].log_dir == small, message="retried move")



def test_a_full_dir_keeps_its_old_broker_files_and_stays_online(make_config, manager_of, tmpfs) -> None:
    """The broker-wide files (request ids, dynamic config) and the checkpoints are rewritten in every dir, each
    atomically: a dir too full to take a new copy keeps its old one whole, stays online, and is written again once
    there is room. Kafka takes such a dir offline."""
    big, small = tmpfs("big", "64m"), tmpfs("small", "4m")
    m = manager_of(make_config([big, small]))
    tp = TopicPartition("h", 0)
    m.remembered[tp] = big
    m.create_topic("h", 1)
    fill(m, tp, 5)
    m.log_dirs.checkpoint_all()
    before = {p.name: p.read_bytes() for p in small.iterdir() if p.is_file()}
    with open(small / "ballast", "wb") as f:
        try:
            f.write(b"\0" * 4 * 2**20)
        except OSError:
            pass
    set_throttle_dynamically(m, 1_000_000)  # persists the dynamic config in every dir
    m.log_dirs.checkpoint_all()
    assert m.dirs[small].online, "a full disk is not a failed disk"
    after = {p.name: p.read_bytes() for p in small.iterdir() if p.is_file() and p.name != "ballast"}
    assert after == before, "the old copies are whole and no torn tmp file is left"
    os.unlink(small / "ballast")
    set_throttle_dynamically(m, 2_000_000)
    m.log_dirs.checkpoint_all()
    assert m.dirs[small].online
    assert {p.name for p in small.iterdir()} >= set(before)
    assert any(b"2000000" in p.read_bytes() for p in small.iterdir() if p.is_file()), "written again with room"

def set_throttle_dynamically(m: LogManager, rate: int) -> None:
    m.dynamic_config.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, str(rate))])


def test_remembered_destinations_are_bounded(make_config, manager_of, monkeypatch) -> None:
    import mover.moves.remembered as remembered

    monkeypatch.setattr(remembered, "MAX_REMEMBERED", 3)
    cfg = make_config()
    m = manager_of(cfg)
    d2 = str(cfg.log_dirs[1])
    for p in range(5):
        assert alter_replica_log_dir(m, TopicPartition("later", p), d2) == 3
    assert list(m.remembered) == [TopicPartition("later", p) for p in (2, 3, 4)]
    assert alter_replica_log_dir(m, TopicPartition("later", 2), d2) == 3  # asked again: now the newest
    assert alter_replica_log_dir(m, TopicPartition("later", 5), d2) == 3
    assert list(m.remembered) == [TopicPartition("later", p) for p in (4, 2, 5)]


def test_only_a_throttled_copy_starts_writeback_per_chunk(make_config, manager_of, monkeypatch) -> None:
    """An unthrottled copy leaves writeback to the kernel and its final fsync (a kick per step made it wait for the
    device queue); a throttled one, slower than the disk, kicks each chunk so its final fsync stays short."""
    import mover.moves.future_log_copy as future_log_copy

    kicked: list[tuple[int, int]] = []
    real = future_log_copy.start_writeback

    def recording(fd: int, offset: int, length: int) -> None:
        kicked.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(future_log_copy, "start_writeback", recording)
    cfg = make_config(**{"log.segment.bytes": 200_000})
    m = manager_of(cfg)
    d1, d2 = cfg.log_dirs
    tp = TopicPartition("t", 0)
    m.remembered[tp] = d1
    m.create_topic("t", 1)
    values = fill(m, tp, 100)
    assert moved(m, tp, d2).error_code == 0
    assert kicked == [], "unthrottled: no writeback kick"
    set_throttle(m, 4 * 1024 * 1024)
    assert moved(m, tp, d1).error_code == 0
    assert len(kicked) > 1 and sum(n for _, n in kicked) >= sum(map(len, values)), \
        "throttled: every chunk of the copy kicked"
    assert [v for _, v in read_records(d1 / "t-0")] == values
