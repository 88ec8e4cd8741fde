"""LogManager: owns the broker's log dirs and replicas; everything above it (API handlers, the daemon) calls here.

Invariants:
* A replica is in exactly one log dir at a time (`Replica.log_dir`); a move adds a `.move` copy in a second dir,
  and the copy becomes the replica only through ReplicaMove's swap.
* A log dir that raised an I/O error is offline until restart: its replicas answer KAFKA_STORAGE_ERROR, moves
  touching it stop, and nothing is ever written to it again. Every other dir keeps working.
* Structural changes (create, delete, start/cancel a move, a dir failing) take `_lock`; copying never holds it, and
  appends take only their replica's lock.
* Checkpoint files list exactly the partitions whose current copy lives in that dir; after a swap both dirs'
  checkpoints are rewritten, so the entries follow the partition.
"""

from __future__ import annotations

import base64
import errno
import heapq
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import recovery
from mover.config import BrokerConfig, parse_properties
from mover.dynamic_broker_config import DynamicBrokerConfig
from mover.errors import (
    ApiError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    ReplicaNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from mover.faults import crash_point
from mover.move_requests import MoveRequests
from mover.replica import Replica
from mover.replica_move import MoveState, ReplicaMove
from mover.replica_move_pool import ReplicaMovePool
from mover.storage import record_batch
from mover.storage.log import AppendInfo, Log, LogConfig
from mover.storage.log_dir import LogDir, disk_usage
from mover.storage.names import (
    LOG_SUFFIX,
    META_PROPERTIES,
    DirKind,
    TopicPartition,
    current_dir_name,
    delete_dir_name,
    fits_file_name_limit,
    is_valid_topic_name,
    parse_partition_dir,
    parse_segment_file_name,
)
from mover.storage.producer_state import carries_producer_id
from throttle.token_bucket import TokenBucket

log = logging.getLogger(__name__)

ANY_DIR = "any"

# Free space a move must leave on its destination besides the partition's own bytes: room for the appends that
# arrive while it copies and for the file system's own metadata.
MOVE_SPACE_MARGIN = 16 * 1024 * 1024

# Opening logs is I/O bound (stat, one header walk per partition); a few threads hide the latency.
OPEN_THREADS = 8


# Destinations remembered for replicas not here yet (KIP-113 keeps them in memory, Kafka without a bound). Ten times
# the 10,000 partitions a broker commonly carries; past it the oldest is forgotten, so a flood of requests for
# names that never appear cannot grow the daemon without limit.
MAX_REMEMBERED = 100_000


@dataclass
class LogDirState:
    path: Path
    log_dir: LogDir | None
    error: str | None = None

    @property
    def online(self) -> bool:
        return self.error is None


@dataclass
class PartitionInfo:
    tp: TopicPartition
    size: int
    offset_lag: int
    is_future: bool


@dataclass
class LogDirInfo:
    path: Path
    error_code: int
    partitions: list[PartitionInfo] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(order=True)
class _PendingDelete:
    due: float
    path: Path = field(compare=False)
    old_log: Log | None = field(compare=False, default=None)


class LogManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.dirs: dict[Path, LogDirState] = {}
        self.replicas: dict[TopicPartition, Replica] = {}
        self.topics: dict[str, int] = {}  # topic -> partition count
        self.cluster_id: str = config.cluster_id or ""
        self.bucket = TokenBucket(config.throttle_rate)
        self.pool = ReplicaMovePool(config.move_threads)
        self.remembered: dict[TopicPartition, Path] = {}
        self.finished_moves: list[ReplicaMove] = []
        self._lock = threading.RLock()
        self._deletes: list[_PendingDelete] = []
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._housekeeper: threading.Thread | None = None
        self._started = False
        self.listeners: list[object] = []  # move observers (metrics)
        # Called with the partition after every append, from the appending thread: must be cheap and never block.
        self.append_listeners: list[Callable[[TopicPartition], None]] = []
        self.requests = MoveRequests(config.reassign_status_retention_ms)
        # Set by ZooKeeper coordination (mover/zk): (local request id, [(partition, destination)]) -> request id.
        self.request_recorder: Callable[[int, list[tuple[TopicPartition, str]]], int] | None = None
        # Run-time settings (throttle, move threads) layered over server.properties; loaded at start-up before
        # any interrupted move resumes, so a resumed move runs at the operator's last throttle, not the static one.
        self.dynamic_config = DynamicBrokerConfig(config, self)

    # ------------------------------------------------------------------ life cycle

    def startup(self) -> None:
        t0 = time.monotonic()
        self.cluster_id = self.cluster_id or self._find_cluster_id()
        for path in self.config.log_dirs:
            self._open_dir(path)
        online = [s.path for s in self.dirs.values() if s.online]
        self.requests.load(online)
        self.dynamic_config.load(online)
        if not online:
            log.error("no log dir is online; moverd runs, but every partition is offline")
        result = recovery.recover(
            list(self.config.log_dirs),
            leo_of=read_log_end_offset,
            schedule_delete=lambda p: self._schedule_delete(p, None, delay=True),
            logger=log,
        )
        for path, err in result.failed_dirs.items():
            self._mark_offline(path, err)
        self._open_logs(result)
        self.pool.start()
        for tp, _source_dir, move_path in result.resume:
            replica = self.replicas.get(tp)
            if replica is None or replica.offline or not self.dirs[move_path.parent].online:
                continue
            self.requests.adopt(self._start_move(replica, move_path.parent, resume=True))
        self._housekeeper = threading.Thread(target=self._housekeeping, name="log-housekeeping", daemon=True)
        self._housekeeper.start()
        self._started = True
        log.info("log manager ready: %d log dirs (%d online), %d partitions, %d moves resumed in %.2fs",
                 len(self.dirs), sum(s.online for s in self.dirs.values()), len(self.replicas),
                 len(result.resume), time.monotonic() - t0)

    def shutdown(self) -> None:
        """Stop moves (their `.move` stays and resumes at the next start), flush, checkpoint, release locks."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        for move in self.pool.shutdown():
            move.stop()
            self._detach(move)
        if self._housekeeper is not None:
            self._housekeeper.join(10)
        for state in self.dirs.values():
            if not state.online:
                continue
            for replica in self._replicas_in(state.path):
                with replica.lock:
                    if replica.log is not None and not replica.offline:
                        try:
                            replica.log.flush()
                        except OSError as e:
                            self.dir_failed(state.path, e)
            self._write_checkpoints(state.path)
        for replica in self.replicas.values():
            if replica.log is not None:
                try:
                    replica.log.close()
                except OSError:
                    pass
        for state in self.dirs.values():
            if state.log_dir is not None:
                state.log_dir.close()
        log.info("log manager stopped")

    def housekeeping_alive(self) -> bool:
        """Whether the housekeeping thread (retention, flushes, deletes, dir probes) still runs: a health check."""
        return self._housekeeper is not None and self._housekeeper.is_alive()

    def _find_cluster_id(self) -> str:
        return find_cluster_id(self.config.log_dirs) or new_cluster_id()

    def _open_dir(self, path: Path) -> None:
        log_dir = LogDir(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            log_dir.open(self.config.broker_id, self.cluster_id)
        except OSError as e:
            # A dir unreadable at start-up starts offline; the daemon still starts (Kafka does the same).
            log.error("log dir %s is offline: %s", path, e)
            self.dirs[path] = LogDirState(path, None, f"{type(e).__name__}: {e}")
            return
        self.dirs[path] = LogDirState(path, log_dir)

    def _open_logs(self, result: recovery.RecoveryResult) -> None:
        offline = result.offline
        jobs: list[tuple[TopicPartition, Path, int, int]] = []
        for state in self.dirs.values():
            if not state.online or state.log_dir is None:
                continue
            checkpoints = state.log_dir.read_checkpoints()
            recovery_points = checkpoints.get("recovery-point-offset-checkpoint", {})
            start_offsets = checkpoints.get("log-start-offset-checkpoint", {})
            try:
                entries = os.listdir(state.path)
            except OSError as e:
                self._mark_offline(state.path, f"{type(e).__name__}: {e}")
                continue
            for name in entries:
                parsed = parse_partition_dir(name)
                if parsed is None or parsed.kind is not DirKind.CURRENT or parsed.tp in offline:
                    continue
                tp = parsed.tp
                jobs.append((tp, state.path, recovery_points.get(tp, 0), start_offsets.get(tp, 0)))
        cfg = self.log_config()

        def open_one(job: tuple[TopicPartition, Path, int, int]) -> tuple[TopicPartition, Path, Log | OSError]:
            tp, dir_path, rp, lso = job
            try:
                return tp, dir_path, Log.open(dir_path / current_dir_name(tp), tp, cfg, recovery_point=rp,
                                              log_start_offset=lso)
            except OSError as e:
                return tp, dir_path, e

        with ThreadPoolExecutor(OPEN_THREADS) as ex:
            for tp, dir_path, opened in ex.map(open_one, jobs):
                if isinstance(opened, OSError):
                    self._mark_offline(dir_path, f"{type(opened).__name__}: {opened}")
                    continue
                self.replicas[tp] = Replica(tp, opened, dir_path)
                self._note_topic(tp)
        for tp, (paths, reason) in offline.items():
            replica = Replica(tp, None, paths[0].parent if paths else Path("/"))
            replica.offline_reason = reason
            replica.offline_paths = list(paths)
            self.replicas[tp] = replica
            self._note_topic(tp)
            log.error("partition %s is offline: %s (%s)", tp, reason, ", ".join(map(str, paths)))
        for state in self.dirs.values():
            if not state.online:
                continue
            for replica in self._replicas_in(state.path):
                replica.offline_reason = None

    def log_config(self) -> LogConfig:
        c = self.config
        return LogConfig(
            segment_bytes=c.log_segment_bytes,
            retention_bytes=c.log_retention_bytes,
            retention_ms=c.log_retention_ms,
            index_interval_bytes=c.log_index_interval_bytes,
        )

    # ------------------------------------------------------------------ topics and partitions

    def _note_topic(self, tp: TopicPartition) -> None:
        self.topics[tp.topic] = max(self.topics.get(tp.topic, 0), tp.partition + 1)

    def replica(self, tp: TopicPartition) -> Replica:
        replica = self.replicas.get(tp)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
        return replica

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     *, validate_only: bool = False) -> None:
        if not is_valid_topic_name(name) or not fits_file_name_limit(TopicPartition(name, num_partitions)):
            raise InvalidTopicError(f"invalid topic name {name!r}")
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if num_partitions < 1:
            raise InvalidPartitionsError("the number of partitions must be at least 1")
        if replication_factor not in (1, -1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 broker available")
        with self._lock:
            if name in self.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            if validate_only:
                return
            placed: dict[Path, int] = {}
            for p in range(num_partitions):
                tp = TopicPartition(name, p)
                dir_path = self._choose_dir(tp, placed)
                placed[dir_path] = placed.get(dir_path, 0) + 1
                self._create_partition(tp, dir_path)
        log.info("created topic %s with %d partitions", name, num_partitions)

    def _choose_dir(self, tp: TopicPartition, placed: dict[Path, int]) -> Path:
        """A remembered destination if online, else the live dir with the most usable bytes.

        Kafka picks the dir with the fewest partitions, which is why JBOD disks drift out of balance: a disk
        of small partitions and one of large ones count the same. Within 1% of the best free space, the dir
        that got fewer of this request's partitions wins, so one topic's partitions still spread."""
        remembered = self.remembered.pop(tp, None)
        if remembered is not None and self.dirs.get(remembered) and self.dirs[remembered].online:
            return remembered
        candidates = []
        for state in self.dirs.values():
            if not state.online:
                continue
            try:
                _, usable = disk_usage(state.path)
            except OSError as e:
                self.dir_failed(state.path, e)
                continue
            candidates.append((state.path, usable))
        if not candidates:
            raise KafkaStorageError("no log dir is online")
        best = max(u for _, u in candidates)
        near = [(placed.get(p, 0), -u, str(p), p) for p, u in candidates if u >= best * 0.99]
        return min(near)[3]

    def _create_partition(self, tp: TopicPartition, dir_path: Path) -> Replica:
        try:
            new_log = Log.open(dir_path / current_dir_name(tp), tp, self.log_config())
        except OSError as e:
            self.dir_failed(dir_path, e)
            raise KafkaStorageError(f"cannot create {tp} in {dir_path}: {e}") from e
        replica = Replica(tp, new_log, dir_path)
        self.replicas[tp] = replica
        self._note_topic(tp)
        self._write_checkpoints(dir_path)
        return replica

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if name not in self.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            victims = [r for tp, r in self.replicas.items() if tp.topic == name]
            del self.topics[name]
            for replica in victims:
                del self.replicas[replica.tp]
                if replica.move is not None:
                    replica.move.cancel()
        for replica in victims:
            if replica.move is not None:
                replica.move.wait(30)
            with replica.lock:
                old = replica.log
                replica.log = None
                replica.offline_reason = "deleted"
                if old is None or not self.dirs[replica.log_dir].online:
                    continue
                target = old.dir.parent / delete_dir_name(replica.tp)
                try:
                    # Retire the whole partition dir in one atomic step; the bytes go later, in the background.
                    os.rename(old.dir, target)
                    old.rename_dir(target)
                except OSError as e:
                    self.dir_failed(replica.log_dir, e)
                    continue
            self._write_checkpoints(replica.log_dir)
            self._schedule_delete(target, old, delay=True)
        log.info("deleted topic %s", name)

    def append(self, tp: TopicPartition, records: bytes | bytearray) -> AppendInfo:
        """Append whole v2 batches to the replica's current log, under the replica lock (see Replica).

        Batches of idempotent producers go through the replica's producer state (storage/producer_state.py): a
        retried batch returns its original offsets unwritten; a sequence or epoch error raises ProducerStateError.
        Then the append listeners (Fetch's long-poll wake-up) hear of it, outside the lock."""
        replica = self.replica(tp)
        state = replica.producer_state
        if not state.loaded and carries_producer_id(records) and replica.log is not None:
            state.prepare(replica.log)  # the first build's log walk, outside the lock
        with replica.lock:
            current = replica.current_log()
            try:
                info = state.append(current, records)
            except OSError as e:
                self.dir_failed(replica.log_dir, e)
                raise KafkaStorageError(f"append to {tp} failed: {e}") from e
        for listener in self.append_listeners:
            listener(tp)
        return info

    # ------------------------------------------------------------------ moves

    def alter_replica_log_dir(self, tp: TopicPartition, path: str) -> int:
        """KIP-113's AlterReplicaLogDirs for one partition; returns a Kafka error code. Checks in Kafka's order."""
        return self.alter_replica_log_dirs([(tp, path)])[0][tp]

    def alter_replica_log_dirs(
        self, assignments: Iterable[tuple[TopicPartition, str]], *, record: bool = True,
        messages: dict[TopicPartition, str] | None = None,
    ) -> tuple[dict[TopicPartition, int], int | None]:
        """A whole AlterReplicaLogDirs request: duplicate entries, last wins. Returns the error code per partition
        and the KIP-179 request id when at least one move was started or redirected. `messages` receives each
        error's text. With `record` (a client's request) the `request_recorder`, when set (ZooKeeper), turns the
        local request id into a cluster-wide one; a reassignment read from ZooKeeper passes record=False."""
        wanted: dict[TopicPartition, str] = {}
        for tp, path in assignments:
            wanted.pop(tp, None)
            wanted[tp] = path
        codes: dict[TopicPartition, int] = {}
        started: list[ReplicaMove] = []
        with self._lock:
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
            request_id = self.requests.begin(started)
        recorder = self.request_recorder
        if request_id is not None and record and recorder is not None:
            request_id = recorder(request_id, [(m.tp, str(m.destination_dir)) for m in started])
        if request_id is not None:
            log.info("move request %d: %d moves", request_id, len(started))
        return codes, request_id

    def _alter(self, tp: TopicPartition, path: str) -> ReplicaMove | None:
        """Returns the move it started, or None when it started none."""
        if not fits_file_name_limit(tp):
            raise InvalidTopicError(f"{tp} is too long for a .move directory name")
        with self._lock:
            replica = self.replicas.get(tp)
            if path == ANY_DIR:
                # "any": the broker may keep the replica where it is; a running move is cancelled (KIP-113).
                if replica is None:
                    self.remembered.pop(tp, None)
                    raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
                self._cancel_move(replica)
                return None
            dest = Path(path)
            state = self.dirs.get(dest)
            if not os.path.isabs(path) or state is None or str(dest) != path:
                raise LogDirNotFoundError(f"{path} is not a log dir of this broker")
            if not state.online:
                raise KafkaStorageError(f"log dir {path} is offline")
            if replica is None:
                self.remembered.pop(tp, None)  # re-inserted last: the newest request is the last evicted
                self.remembered[tp] = dest
                if len(self.remembered) > MAX_REMEMBERED:
                    del self.remembered[next(iter(self.remembered))]
                if tp.topic not in self.topics:
                    raise UnknownTopicOrPartitionError(f"unknown topic {tp.topic}; {tp} will be created in {path}")
                if tp.partition >= self.topics[tp.topic]:
                    raise UnknownTopicOrPartitionError(f"unknown partition {tp}; it will be created in {path}")
                raise ReplicaNotAvailableError(f"{tp} is not here yet; it will be created in {path}")
            if replica.offline:
                raise KafkaStorageError(f"{tp} is offline")
            if replica.log_dir == dest:
                self._cancel_move(replica)
                return None
            if replica.move is not None:
                if replica.move.destination_dir == dest and not replica.move.state.done:
                    return None
                self._cancel_move(replica)
            current = replica.current_log()
            try:
                _, usable = disk_usage(dest)
            except OSError as e:
                self.dir_failed(dest, e)
                raise KafkaStorageError(f"log dir {path} failed: {e}") from e
            if current.size + MOVE_SPACE_MARGIN > usable:
                # Refuse up front rather than fill the disk and fail half-way (Kafka offers no such check).
                raise KafkaStorageError(
                    f"{tp} needs {current.size} bytes plus {MOVE_SPACE_MARGIN} margin; {path} has {usable}")
            return self._start_move(replica, dest)

    def _start_move(self, replica: Replica, dest: Path, *, resume: bool = False) -> ReplicaMove:
        move = ReplicaMove(replica, replica.log_dir, dest, self.bucket, self, resume=resume)
        move.bytes_total = replica.log.size if replica.log is not None else 0
        replica.move = move  # pauses retention until move_ended
        for listener in self.listeners:
            getattr(listener, "move_started", lambda m: None)(move)
        self.pool.submit(move)
        log.info("%s move of %s from %s to %s", "resuming" if resume else "queued", replica.tp,
                 replica.log_dir, dest)
        return move

    def _cancel_move(self, replica: Replica) -> None:
        move = replica.move
        if move is None:
            return
        move.cancel()
        if self.pool.unqueue(move):
            # Never started: there is no thread to clean up after it.
            move.run()

    def cancel_move(self, tp: TopicPartition) -> bool:
        with self._lock:
            replica = self.replicas.get(tp)
            if replica is None or replica.move is None:
                return False
            self._cancel_move(replica)
            return True

    def set_throttle(self, rate: int | None) -> None:
        self.bucket.set_rate(rate)
        self.config.throttle_rate = rate
        log.info("intra-broker throttle set to %s", "unlimited" if rate is None else f"{rate} B/s")

    def set_move_threads(self, n: int | None) -> None:
        self.config.num_move_threads = n
        self.pool.resize(self.config.move_threads)

    # MoveHost: called by moves from their threads.

    def dir_failed(self, path: Path, err: OSError | str) -> None:
        with self._lock:
            self._mark_offline(path, f"{type(err).__name__}: {err}" if isinstance(err, OSError) else err)

    def _mark_offline(self, path: Path, reason: str) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online:
            return
        state.error = reason
        self.requests.set_dirs(self.online_dirs())
        log.error("log dir %s is now offline: %s", path, reason)
        for replica in list(self.replicas.values()):
            move = replica.move
            if replica.log_dir == path:
                replica.offline_reason = f"log dir {path} is offline"
                if move is not None:
                    move.fail(f"source log dir {path} failed")
            elif move is not None and move.destination_dir == path:
                move.fail(f"destination log dir {path} failed")
        for tp, dest in list(self.remembered.items()):
            if dest == path:
                del self.remembered[tp]

    def swapped(self, move: ReplicaMove, old_log: Log, delete_path: Path) -> None:
        for d in (move.source_dir, move.destination_dir):
            self._write_checkpoints(d)
        self._schedule_delete(delete_path, old_log, delay=True)

    def move_ended(self, move: ReplicaMove) -> None:
        self._detach(move)

    def _detach(self, move: ReplicaMove) -> None:
        with self._lock:
            if move.replica.move is move:
                move.replica.move = None  # retention resumes, whatever way the move ended
            if move.state is not MoveState.STOPPED:
                self.finished_moves.append(move)
                del self.finished_moves[:-1000]
        self.requests.move_ended(move)
        for listener in self.listeners:
            getattr(listener, "move_ended", lambda m: None)(move)

    def moves(self) -> list[ReplicaMove]:
        with self._lock:
            return [r.move for r in self.replicas.values() if r.move is not None]

    # ------------------------------------------------------------------ describe

    def describe_log_dirs(self, topics: dict[str, list[int] | None] | None = None) -> list[LogDirInfo]:
        """One entry per configured dir. `topics` None = every partition; {topic: None} = all its partitions."""

        def wanted(tp: TopicPartition) -> bool:
            if topics is None:
                return True
            parts = topics.get(tp.topic, [])
            return parts is None or tp.partition in parts

        out: dict[Path, LogDirInfo] = {}
        for state in self.dirs.values():
            if not state.online:
                out[state.path] = LogDirInfo(state.path, KafkaStorageError.code)
                continue
            try:
                total, usable = disk_usage(state.path)
            except OSError as e:
                self.dir_failed(state.path, e)
                out[state.path] = LogDirInfo(state.path, KafkaStorageError.code)
                continue
            out[state.path] = LogDirInfo(state.path, 0, [], total, usable)
        for replica in list(self.replicas.values()):
            if not wanted(replica.tp):
                continue
            current = replica.log
            info = out.get(replica.log_dir)
            if current is not None and not replica.offline and info is not None and info.error_code == 0:
                lag = max(current.high_watermark - current.log_end_offset, 0)
                info.partitions.append(PartitionInfo(replica.tp, current.size, lag, False))
            move = replica.move
            if move is not None and current is not None and not move.state.done:
                dest = out.get(move.destination_dir)
                if dest is not None and dest.error_code == 0:
                    lag = max(current.log_end_offset - move.copied_log_end_offset(), 0)
                    dest.partitions.append(PartitionInfo(replica.tp, move.bytes_copied, lag, True))
        return [out[p] for p in self.config.log_dirs]

    # ------------------------------------------------------------------ checkpoints, deletes, retention

    def _replicas_in(self, path: Path) -> list[Replica]:
        return [r for r in list(self.replicas.values()) if r.log_dir == path and r.log is not None]

    def _write_checkpoints(self, path: Path) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online or state.log_dir is None:
            return
        logs = [r.log for r in self._replicas_in(path) if r.log is not None and not r.offline]
        try:
            state.log_dir.write_checkpoints(
                {lg.tp: lg.recovery_point for lg in logs},
                {lg.tp: lg.log_start_offset for lg in logs},
                {lg.tp: lg.high_watermark for lg in logs},
            )
        except OSError as e:
            self.dir_failed(path, e)

    def _schedule_delete(self, path: Path, old_log: Log | None, *, delay: bool) -> None:
        due = time.monotonic() + (self.config.log_segment_delete_delay_ms / 1000 if delay else 0)
        with self._lock:
            heapq.heappush(self._deletes, _PendingDelete(due, path, old_log))
            self._wake.notify_all()

    def pending_deletes(self) -> list[Path]:
        with self._lock:
            return [d.path for d in self._deletes]

    def _housekeeping(self) -> None:
        next_retention = time.monotonic() + self.config.log_retention_check_interval_ms / 1000
        next_flush = time.monotonic() + self.config.log_flush_interval_ms / 1000
        next_probe = time.monotonic() + self.config.log_dir_health_check_interval_ms / 1000
        while True:
            with self._lock:
                if self._stopping:
                    return
                now = time.monotonic()
                due = [heapq.heappop(self._deletes) for _ in range(len(self._deletes))
                       if self._deletes and self._deletes[0].due <= now]
                if not due:
                    wake_at = min([next_retention, next_flush, next_probe] + [d.due for d in self._deletes[:1]])
                    self._wake.wait(max(0.0, min(wake_at - now, 1.0)))
            for item in due:
                self._delete_now(item)
            now = time.monotonic()
            if now >= next_retention:
                self.run_retention()
                next_retention = now + self.config.log_retention_check_interval_ms / 1000
            if now >= next_flush:
                self.flush_all()
                next_flush = now + self.config.log_flush_interval_ms / 1000
            if now >= next_probe:
                self.probe_dirs()
                next_probe = now + self.config.log_dir_health_check_interval_ms / 1000

    def probe_dirs(self) -> None:
        """Look for failed dirs between I/O: files already open keep working after `chmod 000` or a disk
        going read-only, so without a probe a failure would surface only at the next roll or checkpoint."""
        for state in list(self.dirs.values()):
            if not state.online:
                continue
            try:
                fd = os.open(state.path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fstatvfs(fd)
                    try:
                        # Searching the dir needs the execute bit, which `chmod 000` also removes.
                        os.stat(META_PROPERTIES, dir_fd=fd)
                    except FileNotFoundError:
                        pass
                finally:
                    os.close(fd)
            except OSError as e:
                self.dir_failed(state.path, e)

    def _delete_now(self, item: _PendingDelete) -> None:
        if item.old_log is not None:
            try:
                item.old_log.close()
            except OSError:
                pass
        try:
            entries = sorted(os.listdir(item.path))
            for i, name in enumerate(entries):
                os.unlink(item.path / name)
                if i == 0:
                    crash_point("delete.during")
            os.rmdir(item.path)
            log.info("deleted %s", item.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            owner = item.path.parent
            if owner in self.dirs:
                self.dir_failed(owner, e)
            log.warning("could not delete %s: %s", item.path, e)

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every replica that is not moving (a move pauses it; see Replica)."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        deleted = 0
        for replica in list(self.replicas.values()):
            if replica.retention_paused or replica.offline:
                continue
            with replica.lock:
                if replica.retention_paused or replica.log is None:
                    continue
                try:
                    deleted += replica.log.delete_retained_segments(now_ms)
                except OSError as e:
                    self.dir_failed(replica.log_dir, e)
        if deleted:
            for path in self.dirs:
                self._write_checkpoints(path)
        return deleted

    def flush_all(self) -> None:
        for path, state in self.dirs.items():
            if not state.online:
                continue
            for replica in self._replicas_in(path):
                with replica.lock:
                    if replica.log is None or replica.offline:
                        continue
                    try:
                        replica.log.flush()
                    except OSError as e:
                        self.dir_failed(path, e)
            self._write_checkpoints(path)

    def online_dirs(self) -> Iterable[Path]:
        return [s.path for s in self.dirs.values() if s.online]


def find_cluster_id(log_dirs: Iterable[Path]) -> str | None:
    """The cluster id recorded in the first readable meta.properties, if any."""
    for path in log_dirs:
        try:
            props = parse_properties((path / META_PROPERTIES).read_text(encoding="utf-8"))
        except OSError:
            continue
        if props.get("cluster.id"):
            return props["cluster.id"]
    return None


def new_cluster_id() -> str:
    # Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read_log_end_offset(partition_dir: Path) -> int | None:
    """The log end offset of a partition dir, read-only: walk the last segment's batch headers up to the first
    incomplete one. Recovery uses it to compare candidate copies without touching them."""
    try:
        segments = sorted(
            base for base, suffix in filter(None, map(parse_segment_file_name, os.listdir(partition_dir)))
            if suffix == LOG_SUFFIX
        )
    except OSError:
        return None
    if not segments:
        return 0
    leo = segments[-1]
    path = partition_dir / f"{segments[-1]:020d}{LOG_SUFFIX}"
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pos = 0
            while pos + record_batch.HEADER_SIZE <= size:
                f.seek(pos)
                try:
                    header = record_batch.parse_header(f.read(record_batch.HEADER_SIZE))
                except ValueError:
                    break
                if pos + header.size > size:
                    break
                leo = header.last_offset + 1
                pos += header.size
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    return leo
