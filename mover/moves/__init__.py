"""Replica moves between this broker's log dirs (KIP-113), in one place.

- `replica_move.py`: ReplicaMove, one move: its state, cancel and stop, the copy then the swap in order, ending in a
  MoveOutcome it returns (never a call up).
- `future_log_copy.py`: FutureLogCopy, the copy of the source into the `.move` (rounds, chunks, small files, fsyncs).
- `future_log_swap.py`: FutureLogSwap, the swap (the two renames, the switch under the replica lock, their fsyncs).
- `pool.py`: ReplicaMovePool, the ReplicaMoveThreads and their FIFO queue.
- `requests.py`: MoveRequests, KIP-179's request ids and progress, persisted.
- `remembered.py`: RememberedDestinations, dirs asked for replicas not here yet.
- `manager.py`: ReplicaAlterLogDirsManager, the owner of all of the above, used by the LogManager.
"""

from __future__ import annotations

from mover.moves.manager import ReplicaAlterLogDirsManager
from mover.moves.pool import ReplicaMovePool
from mover.moves.remembered import RememberedDestinations
from mover.moves.replica_move import MoveOutcome, MoveState, ReplicaMove
from mover.moves.requests import MoveRequests

__all__ = [
    "MoveOutcome",
    "MoveRequests",
    "MoveState",
    "RememberedDestinations",
    "ReplicaAlterLogDirsManager",
    "ReplicaMove",
    "ReplicaMovePool",
]
