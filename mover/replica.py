"""Replica: this broker's copy of one partition, the lock that appends and the swap share, and its move.

Invariants:
* `log` is the only copy clients read and write. It changes only inside `lock`, in the swap's last step.
* Every append holds `lock`; so does the swap's final tail copy and its renames. Hence no byte is appended to the
  old copy after the final tail was copied, and none is lost in the swap.
* While a move is attached, retention is paused (KIP-113 / Kafka); the pause is released by whoever detaches the
  move, on every path (completion, cancel, failure, shutdown).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mover.errors import KafkaStorageError
from mover.storage.log import Log
from mover.storage.names import TopicPartition
from mover.storage.producer_state import ProducerStateManager

if TYPE_CHECKING:
    from mover.replica_move import ReplicaMove


class Replica:
    def __init__(self, tp: TopicPartition, log: Log | None, log_dir: Path) -> None:
        self.tp = tp
        self.log = log
        self.log_dir = log_dir  # the log dir (not the partition dir) holding `log`
        self.lock = threading.RLock()
        self.move: ReplicaMove | None = None
        self.offline_reason: str | None = None
        # Extra paths reported for an offline replica (e.g. both live copies after a crash inside Kafka's swap).
        self.offline_paths: list[Path] = []
        # Producer state for idempotent producers (built on first use: this costs no I/O); kept here, not on the
        # Log, so it follows the swap, which replaces the Log but keeps the Replica.
        self.producer_state = ProducerStateManager(tp)

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None or self.log is None

    @property
    def retention_paused(self) -> bool:
        return self.move is not None

    def current_log(self) -> Log:
        """The log clients use, or KafkaStorageError when the replica is offline."""
        log = self.log
        if log is None or self.offline_reason is not None:
            raise KafkaStorageError(f"replica {self.tp} is offline: {self.offline_reason or 'no log'}")
        return log

    def __repr__(self) -> str:
        state = "offline" if self.offline else "online"
        return f"Replica({self.tp}, {self.log_dir}, {state}{', moving' if self.move else ''})"
