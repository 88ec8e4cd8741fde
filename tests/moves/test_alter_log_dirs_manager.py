"""ReplicaAlterLogDirsManager on its own: a queued move that is cancelled ends at once without running (no copy, no
thread), its outcome reaches the owner and its request status; a resumed one reports the `.move` it leaves. It is
the one owner of `Replica.move`: attached by `start`, detached after the owner acted on the outcome, on every path."""

from __future__ import annotations

import threading
from pathlib import Path

from mover.log.replica import Replica
from mover.moves import MoveOutcome, MoveState, ReplicaAlterLogDirsManager
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.wait import wait_for


def test_cancelling_a_queued_move_never_runs_it(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d2.mkdir(parents=True)
    outcomes: list[tuple[MoveOutcome, str]] = []

    def owner(outcome: MoveOutcome) -> None:
        # Still attached while the owner acts on the outcome (retention stays paused until it has).
        assert outcome.move.replica.move is outcome.move
        outcomes.append((outcome, threading.current_thread().name))

    moves = ReplicaAlterLogDirsManager(num_threads=1, throttle_rate=1, status_retention_ms=60_000,
                                       log_config=LogConfig, on_outcome=owner)
    moves.bucket.consume(10**9)  # deep in debt: the running move keeps the only thread until cancelled
    moves.load([d1, d2])
    replicas = []
    for p in range(2):
        tp = TopicPartition("c", p)
        log = Log.open(d1 / str(tp), tp, LogConfig())
        log.append(make_batch([b"x" * 100]))
        replicas.append(Replica(tp, log, d1))
    moves.startup()
    try:
        running = moves.start(replicas[0], d2)
        queued = moves.start(replicas[1], d2, resume=True)
        rid = moves.begin_request([running, queued])
        wait_for(lambda: moves.pool.running() == [running], message="the first move to run")
        # A `.move` a resumed move would have picked up.
        (d2 / "c-1.move").mkdir()
        moves.cancel(replicas[1])
        assert queued.wait(0), "a cancelled queued move ends at once"
        assert queued.state is MoveState.CANCELLED and queued.bytes_copied == 0
        ((outcome, thread),) = outcomes
        assert outcome.move is queued and thread == threading.current_thread().name
        assert outcome.leftover_copy == d2 / "c-1.move", "the owner retires the leftover copy"
        assert replicas[1].move is None, "detached by the manager, not by the owner"
        statuses = {s.partition: s.state for s in moves.requests.describe(rid)[0].replicas}
        assert statuses[1] == "cancelled"
        moves.cancel(replicas[0])
        assert running.wait(30) and running.state is MoveState.CANCELLED
        assert outcomes[-1][1].startswith("ReplicaMoveThread")
        assert replicas[0].move is None
        # Shutdown: the running move stops (STOPPED outcome) and the queued one never starts; both are detached.
        stopping = moves.start(replicas[0], d2)
        never = moves.start(replicas[1], d2)
        wait_for(lambda: moves.pool.running() == [stopping], message="the move to run")
        assert moves.shutdown() == [never]
        assert stopping.wait(30) and stopping.state is MoveState.STOPPED
        assert replicas[0].move is None and replicas[1].move is None
    finally:
        moves.shutdown()
        for r in replicas:
            r.log.close()
