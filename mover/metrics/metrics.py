"""MoverMetrics: the metrics moverd updates as things happen (requests, moves), in a registry of its own.

The registry is not prometheus-client's global default: two brokers in one process (tests) must not mix, and
nothing imported by accident (the default process/platform collectors) ends up on the page unasked.

What is counted where:
* request latency: at the server's request boundary (mover.server calls `observe_request` with the API name its
  route table holds, from frame admission to the encoded answer, so it includes the wait behind earlier requests
  of the same connection, as Kafka's RequestMetrics TotalTimeMs does);
* moves: an observer of the moves manager (mover.moves.manager.MoveObserver: `move_started` / `move_ended` with the
  move's outcome); bytes copied are read from the running
  moves at scrape time (mover/metrics/collector.py), so the copy loop carries no metrics code at all.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

if TYPE_CHECKING:
    from mover.moves import MoveOutcome, ReplicaMove

# Request latency buckets (seconds): sub-millisecond answers (metadata, describe) up to a Fetch long poll
# (fetch.max.wait.ms, 500 ms by default) and a slow fsync.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Replica-lock hold at a move's swap: a few milliseconds normally (bench/lock_hold.py); the tail is what matters,
# as producers to that partition wait for the lock.
LOCK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class MoverMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.request_duration = Histogram(
            "mover_request_duration_seconds", "Time from reading a request to its encoded answer, per Kafka API.",
            ["api"], registry=self.registry, buckets=REQUEST_BUCKETS)
        self.lock_hold = Histogram(
            "mover_replica_lock_hold_seconds", "How long a move's swap held the replica lock (appends wait on it).",
            registry=self.registry, buckets=LOCK_BUCKETS)
        self.moves_ended = Counter(
            "mover_moves_ended", "Moves that ended in this process, by outcome (completed, cancelled, failed).",
            ["outcome"], registry=self.registry)
        self._lock = threading.Lock()
        self._running: set[ReplicaMove] = set()
        self._bytes_ended = 0
        self._bytes_reported = 0
        # One child per API, looked up without prometheus-client's label validation on every request.
        self._per_api: dict[str, Histogram] = {}

    # ---------------------------------------------------------------- requests (called on the event loop)

    def observe_request(self, api: str, seconds: float) -> None:
        child = self._per_api.get(api)
        if child is None:
            child = self._per_api[api] = self.request_duration.labels(api)
        child.observe(seconds)

    # ---------------------------------------------------------------- moves (a MoveObserver)

    def move_started(self, move: ReplicaMove) -> None:
        with self._lock:
            self._running.add(move)

    def move_ended(self, outcome: MoveOutcome) -> None:
        move = outcome.move
        with self._lock:
            if move in self._running:
                self._running.discard(move)
                self._bytes_ended += move.bytes_copied - move.bytes_resumed
        if move.lock_hold_seconds is not None:
            self.lock_hold.observe(move.lock_hold_seconds)
        if outcome.state.name != "STOPPED":  # a shutdown is not an outcome; the move resumes at the next start
            self.moves_ended.labels(outcome.state.value).inc()

    def bytes_copied(self) -> int:
        """Bytes copied by moves in this process: the ended ones plus what the running ones copied so far, without
        the prefix a resumed move found already copied. Never decreases (a Prometheus counter)."""
        with self._lock:
            total = self._bytes_ended + sum(m.bytes_copied - m.bytes_resumed for m in self._running)
            self._bytes_reported = max(self._bytes_reported, total)
            return self._bytes_reported
