"""Replica: this broker's copy of one partition, its append path, and the move attached to it.

Invariants:
* `log` is the only copy clients read and write. It changes only inside `lock`, in the swap's last step
  (mover/moves/future_log_swap.py).
* Every append holds `lock`; so does the swap's final tail copy and the switch of `log`. Hence no byte is appended
  to the old copy after the final tail was copied, and none is lost in the swap. The swap's two directory renames
  do not hold it: appends go on during them by descriptor, and whatever an append does by path (a roll, a
  snapshot) waits for the rename in the Log's PathGuard (mover/storage/path_guard.py), holding `lock` meanwhile.
* An append's batches are parsed and CRC-checked once (`record_batch.validate_batches`), before the lock; the
  producer state and the Log take the headers that check produced.
* While a move is attached, retention is paused (KIP-113 / Kafka). `move` has one owner, the moves manager
  (mover/moves/manager.py): it attaches a move and detaches it on every path (completion, cancel, failure,
  shutdown) once the log layer acted on the move's outcome (MoveOutcomes), which releases the pause.
* Every write of `log`, `log_dir`, `offline_reason` or `move`, and every change of a `ReplicaTable`, takes a new
  layout version after the change is visible, so a reader that saw the same version before and after looking at the
  replicas saw them as they are (DescribeLogDirs, mover/log/describe_log_dirs.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mover.errors import KafkaStorageError
from mover.storage import record_batch
from mover.storage.errors import CorruptRecordError
from mover.storage.log import AppendInfo, Log
from mover.storage.names import TopicPartition
from mover.storage.producer_state import ProducerStateManager
from mover.storage.record_batch import BatchHeader

if TYPE_CHECKING:
    from mover.moves.replica_move import ReplicaMove


# The layout version: a new value after every change of which replicas exist, where they live, whether they are
# offline and which move is attached. A reader that took the value before looking at the replicas and finds it
# unchanged later knows its view is still true (DescribeLogDirs keeps its grouping of 10,000 replicas by dir and
# topic that way, and pays only for the sizes). `next` of a count is one C call under the GIL, so no two
# changes get the same value; each change is visible before the new value is.
_versions = itertools.count(1)
_layout_version = 0


def layout_version() -> int:
    return _layout_version


def _layout_changed() -> None:
    global _layout_version
    _layout_version = next(_versions)


# The Replica attributes whose writes are layout changes: where the replica lives and in what state.
_LAYOUT_FIELDS = frozenset({"log", "log_dir", "offline_reason", "move"})


class ReplicaTable(dict[TopicPartition, "Replica"]):
    """The broker's replicas by partition: a dict whose every change changes the layout version."""

    def __setitem__(self, key: TopicPartition, value: Replica) -> None:
        super().__setitem__(key, value)
        _layout_changed()

    def __delitem__(self, key: TopicPartition) -> None:
        super().__delitem__(key)
        _layout_changed()

    def update(self, other: Mapping[TopicPartition, Replica] | Iterable[tuple[TopicPartition, Replica]] = (),
               /, **kw: Any) -> None:
        super().update(other, **kw)
        _layout_changed()

    def pop(self, key: TopicPartition, /, *default: Any) -> Any:
        try:
            return super().pop(key, *default)
        finally:
            _layout_changed()

    def popitem(self) -> tuple[TopicPartition, Replica]:
        try:
            return super().popitem()
        finally:
            _layout_changed()

    def setdefault(self, key: TopicPartition, default: Replica) -> Replica:  # type: ignore[override]
        try:
            return super().setdefault(key, default)
        finally:
            _layout_changed()

    def clear(self) -> None:
        super().clear()
        _layout_changed()

    def __ior__(self, other: Any) -> ReplicaTable:
        self.update(other)
        return self


class Replica:
    def __init__(self, tp: TopicPartition, log: Log | None, log_dir: Path) -> None:
        self.tp = tp
        self.log = log
        self.log_dir = log_dir  # the log dir (not the partition dir) holding `log`
        self.lock = threading.RLock()
        self.move: ReplicaMove | None = None
        self.offline_reason: str | None = None
        # Producer state for idempotent producers (built on first use: this costs no I/O); kept here, not on the
        # Log, so it follows the swap, which replaces the Log but keeps the Replica.
        self.producer_state = ProducerStateManager(tp)

    def __setattr__(self, name: str, value: object) -> None:
        # Only writes pay for the check (a handful in a replica's life, and each swap); reads stay plain attribute
        # loads, which the append path makes several of per request.
        object.__setattr__(self, name, value)
        if name in _LAYOUT_FIELDS:
            _layout_changed()

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

    def append(self, records: bytes | bytearray, parsed: Sequence[BatchHeader] = ()) -> AppendInfo:
        """Append whole v2 batches to the current log under the replica lock. `parsed`: the headers of its first
        batches when the caller already parsed them (record_batch.validate_batches); their CRCs are checked here.

        Batches of idempotent producers go through the producer state (storage/producer_state.py): a retried batch
        returns its original offsets unwritten; a sequence or epoch error raises ProducerStateError. Raises
        CorruptRecordError, RecordTooLargeError, KafkaStorageError (offline) and the OSError of the disk, which the
        caller (LogManager's storage guard) turns into a failed dir."""
        headers = record_batch.validate_batches(records, parsed)
        if not headers:
            raise CorruptRecordError("no record batch to append")
        state = self.producer_state
        idempotent = record_batch.any_idempotent(headers)
        log = self.log
        if idempotent and not state.loaded and log is not None:
            state.prepare(log)  # the first build's log walk, outside the lock
        with self.lock:
            return state.append(self.current_log(), records, headers, idempotent)

    def try_append(self, records: bytes | bytearray, parsed: Sequence[BatchHeader] = ()) -> AppendInfo | None:
        """`append`, if it can be done at once without waiting: the lock is free, the batches fit the active segment
        (no roll, so no fsync), and the producer state needs no file I/O. None: nothing was done (not even
        validated); the caller runs `append` where it may block. For small appends on the event loop: the CRC check
        runs under the lock here, which costs microseconds for the sizes the caller lets through."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            log = self.current_log()
            if not log.append_fits_active(len(records)):
                return None
            headers = record_batch.validate_batches(records, parsed)
            if not headers:
                raise CorruptRecordError("no record batch to append")
            state = self.producer_state
            idempotent = record_batch.any_idempotent(headers)
            if state.append_needs_io(idempotent):
                return None
            return state.append(log, records, headers, idempotent)
        finally:
            self.lock.release()

    def __repr__(self) -> str:
        state = "offline" if self.offline else "online"
        return f"Replica({self.tp}, {self.log_dir}, {state}{', moving' if self.move else ''})"
