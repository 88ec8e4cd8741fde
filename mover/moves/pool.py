"""ReplicaMovePool: KIP-113's ReplicaMoveThread pool.

`num.replica.alter.log.dirs.threads` threads (default: one per log dir) take moves from one FIFO queue; moves beyond
the thread count wait in arrival order. The size can change while moves run: growing starts threads at once,
shrinking lets the surplus threads exit when their current move ends (a running copy is never interrupted for it).

A thread runs a move, then hands its MoveOutcome to `on_outcome` (given by the pool's owner), then releases the
move's waiters: the move itself never calls anyone.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from mover.moves import priority
from mover.moves.replica_move import MoveOutcome, ReplicaMove

log = logging.getLogger(__name__)


class ReplicaMovePool:
    def __init__(self, num_threads: int, on_outcome: Callable[[MoveOutcome], None]) -> None:
        if num_threads < 1:
            raise ValueError("the pool needs at least one thread")
        self._on_outcome = on_outcome
        self._target = num_threads
        self._cond = threading.Condition()
        self._queue: collections.deque[ReplicaMove] = collections.deque()
        self._running: set[ReplicaMove] = set()
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._next_id = 0

    @property
    def num_threads(self) -> int:
        return self._target

    def start(self) -> None:
        with self._cond:
            self._spawn()

    def submit(self, move: ReplicaMove) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the move pool is shut down")
            self._queue.append(move)
            self._cond.notify()

    def unqueue(self, move: ReplicaMove) -> bool:
        """Take a move that has not started out of the queue; False when a thread already has it."""
        with self._cond:
            try:
                self._queue.remove(move)
                return True
            except ValueError:
                return False

    def queued(self) -> list[ReplicaMove]:
        with self._cond:
            return list(self._queue)

    def running(self) -> list[ReplicaMove]:
        with self._cond:
            return list(self._running)

    def resize(self, num_threads: int) -> None:
        if num_threads < 1:
            raise ValueError("the pool needs at least one thread")
        with self._cond:
            self._target = num_threads
            self._spawn()
            self._cond.notify_all()

    def shutdown(self, timeout: float | None = 30.0) -> list[ReplicaMove]:
        """Stop every running move (its .move stays for the next start) and return the moves never started."""
        with self._cond:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            for move in self._running:
                move.stop()
            threads = list(self._threads)
            self._cond.notify_all()
        for t in threads:
            t.join(timeout)
        return pending

    def _spawn(self) -> None:
        while len(self._threads) < self._target and not self._closed:
            self._next_id += 1
            t = threading.Thread(target=self._work, name=f"ReplicaMoveThread-{self._next_id}", daemon=True)
            self._threads.add(t)
            t.start()

    def _work(self) -> None:
        me = threading.current_thread()
        # The copy yields the disk (and, in its bulk system calls, the CPU) to the request path
        # (mover/moves/priority.py); the swap and the outcome's bookkeeping, which hold locks the request path waits
        # on, run at the daemon's own priority.
        priority.background()
        while True:
            with self._cond:
                while not self._queue and not self._closed and len(self._threads) <= self._target:
                    self._cond.wait()
                if self._closed or len(self._threads) > self._target:
                    self._threads.discard(me)
                    return
                move = self._queue.popleft()
                self._running.add(move)
            try:
                outcome = move.run()
                try:
                    with priority.foreground():
                        self._on_outcome(outcome)
                except Exception:  # the owner's bug must not kill the thread; the move still ends
                    log.exception("handling the outcome of the move of %s failed", move.tp)
            finally:
                with self._cond:
                    self._running.discard(move)
                    self._cond.notify_all()
                move.finished()
