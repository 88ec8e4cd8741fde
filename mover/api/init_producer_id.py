"""InitProducerId (key 22, v0-4): producer ids for idempotent producers.

Ids come from blocks of PRODUCER_ID_BLOCK_SIZE reserved on disk before any id of the block is handed out, like
Kafka's ProducerIdManager reserves blocks in ZooKeeper (/latest_producer_id_block) or the KRaft controller. The
reservation is the file PRODUCER_ID_BLOCK_FILE in every online log dir. The first block of a process begins at the
largest of: the largest reservation found in any readable dir, the highest producer id any loaded log holds plus one
(`LogManager.highest_producer_id`), and FIRST_PRODUCER_ID. The logs may hold ids no reservation of ours covers,
handed out by a Kafka broker (its controller's blocks) that ran on these dirs before, and an id a partition's
producer state already holds would have its new producer's first batch refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
FIRST_PRODUCER_ID keeps the other direction safe: a Kafka controller counts from 0 in blocks of 1000 and never looks
at the logs, so moverd's ids sit where it will never get, and a Kafka broker started on the dirs later never gives a
producer an id moverd gave (docs/operations.md, "Handing log dirs back to Kafka"). So a restart, even a kill -9,
never hands out an id twice (at worst it skips the rest of a block), nor one the logs hold, nor one Kafka will.

Each answer has epoch 0: a non-transactional producer that re-initialises always gets a new id (Kafka's
TransactionCoordinator does the same for a null transactional id).

Transactions are not served: a request with a transactional id gets COORDINATOR_NOT_AVAILABLE, which is what a
Kafka broker without a usable transaction coordinator answers (e.g. one broker whose __transaction_state topic
cannot get its default replication factor of 3). Transactional producers also need FindCoordinator, which this
broker does not serve, so they fail before they get here.

Crash-safety invariants:
* The block file is replaced atomically (tmp, fsync, rename, fsync dir: storage/files.atomic_write) and is
  written, in every online dir, before an id of the block is returned.
* It holds the end of the highest block ever reserved; ids only grow. If every dir that saw the latest
  reservation is unreadable at the next start while a dir holding an older one is readable, ids could repeat:
  the one case this does not cover (Kafka's ZooKeeper block has no such case, having a single home).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from mover.errors import KafkaStorageError
from mover.server import Handler, Route
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import INIT_PRODUCER_ID

if TYPE_CHECKING:
    from mover.api.broker import Broker
    from mover.log.log_manager import LogManager

log = logging.getLogger(__name__)

Body = dict[str, Any]

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: one disk write per thousand producers.
PRODUCER_ID_BLOCK_SIZE = 1000
# Where moverd's ids begin: 2^48, which a Kafka controller handing out 1000 ids per block request would reach after
# 2.8e11 requests, i.e. never; and far below where int64 ids end (Kafka refuses blocks past Long.MAX_VALUE).
FIRST_PRODUCER_ID = 1 << 48
# In the log dir's root, next to the checkpoints; recovery and Kafka ignore files there that are not partitions.
PRODUCER_ID_BLOCK_FILE = "mover-producer-id-block"
# First line of the file, as Kafka's checkpoint files start with their format version.
_FILE_VERSION = 0


class ProducerIdManager:
    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self._lock = threading.Lock()
        self._next = -1  # next id to hand out; -1 = nothing reserved yet in this process
        self._end = -1  # end (exclusive) of the reserved block

    def generate(self) -> int:
        """A fresh producer id. KafkaStorageError when no log dir could record the reservation, ResourceLimitError
        when a process limit kept a copy of it from being read (the log layer's `storage_guard` decides which
        failure takes a dir offline: the dirs' I/O is the LogManager's, not this module's)."""
        with self._lock:
            if self._next < 0 or self._next >= self._end:
                start = max(self._end, self._stored_end(), FIRST_PRODUCER_ID)
                if self._next < 0:
                    # Once per process: later ids in the logs are ours (a client keeping an id another broker gave
                    # it is the exception docs/operations.md names).
                    start = max(start, self.manager.highest_producer_id() + 1)
                self._reserve(start + PRODUCER_ID_BLOCK_SIZE)
                self._next = start
            pid = self._next
            self._next += 1
            return pid

    def _stored_end(self) -> int:
        best = 0
        for path, data in self.manager.read_broker_file(PRODUCER_ID_BLOCK_FILE).items():
            try:
                best = max(best, parse_block_end(data))
            except ValueError as e:
                log.warning("cannot read %s: %s", path / PRODUCER_ID_BLOCK_FILE, e)
        return best

    def _reserve(self, end: int) -> None:
        written = self.manager.write_broker_file(PRODUCER_ID_BLOCK_FILE, f"{_FILE_VERSION}\n{end}\n".encode())
        if not written:
            raise KafkaStorageError("no online log dir could record the producer id block")
        self._end = end
        log.info("reserved producer ids up to %d", end)


def parse_block_end(data: bytes) -> int:
    """The end of the reservation a block file records; ValueError when it is not such a file."""
    lines = data.decode("ascii").split()  # UnicodeDecodeError is a ValueError
    if len(lines) != 2 or lines[0] != str(_FILE_VERSION):
        raise ValueError(f"unexpected content {lines!r}")
    return int(lines[1])


def routes(broker: Broker) -> dict[int, Handler | Route]:
    ids = ProducerIdManager(broker.manager)

    def init_producer_id(header: RequestHeader, request: Body) -> Body:
        if request["transactional_id"] is not None:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    "producer_id": -1, "producer_epoch": -1}
        try:
            pid = ids.generate()
        except KafkaStorageError as e:
            log.error("cannot allocate a producer id: %s", e)
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    return {INIT_PRODUCER_ID.key: init_producer_id}
