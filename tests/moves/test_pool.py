"""ReplicaMovePool on its own: FIFO beyond its threads, resizing, unqueue, shutdown, and outcomes handed to the
owner before a move's waiters are released. Real threads, real moves of real logs (small ones)."""

from __future__ import annotations

import threading
from pathlib import Path

from mover.log.replica import Replica
from mover.moves import MoveOutcome, MoveState, ReplicaMove, ReplicaMovePool
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.wait import wait_for
from throttle.token_bucket import TokenBucket


def stalled() -> TokenBucket:
    """A throttle already deep in debt: every copy waits on it until cancelled or stopped."""
    bucket = TokenBucket(1)
    bucket.consume(10**9)
    return bucket


def replica_in(tmp_path: Path, tp: TopicPartition, batches: int = 3) -> Replica:
    src = tmp_path / "d1"
    log = Log.open(src / str(tp), tp, LogConfig())
    for i in range(batches):
        log.append(make_batch([f"{tp}-{i}".encode()]))
    (tmp_path / "d2").mkdir(exist_ok=True)
    return Replica(tp, log, src)


def move_of(replica: Replica, tmp_path: Path, bucket: TokenBucket) -> ReplicaMove:
    move = ReplicaMove(replica, replica.log_dir, tmp_path / "d2", bucket, LogConfig())
    replica.move = move
    return move


class Owner:
    """What the LogManager does with outcomes, reduced to recording them (and detaching, as it does)."""

    def __init__(self) -> None:
        self.outcomes: list[MoveOutcome] = []
        self.lock = threading.Lock()

    def __call__(self, outcome: MoveOutcome) -> None:
        # The move is not released yet: its waiters see the owner's work done.
        assert not outcome.move.wait(0)
        assert outcome.move.state is not outcome.state or outcome.state is MoveState.QUEUED
        with self.lock:
            self.outcomes.append(outcome)
        outcome.move.replica.move = None


def test_runs_moves_fifo_beyond_its_threads_and_reports_each_outcome(tmp_path: Path) -> None:
    owner = Owner()
    pool = ReplicaMovePool(1, owner)
    gate = TokenBucket(None)
    tps = [TopicPartition("p", i) for i in range(4)]
    moves = [move_of(replica_in(tmp_path, tp), tmp_path, gate) for tp in tps]
    for mv in moves:
        pool.submit(mv)
    pool.start()
    try:
        for mv in moves:
            assert mv.wait(30)
    finally:
        pool.shutdown()
    assert [o.move.tp for o in owner.outcomes] == tps
    assert all(o.state is MoveState.COMPLETED and o.retired_path is not None for o in owner.outcomes)
    assert all(mv.state is MoveState.COMPLETED and mv.replica.log_dir == tmp_path / "d2" for mv in moves)
    for o in owner.outcomes:
        assert o.retired_log is not None
        o.retired_log.close()
    for mv in moves:
        mv.replica.log.close()


def test_unqueue_takes_only_moves_no_thread_has(tmp_path: Path) -> None:
    owner = Owner()
    pool = ReplicaMovePool(1, owner)
    slow = stalled()  # the first move stays running
    first = move_of(replica_in(tmp_path, TopicPartition("u", 0)), tmp_path, slow)
    second = move_of(replica_in(tmp_path, TopicPartition("u", 1)), tmp_path, slow)
    pool.start()
    pool.submit(first)
    pool.submit(second)
    try:
        wait_for(lambda: pool.running() == [first], message="the first move to run")
        assert pool.queued() == [second]
        assert not pool.unqueue(first), "a running move is not in the queue"
        assert pool.unqueue(second)
        assert pool.queued() == []
        first.cancel()
        assert first.wait(30)
    finally:
        pool.shutdown()
    assert [o.move for o in owner.outcomes] == [first]
    assert first.state is MoveState.CANCELLED
    assert second.state is MoveState.QUEUED, "a move taken out of the queue never ran"
    assert not (tmp_path / "d2" / "u-0.move").exists()
    for mv in (first, second):
        mv.replica.log.close()


def test_resize_grows_at_once_and_shutdown_stops_running_moves(tmp_path: Path) -> None:
    owner = Owner()
    pool = ReplicaMovePool(1, owner)
    slow = stalled()
    moves = [move_of(replica_in(tmp_path, TopicPartition("r", i)), tmp_path, slow) for i in range(3)]
    pool.start()
    for mv in moves:
        pool.submit(mv)
    wait_for(lambda: len(pool.running()) == 1, message="one running move")
    pool.resize(3)
    assert pool.num_threads == 3
    wait_for(lambda: len(pool.running()) == 3, message="three running moves after growing the pool")
    assert pool.shutdown() == []
    assert {o.state for o in owner.outcomes} == {MoveState.STOPPED}
    assert all(mv.wait(0) for mv in moves)
    # A stopped move keeps its copy for the next start to resume.
    assert all((tmp_path / "d2" / f"r-{i}.move").is_dir() for i in range(3))
    for mv in moves:
        mv.replica.log.close()


def test_an_owner_that_raises_does_not_kill_the_thread(tmp_path: Path) -> None:
    seen: list[MoveOutcome] = []

    def broken(outcome: MoveOutcome) -> None:
        seen.append(outcome)
        raise RuntimeError("owner bug")

    pool = ReplicaMovePool(1, broken)
    pool.start()
    moves = [move_of(replica_in(tmp_path, TopicPartition("b", i)), tmp_path, TokenBucket(None)) for i in range(2)]
    try:
        for mv in moves:
            pool.submit(mv)
        assert all(mv.wait(30) for mv in moves), "the second move still ran"
    finally:
        pool.shutdown()
    assert [o.move for o in seen] == moves
    for o in seen:
        if o.retired_log is not None:
            o.retired_log.close()
    for mv in moves:
        mv.replica.log.close()
