"""ReplicaAlterLogDirsManager: every move of this broker, in one place (Kafka: ReplicaAlterLogDirsManager).

It owns what moves share: the ReplicaMoveThread pool, the token bucket that throttles every copy, KIP-179's request
ids and progress (MoveRequests), and the destinations remembered for replicas not here yet. The log layer decides
*whether* a replica may move (AlterReplicaLogDirs, mover/log/alter_replica_log_dirs.py: dirs, replicas, space) and
calls `start` / `cancel` under the structural lock; this decides how moves run.

The one owner of `Replica.move`: `start` attaches a move (which pauses the replica's retention) and this detaches it
once its outcome was acted on, on every path: completed, cancelled, failed, stopped by shutdown, or never started.
Attaching and detaching hold the lock the owner gives (the LogManager's structural lock), so a detach never clears
a move attached meanwhile and the owner sees `replica.move` change only between its own structural steps.

Outcomes flow up, never calls: a move returns its MoveOutcome to the pool thread, which hands it to `_ended` here;
this detaches the move and records it in MoveRequests after passing it to the `on_outcome` the owner gave at
construction (MoveOutcomes, mover/log/move_outcomes.py: it rewrites checkpoints, schedules the delete, takes failed
dirs offline).

Observers (metrics) subscribe to `observers`: `move_started(move)` when a move is queued, `move_ended(outcome)` once
the outcome was acted on (STOPPED for a shutdown, which is no outcome for the operator: the move resumes).

A move cancelled before a thread took it never runs: `cancel` takes it out of the queue and ends it on the spot with
`ReplicaMove.abandon()` (no I/O, no copy), so a request thread holding the manager's lock never runs a move.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from mover.log.replica import Replica
from mover.moves.pool import ReplicaMovePool
from mover.moves.remembered import RememberedDestinations
from mover.moves.replica_move import MoveOutcome, MoveState, ReplicaMove
from mover.moves.requests import MoveRequests
from mover.storage.broker_files import BrokerFiles
from mover.storage.log import LogConfig
from mover.storage.names import TopicPartition
from throttle.budget import MoveBudget
from throttle.token_bucket import TokenBucket

log = logging.getLogger(__name__)

# Outcomes remembered per (partition, destination) for status reports (ZooKeeper's reassignment status, mover/zk):
# the latest of each, the oldest forgotten past this many.
MAX_LAST_OUTCOMES = 10_000


class MoveObserver(Protocol):
    """Told of moves as they start and end; must be cheap and never block (it runs on request and move threads)."""

    def move_started(self, move: ReplicaMove) -> None: ...

    def move_ended(self, outcome: MoveOutcome) -> None: ...


class ReplicaAlterLogDirsManager:
    def __init__(self, *, num_threads: int, throttle_rate: int | None, status_retention_ms: int,
                 log_config: Callable[[], LogConfig], on_outcome: Callable[[MoveOutcome], None],
                 lock: threading.RLock | None = None) -> None:
        self.bucket = TokenBucket(throttle_rate)
        # mover.log.dir.io.max.bytes.per.second: one bucket per log dir that has been part of a move, unlimited until
        # a budget is set; a move pays the broker's and both of its dirs' (throttle/budget.py).
        self.dir_buckets: dict[Path, TokenBucket] = {}
        self._dir_rates: dict[Path, int] = {}
        self.pool = ReplicaMovePool(num_threads, self._ended)
        self.requests = MoveRequests(status_retention_ms)
        self.remembered = RememberedDestinations()
        self._log_config = log_config
        self._on_outcome = on_outcome
        self.observers: list[MoveObserver] = []
        self._last: dict[tuple[TopicPartition, Path], MoveOutcome] = {}
        self._lock = lock if lock is not None else threading.RLock()  # guards every Replica.move

    # ---------------------------------------------------------------- life cycle

    def load(self, files: BrokerFiles | Iterable[Path]) -> None:
        """Request ids and statuses from the last run (before any interrupted move resumes)."""
        self.requests.load(files)

    def startup(self) -> None:
        self.pool.start()

    def shutdown(self) -> list[ReplicaMove]:
        """Stop every running move (its `.move` stays and resumes at the next start; its STOPPED outcome reaches
        the owner as usual) and return the moves never started, detached, for the owner to park and finish."""
        pending = self.pool.shutdown()
        for move in pending:
            move.stop()
            self._detach(move)
            self._publish(MoveOutcome(move, MoveState.STOPPED))
        return pending

    # ---------------------------------------------------------------- moves

    def start(self, replica: Replica, dest: Path, *, resume: bool = False) -> ReplicaMove:
        """Queue a move of `replica` to `dest` and attach it (which pauses retention). The caller holds the
        LogManager's lock and has checked the move is allowed."""
        budget = MoveBudget([self.bucket, *(self._dir_bucket(d) for d in sorted({replica.log_dir, dest}))])
        move = ReplicaMove(replica, replica.log_dir, dest, budget, self._log_config(), resume=resume)
        move.bytes_total = replica.log.size if replica.log is not None else 0
        with self._lock:
            replica.move = move  # pauses retention until `_detach`
        if resume:
            self.requests.adopt(move)
        for observer in self.observers:
            observer.move_started(move)
        self.pool.submit(move)
        log.info("%s move of %s from %s to %s", "resuming" if resume else "queued", replica.tp,
                 replica.log_dir, dest)
        return move

    def cancel(self, replica: Replica) -> None:
        """Cancel the replica's move. A running one stops at its next check and reports CANCELLED from its thread;
        a queued one is ended here without running."""
        move = replica.move
        if move is None:
            return
        move.cancel()
        if self.pool.unqueue(move):
            outcome = move.abandon()
            try:
                self._ended(outcome)
            finally:
                move.finished()

    def begin_request(self, moves: list[ReplicaMove]) -> int | None:
        """KIP-179: the request id of an AlterReplicaLogDirs that started or redirected these moves."""
        return self.requests.begin(moves)

    def set_throttle(self, rate: int | None) -> None:
        self.bucket.set_rate(rate)

    def set_dir_budgets(self, rates: dict[Path, int]) -> None:
        """Each log dir's budget in bytes per second (a dir not named: unlimited); at once for running moves too."""
        with self._lock:
            self._dir_rates = dict(rates)
            for path, bucket in self.dir_buckets.items():
                bucket.set_rate(rates.get(path))

    def _dir_bucket(self, path: Path) -> TokenBucket:
        with self._lock:
            bucket = self.dir_buckets.get(path)
            if bucket is None:
                bucket = self.dir_buckets[path] = TokenBucket(self._dir_rates.get(path))
            return bucket

    def resize(self, num_threads: int) -> None:
        self.pool.resize(num_threads)

    def last_outcome(self, tp: TopicPartition, destination: Path) -> MoveOutcome | None:
        """How the latest move of `tp` to `destination` ended (not counting shutdowns), if one did recently."""
        return self._last.get((tp, destination))

    def _ended(self, outcome: MoveOutcome) -> None:
        try:
            self._on_outcome(outcome)
        finally:
            self._detach(outcome.move)
            self.requests.move_ended(outcome.move, outcome.state)
            if outcome.state is not MoveState.STOPPED:
                key = (outcome.move.tp, outcome.move.destination_dir)
                self._last.pop(key, None)
                self._last[key] = outcome
                while len(self._last) > MAX_LAST_OUTCOMES:
                    del self._last[next(iter(self._last))]
            self._publish(outcome)

    def _detach(self, move: ReplicaMove) -> None:
        with self._lock:
            if move.replica.move is move:
                move.replica.move = None  # retention resumes, whatever way the move ended

    def _publish(self, outcome: MoveOutcome) -> None:
        for observer in self.observers:
            try:
                observer.move_ended(outcome)
            except Exception:  # an observer's bug must not stop the move's bookkeeping
                log.exception("move observer %r failed", observer)
