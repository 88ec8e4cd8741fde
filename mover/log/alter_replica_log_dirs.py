"""AlterReplicaLogDirs: whether each replica may move to the log dir a request names, the moves that start, and the
KIP-179 request they make (Kafka's ReplicaManager.alterReplicaLogDirs, the log side of KIP-113).

It works on the LogDirs the LogManager owns (the registry, the structural lock, `storage_guard`) and on the moves
manager (start, cancel, remembered destinations, request ids); it calls nothing above it. The moves manager decides
how a move runs; this decides only whether one may start, under the structural lock, and starts or cancels it.
The ZooKeeper hook that turns a local request id into a cluster-wide one stays the LogManager's
(`LogManager.request_recorder`, set and cleared by mover/zk); this is given a way to read it (`recorder`) and reads
it once the moves have started, as the request is recorded.

Its only storage call is the destination's `disk_usage`, inside `storage_guard`. A cancel of a move that never ran
ends it on the spot, and its outcome reaches MoveOutcomes through the moves manager (which retires a resumed copy).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.errors import (
    ApiError,
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)
from mover.log.log_dirs import LogDirs
from mover.moves import ReplicaAlterLogDirsManager, ReplicaMove
from mover.storage.log_dir import disk_usage
from mover.storage.names import TopicPartition, fits_file_name_limit
from mover.wire.messages.log_dirs import ANY_LOG_DIR

log = logging.getLogger(__name__)

# Free space a move must leave on its destination besides the partition's own bytes: room for the appends that
# arrive while it copies and for the file system's own metadata.
MOVE_SPACE_MARGIN = 16 * 1024 * 1024

# ZooKeeper coordination's hook (mover/zk): (local request id, [(partition, destination)]) -> cluster-wide request id.
RequestRecorder = Callable[[int, list[tuple[TopicPartition, str]]], int]


class AlterReplicaLogDirs:
    def __init__(self, config: BrokerConfig, logs: LogDirs, moves: ReplicaAlterLogDirsManager,
                 recorder: Callable[[], RequestRecorder | None]) -> None:
        self.config = config
        self._logs = logs
        self._moves = moves
        self._recorder = recorder

    def alter(
        self, assignments: Iterable[tuple[TopicPartition, str]], *, record: bool = True,
        messages: dict[TopicPartition, str] | None = None,
    ) -> tuple[dict[TopicPartition, int], int | None]:
        """A whole AlterReplicaLogDirs request: duplicate entries, last wins. Returns the error code per partition
        and the KIP-179 request id when at least one move was started or redirected. `messages` receives each
        error's text. With `record` (a client's request) the request recorder, when set (ZooKeeper), turns the local
        request id into a cluster-wide one, outside the structural lock; a reassignment read from ZooKeeper passes
        record=False."""
        wanted: dict[TopicPartition, str] = {}
        for tp, path in assignments:
            wanted.pop(tp, None)
            wanted[tp] = path
        codes: dict[TopicPartition, int] = {}
        started: list[ReplicaMove] = []
        with self._logs.lock:
            for tp, path in wanted.items():
                try:
                    move = self._alter(tp, path)
                    codes[tp] = 0
                    if move is not None:
                        started.append(move)
                except ApiError as e:
                    log.info("alter log dir of %s to %s: %s (%d)", tp, path, e, e.code)
                    codes[tp] = e.code
                    if messages is not None:
                        messages[tp] = str(e)
            request_id = self._moves.begin_request(started)
        recorder = self._recorder()
        if request_id is not None and record and recorder is not None:
            request_id = recorder(request_id, [(m.tp, str(m.destination_dir)) for m in started])
        if request_id is not None:
            log.info("move request %d: %d moves", request_id, len(started))
        return codes, request_id

    def _alter(self, tp: TopicPartition, path: str) -> ReplicaMove | None:
        """Returns the move it started, or None when it started none. The caller holds the structural lock."""
        if not fits_file_name_limit(tp):
            raise InvalidTopicError(f"{tp} is too long for a .move directory name")
        moves = self._moves
        replica = self._logs.replicas.get(tp)
        if path == ANY_LOG_DIR:
            # "any": the broker may keep the replica where it is; a running move is cancelled (KIP-113).
            if replica is None:
                moves.remembered.forget(tp)
                raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
            moves.cancel(replica)
            return None
        dest = Path(path)
        state = self._logs.dirs.get(dest)
        if not os.path.isabs(path) or state is None or str(dest) != path:
            raise LogDirNotFoundError(f"{path} is not a log dir of this broker")
        if not state.online:
            raise KafkaStorageError(f"log dir {path} is offline")
        if dest in self.config.cordoned_dirs() and (replica is None or replica.log_dir != dest):
            # Kafka 4.3 (KIP-1066) checks this right after "offline". It also refuses the dir the replica is already
            # in, which is how a move is cancelled; here that stays allowed, since nothing new lands by staying
            # (docs/cordons.md): cancelling the drain of a cordoned dir must work.
            raise InvalidReplicaAssignmentError(f"Log directory {path} is cordoned")
        if replica is None:
            moves.remembered.remember(tp, dest)
            topics = self._logs.topics
            if tp.topic not in topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {tp.topic}; {tp} will be created in {path}")
            if tp.partition >= topics[tp.topic]:
                raise UnknownTopicOrPartitionError(f"unknown partition {tp}; it will be created in {path}")
            raise ReplicaNotAvailableError(f"{tp} is not here yet; it will be created in {path}")
        if replica.offline:
            raise KafkaStorageError(f"{tp} is offline")
        if replica.log_dir == dest:
            moves.cancel(replica)
            return None
        if replica.move is not None:
            if replica.move.destination_dir == dest and not replica.move.state.done:
                return None
            moves.cancel(replica)
        current = replica.current_log()
        with self._logs.storage_guard(dest, f"log dir {path} failed"):
            _, usable = disk_usage(dest)
        if current.size + MOVE_SPACE_MARGIN > usable:
            # Refuse up front rather than fill the disk and fail half-way (Kafka offers no such check).
            raise KafkaStorageError(
                f"{tp} needs {current.size} bytes plus {MOVE_SPACE_MARGIN} margin; {path} has {usable}")
        return moves.start(replica, dest)
