"""LogManager: owns the broker's log dirs, its replicas and their housekeeping; API handlers and the daemon call here.

Reads and writes are delegated: an append to the Replica (its lock, its producer state), a read to the Log. Moves
are run by the ReplicaAlterLogDirsManager (mover/moves/); this decides whether a replica may move and consumes each
move's outcome (checkpoints, the delayed delete, dirs offline, detaching the move). Every storage call is made
inside `storage_guard`, the one place an OSError becomes a failed dir (or, for a process limit, a failed request).

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

import contextlib
import heapq
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mover.config.broker import (
    CORDONED_KEY,
    THREADS_KEY,
    THROTTLE_KAFKA_KEY,
    THROTTLE_KEY,
    BrokerConfig,
)
from mover.config.dynamic import DynamicBrokerConfig
from mover.errors import (
    ApiError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    LogDirNotFoundError,
    NotLeaderOrFollowerError,
    PolicyViolationError,
    ReplicaNotAvailableError,
    ResourceLimitError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from mover.faults import crash_point, fail_point
from mover.log.log_loader import LogDirState, LogLoader, cyclic_gc_paused, find_cluster_id, new_cluster_id
from mover.log.replica import Replica
from mover.log.scheduler import Scheduler
from mover.moves import MoveOutcome, MoveRequests, MoveState, ReplicaAlterLogDirsManager, ReplicaMove
from mover.moves.remembered import RememberedDestinations
from mover.storage import producer_state
from mover.storage.dir_health import describe_resource_limit, is_resource_limit, probe_log_dir
from mover.storage.errors import CorruptRecordError
from mover.storage.files import atomic_write, fsync_dir, sync_filesystem
from mover.storage.log import AppendInfo, Log, LogConfig
from mover.storage.log_dir import disk_usage
from mover.storage.log_segment import FileSlice
from mover.storage.names import (
    CHECKPOINT_FILES,
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
    current_dir_name,
    delete_dir_name,
    fits_file_name_limit,
    future_dir_name,
    is_valid_topic_name,
)
from mover.wire.messages.log_dirs import ANY_LOG_DIR

log = logging.getLogger(__name__)

# Free space a move must leave on its destination besides the partition's own bytes: room for the appends that
# arrive while it copies and for the file system's own metadata.
MOVE_SPACE_MARGIN = 16 * 1024 * 1024

# A process limit hit (EMFILE, ENOMEM) is logged at most this often, with the count of failures in between.
RESOURCE_LIMIT_LOG_INTERVAL_S = 10.0

# A create of up to this many partitions fsyncs each new directory; a larger one syncs each file system once.
FSYNC_EACH_UP_TO = 64

# What `kafka-recovery-point-checkpoint` rewrites: the recovery points, and with them the high watermarks (Kafka's
# ReplicaManager checkpoints those on its own timer; on one broker they follow the log) and the cleaner offsets
# (kept as read, filtered to the partitions still here). `kafka-log-start-offset-checkpoint` writes the fourth file.
RECOVERY_POINT_FILES = (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)

# Reads retried when the replica's log was swapped under them (see `read`).
SWAP_RETRIES = 3


# One partition of a log dir in DescribeLogDirs: (partition, size, offset_lag, is_future), the field order of the
# wire schema's DescribeLogDirsPartition, so the codec packs the rows without a dict each (mover/wire/codec.py).
PartitionRow = tuple[int, int, int, bool]


@dataclass
class LogDirInfo:
    path: Path
    error_code: int
    topics: dict[str, list[PartitionRow]] = field(default_factory=dict)
    total_bytes: int = -1
    usable_bytes: int = -1
    is_cordoned: bool = False  # KIP-1066, DescribeLogDirs v5


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
        self.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            num_threads=config.move_threads,
            throttle_rate=config.throttle_rate,
            status_retention_ms=config.reassign_status_retention_ms,
            log_config=self.log_config,
            on_outcome=self._move_ended,
        )
        self._lock = threading.RLock()
        self._limit_logged_at = -RESOURCE_LIMIT_LOG_INTERVAL_S
        self._limit_hits = 0
        self._deletes: list[_PendingDelete] = []
        self._creating: dict[str, int] = {}  # topics being created (outside the lock): name -> partitions
        # Housekeeping: the named tasks `startup` schedules (retention, flushes, checkpoints, deletes, dir probes).
        self.scheduler = Scheduler("kafka-scheduler")
        # Called with the partition after every append, from the appending thread: must be cheap and never block.
        self.append_listeners: list[Callable[[TopicPartition], None]] = []
        # Set by ZooKeeper coordination (mover/zk): (local request id, [(partition, destination)]) -> request id.
        self.request_recorder: Callable[[int, list[tuple[TopicPartition, str]]], int] | None = None
        # Run-time settings (throttle, move threads) layered over server.properties; loaded at start-up before
        # any interrupted move resumes, so a resumed move runs at the operator's last throttle, not the static one.
        self.dynamic_config = DynamicBrokerConfig(config, self.online_dirs)
        self.dynamic_config.register([THROTTLE_KEY, THROTTLE_KAFKA_KEY], self._throttle_changed)
        self.dynamic_config.register([THREADS_KEY], lambda _changed: self.set_move_threads(config.num_move_threads))
        # Cordons (KIP-1066) are read from the live config where a partition is placed or a move admitted; the
        # callback only says what changed. Replicas already in a cordoned dir stay and keep serving.
        self.dynamic_config.register([CORDONED_KEY], lambda _changed: log.info(
            "cordoned log dirs: %s", ", ".join(map(str, sorted(config.cordoned_dirs()))) or "none"))

    @property
    def requests(self) -> MoveRequests:
        """KIP-179's request ids and progress (DescribeReplicaMoves reads them)."""
        return self.alter_log_dirs_manager.requests

    @property
    def remembered(self) -> RememberedDestinations:
        return self.alter_log_dirs_manager.remembered

    # ------------------------------------------------------------------ life cycle

    def startup(self) -> None:
        t0 = time.monotonic()
        loader = LogLoader(self.config, self.log_config())
        with cyclic_gc_paused():  # until every partition is open: what start-up builds lives on
            self.cluster_id = self.cluster_id or find_cluster_id(self.config.log_dirs) or new_cluster_id()
            self.dirs.update(loader.open_dirs(self.cluster_id))
            online = [s.path for s in self.dirs.values() if s.online]
            self.alter_log_dirs_manager.load(online)
            self.dynamic_config.load(online)
            if not online:
                log.error("no log dir is online; moverd runs, but every partition is offline")
            loaded = loader.load(self.dirs)
            self.replicas.update(loaded.replicas)
            self.topics.update(loaded.topics)
            for path, err in loaded.failed:
                self.dir_failed(path, err)  # its partitions go offline with it
            for path in loaded.deletes:
                self._schedule_delete(path, None, delay=True)
        self.alter_log_dirs_manager.startup()
        with self._lock:
            for tp, _source_dir, move_path in loaded.resume:
                replica = self.replicas.get(tp)
                if replica is None or replica.offline or not self.dirs[move_path.parent].online:
                    continue
                self.alter_log_dirs_manager.start(replica, move_path.parent, resume=True)
        self._schedule_housekeeping()
        self.scheduler.startup()
        log.info("log manager ready: %d log dirs (%d online), %d partitions, %d moves resumed in %.2fs",
                 len(self.dirs), sum(s.online for s in self.dirs.values()), len(self.replicas),
                 len(loaded.resume), time.monotonic() - t0)

    def shutdown(self) -> None:
        """Stop moves (their copy stays, under Kafka's `-future` name, and resumes at the next start, moverd's or a
        Kafka broker's), flush, checkpoint, release locks."""
        self.scheduler.shutdown()  # pending deletes stay on disk as `-delete` dirs: the next start finishes them
        for move in self.alter_log_dirs_manager.shutdown():
            self._park_stopped_copy(move)  # running moves were parked by their STOPPED outcome (`_move_ended`)
            self._detach(move)
            move.finished()
        self.flush_all()
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
        return self.scheduler.alive()

    def _schedule_housekeeping(self) -> None:
        """The periodic tasks, named as Kafka's LogManager.startup() names them (and one of ours, the dir probe)."""
        c = self.config
        every = self.scheduler.schedule
        every("kafka-log-retention", self.run_retention, c.log_retention_check_interval_ms / 1000)
        every("kafka-log-flusher", self.flush_all, c.log_flush_interval_ms / 1000)
        every("kafka-recovery-point-checkpoint", lambda: self.checkpoint_all(RECOVERY_POINT_FILES),
              c.log_flush_offset_checkpoint_interval_ms / 1000)
        every("kafka-log-start-offset-checkpoint", lambda: self.checkpoint_all((LOG_START_OFFSET_CHECKPOINT,)),
              c.log_flush_start_offset_checkpoint_interval_ms / 1000)
        # Kafka has no such task (it finds a failed dir at its next I/O): mover.storage.dir_health.probe_log_dir.
        every("log-dir-health-check", self.probe_dirs, c.log_dir_health_check_interval_ms / 1000)

    def log_config(self) -> LogConfig:
        c = self.config
        return LogConfig(
            segment_bytes=c.log_segment_bytes,
            retention_bytes=c.log_retention_bytes,
            retention_ms=c.log_retention_ms,
            index_interval_bytes=c.log_index_interval_bytes,
        )

    # ------------------------------------------------------------------ topics and partitions

    def replica(self, tp: TopicPartition) -> Replica:
        replica = self.replicas.get(tp)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
        return replica

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     *, validate_only: bool = False) -> None:
        """Create a topic's partitions, all or none: published to `replicas`/`topics` together once every partition
        exists and is durable, rolled back (nothing left on disk) when one fails.

        Holds the manager lock only to reserve the name and to publish: a create of 10,000 partitions never stalls
        Metadata, DescribeLogDirs or moves. No checkpoint is written: a partition missing from the checkpoints
        starts at recovery point 0, which is correct (its whole log is checked on open); the timer, shutdown and
        moves/deletes write them (docs/architecture.md, "Checkpoints")."""
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
            if name in self.topics or name in self._creating:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            limit = self.config.max_broker_partitions
            have = len(self.replicas) + sum(self._creating.values())
            if have + num_partitions > limit:
                raise PolicyViolationError(
                    f"{num_partitions} more partitions would make {have + num_partitions} on this broker; "
                    f"max.broker.partitions is {limit}")
            self._check_placeable()
            if validate_only:
                return
            self._creating[name] = num_partitions
        created: list[Replica] = []
        try:
            usable = self._usable_bytes()
            placed: dict[Path, int] = {}
            cfg = self.log_config()
            for p in range(num_partitions):
                tp = TopicPartition(name, p)
                with self._lock:
                    dir_path = self._choose_dir(tp, placed, usable)
                placed[dir_path] = placed.get(dir_path, 0) + 1
                with self.storage_guard(dir_path, f"cannot create {tp} in {dir_path}"):
                    fail_point("create.partition")
                    new_log = Log.open(dir_path / current_dir_name(tp), tp, cfg, sync=False)
                created.append(Replica(tp, new_log, dir_path))
            self._make_durable(name, created, list(placed))
            with self._lock:
                for replica in created:
                    if not self.dirs[replica.log_dir].online:
                        raise KafkaStorageError(f"log dir {replica.log_dir} failed while {name} was created")
                for replica in created:
                    self.replicas[replica.tp] = replica
                self.topics[name] = num_partitions
        except BaseException:
            self._roll_back_create(name, created)
            raise
        finally:
            with self._lock:
                self._creating.pop(name, None)
        log.info("created topic %s with %d partitions", name, num_partitions)

    def _make_durable(self, name: str, created: list[Replica], log_dirs: list[Path]) -> None:
        """Before the answer says "created", the new names must survive a power cut: each new partition dir's entry
        for its first segment, and each log dir's entries for the partition dirs (Log.open skipped its two fsyncs
        per partition). A few partitions: those directory fsyncs. Many: one syncfs per file system, which commits
        them all at once (two fsyncs per partition, each a journal commit, took 7 s for 10,000 here), at the cost
        of also writing out whatever else is dirty on that disk now rather than within the next 30 s."""
        if len(created) <= FSYNC_EACH_UP_TO:
            targets = [(r.log.dir, r.log_dir) for r in created if r.log is not None] + [(d, d) for d in log_dirs]
            for path, owner in targets:
                with self.storage_guard(owner, f"cannot make {name}'s partitions in {owner} durable"):
                    fsync_dir(path)
            return
        seen: set[int] = set()
        for d in log_dirs:
            with self.storage_guard(d, f"cannot make {name}'s partitions in {d} durable"):
                dev = os.stat(d).st_dev
                if dev not in seen:
                    seen.add(dev)
                    sync_filesystem(d)

    def _roll_back_create(self, name: str, created: list[Replica]) -> None:
        """Remove what a failed create made: retire each new partition dir (rename to `-delete`, which recovery
        also finishes after a crash), then delete it. A dir that failed meanwhile is left alone (never written
        again); its leftovers are new, empty partitions that the next start-up loads."""
        for replica in created:
            lg = replica.log
            if lg is None:
                continue
            with contextlib.suppress(OSError):
                lg.close()
            state = self.dirs.get(replica.log_dir)
            if state is None or not state.online:
                continue
            target = lg.dir.parent / delete_dir_name(replica.tp)
            with self.storage_guard(replica.log_dir, f"roll back {replica.tp}", reraise=False) as failed:
                os.rename(lg.dir, target)
            if not failed:
                self._delete_now(_PendingDelete(0.0, target, None))
        log.warning("create of topic %s failed: %d partitions it had made were removed", name, len(created))

    def _usable_bytes(self) -> dict[Path, int]:
        """Usable bytes of each online dir, read once per create: new partitions are empty, so they do not change
        what placement compares (a statvfs per partition per dir made 10,000 partitions cost 40,000 calls)."""
        out: dict[Path, int] = {}
        for state in list(self.dirs.values()):
            if not state.online:
                continue
            with self.storage_guard(state.path, "disk usage", reraise=False):
                out[state.path] = disk_usage(state.path)[1]
        return out

    def _check_placeable(self) -> None:
        """A new partition needs an online dir that is not cordoned; with none, Kafka 4.3's controller refuses the
        create with INVALID_REPLICATION_FACTOR and these words (one broker here, so 0 usable brokers)."""
        cordoned = self.config.cordoned_dirs()
        if any(s.online and s.path not in cordoned for s in self.dirs.values()):
            return
        if not any(s.online for s in self.dirs.values()):
            raise KafkaStorageError("no log dir is online")
        raise InvalidReplicationFactorError(
            "Unable to replicate the partition 1 time(s): The target replication factor of 1 cannot be reached "
            "because only 0 broker(s) are registered or some brokers have all their log directories cordoned.")

    def _choose_dir(self, tp: TopicPartition, placed: dict[Path, int], usable: dict[Path, int]) -> Path:
        """A remembered destination if online and not cordoned, else the live, uncordoned dir with the most usable
        bytes (KIP-1066: no new partition lands on a cordoned dir).

        Kafka picks the dir with the fewest partitions, which is why JBOD disks drift out of balance: a disk
        of small partitions and one of large ones count the same. Within 1% of the best free space, the dir
        that got fewer of this request's partitions wins, so one topic's partitions still spread."""
        cordoned = self.config.cordoned_dirs()
        remembered = self.remembered.take(tp)
        if (remembered is not None and self.dirs.get(remembered) and self.dirs[remembered].online
                and remembered not in cordoned):
            return remembered
        candidates = [(p, u) for p, u in usable.items() if self.dirs[p].online and p not in cordoned]
        if not candidates:
            # Cordoned (or failed) since the create began: the same answer as before it began.
            self._check_placeable()
            raise KafkaStorageError("no log dir is online")
        best = max(u for _, u in candidates)
        near = [(placed.get(p, 0), -u, str(p), p) for p, u in candidates if u >= best * 0.99]
        return min(near)[3]

    def delete_topic(self, name: str) -> None:
        """Retire every partition of the topic (one rename each), make the renames durable with one fsync per log
        dir, rewrite each touched dir's checkpoints once (so a topic created again under this name never inherits
        the old recovery points), and leave the bytes to the background deleter."""
        with self._lock:
            if name not in self.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            victims = [r for tp, r in self.replicas.items() if tp.topic == name]
            del self.topics[name]
            for replica in victims:
                del self.replicas[replica.tp]
                if replica.move is not None:
                    self.alter_log_dirs_manager.cancel(replica)
        retired: list[tuple[Path, Log]] = []
        touched: set[Path] = set()
        for replica in victims:
            move = replica.move
            if move is not None:
                move.wait(30)
            with replica.lock:
                old = replica.log
                replica.log = None
                replica.offline_reason = "deleted"
                if old is None or not self.dirs[replica.log_dir].online:
                    continue
                target = old.dir.parent / delete_dir_name(replica.tp)
                with self.storage_guard(replica.log_dir, f"delete {replica.tp}", reraise=False) as failed:
                    # Retire the whole partition dir in one atomic step; the bytes go later, in the background.
                    with old.pin_files():
                        os.rename(old.dir, target)
                        old.rename_dir(target)
                if failed:
                    continue
            retired.append((target, old))
            touched.add(replica.log_dir)
        for path in touched:
            with self.storage_guard(path, f"delete of {name}", reraise=False):
                # The renames durable before the answer: after a power cut the topic must not come back.
                fsync_dir(path)
            self._write_checkpoints(path)
        for target, old in retired:
            self._schedule_delete(target, old, delay=True)
        log.info("deleted topic %s", name)

    # ------------------------------------------------------------------ reads and writes (delegated)

    def append(self, tp: TopicPartition, records: bytes | bytearray) -> AppendInfo:
        """Append whole v2 batches to the partition (Replica.append: its lock, its producer state). Then the append
        listeners (Fetch's long-poll wake-up) hear of it, outside the lock."""
        replica = self.replica(tp)
        with self.storage_guard(replica.log_dir, f"append to {tp} failed"):
            info = replica.append(records)
        for listener in self.append_listeners:
            listener(tp)
        return info

    def try_append(self, tp: TopicPartition, records: bytes | bytearray) -> AppendInfo | None:
        """`append` if it can run now without blocking (Replica.try_append); None when not, and nothing was done."""
        replica = self.replica(tp)
        with self.storage_guard(replica.log_dir, f"append to {tp} failed"):
            info = replica.try_append(records)
        if info is not None:
            for listener in self.append_listeners:
                listener(tp)
        return info

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, *,
             min_one: bool = True, nowait: bool = False) -> tuple[Log, FileSlice]:
        """Whole batches from `offset` of the partition's current log, and the Log they came from (for its high
        watermark and log start offset). Raises ApiError (unknown, offline, storage), OffsetOutOfRangeError;
        with `nowait` (a read on the event loop) WouldBlock when it would have to wait for the disk.

        No lock: a swap between our look at replica.log and the caller's dup of the segment fd could, in theory,
        let the old Log close its fds first (a delete delay later); then the read runs again on the new Log. Two
        swaps in one read are not possible (a move copies for far longer than a read takes), but a bound keeps a
        bug from looping forever."""
        replica = self.replica(tp)
        for _attempt in range(SWAP_RETRIES):
            current = replica.current_log()
            try:
                found = current.read(offset, max(max_bytes, 0), min_one=min_one, nowait=nowait)
            except (OSError, CorruptRecordError) as e:
                if replica.log is not current:
                    continue  # swapped under us: read the new log
                if isinstance(e, CorruptRecordError):
                    raise  # a bug or a corrupt segment: the framework answers UNKNOWN_SERVER_ERROR and logs it
                with self.storage_guard(replica.log_dir, f"read of {tp} failed"):
                    raise
            if replica.log is not current:
                continue
            return current, found
        raise NotLeaderOrFollowerError(f"{tp} was moved {SWAP_RETRIES} times during one read")

    def offset_for_timestamp(self, tp: TopicPartition, lookup: Callable[[Log], tuple[int, int] | None]
                             ) -> tuple[int, int] | None:
        """ListOffsets' lookup (`lookup(log)`, e.g. Log.offset_for_timestamp) on the partition's current log,
        again on the new log if a swap replaced it meanwhile."""
        replica = self.replica(tp)
        for _attempt in range(SWAP_RETRIES):
            current = replica.current_log()
            try:
                return lookup(current)
            except OSError:
                if replica.log is not current:
                    continue
                with self.storage_guard(replica.log_dir, f"offset lookup in {tp} failed"):
                    raise
        raise NotLeaderOrFollowerError(f"{tp} was moved {SWAP_RETRIES} times during one lookup")

    def highest_producer_id(self) -> int:
        """The highest producer id any online partition's log holds (-1: none), for the producer id allocator: ids
        another allocator handed out (a Kafka broker that ran on these dirs) are known only to the logs. Reads each
        partition's newest producer snapshot and walks only the batch headers that opening did not
        (producer_state.highest_producer_id). A dir that fails the reads goes offline, and its partitions with it."""
        highest = -1
        for replica in list(self.replicas.values()):
            current = replica.log
            if current is None or replica.offline:
                continue
            with self.storage_guard(replica.log_dir, f"producer ids of {replica.tp}", reraise=False):
                highest = max(highest, producer_state.highest_producer_id(current, replica.producer_state))
        return highest

    def write_broker_file(self, name: str, data: bytes) -> int:
        """Write `name` atomically in every online log dir (broker-wide state such as the producer id block);
        returns how many dirs hold it now. A dir that fails the write goes offline."""
        written = 0
        for path in list(self.online_dirs()):
            with self.storage_guard(path, f"write {name}", reraise=False):
                atomic_write(path / name, data)
                written += 1
        return written

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
            request_id = self.alter_log_dirs_manager.begin_request(started)
        recorder = self.request_recorder
        if request_id is not None and record and recorder is not None:
            request_id = recorder(request_id, [(m.tp, str(m.destination_dir)) for m in started])
        if request_id is not None:
            log.info("move request %d: %d moves", request_id, len(started))
        return codes, request_id

    def _alter(self, tp: TopicPartition, path: str) -> ReplicaMove | None:
        """Returns the move it started, or None when it started none. The caller holds `_lock`."""
        if not fits_file_name_limit(tp):
            raise InvalidTopicError(f"{tp} is too long for a .move directory name")
        moves = self.alter_log_dirs_manager
        replica = self.replicas.get(tp)
        if path == ANY_LOG_DIR:
            # "any": the broker may keep the replica where it is; a running move is cancelled (KIP-113).
            if replica is None:
                self.remembered.forget(tp)
                raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
            moves.cancel(replica)
            return None
        dest = Path(path)
        state = self.dirs.get(dest)
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
            self.remembered.remember(tp, dest)
            if tp.topic not in self.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {tp.topic}; {tp} will be created in {path}")
            if tp.partition >= self.topics[tp.topic]:
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
        with self.storage_guard(dest, f"log dir {path} failed"):
            _, usable = disk_usage(dest)
        if current.size + MOVE_SPACE_MARGIN > usable:
            # Refuse up front rather than fill the disk and fail half-way (Kafka offers no such check).
            raise KafkaStorageError(
                f"{tp} needs {current.size} bytes plus {MOVE_SPACE_MARGIN} margin; {path} has {usable}")
        return moves.start(replica, dest)

    def cancel_move(self, tp: TopicPartition) -> bool:
        with self._lock:
            replica = self.replicas.get(tp)
            if replica is None or replica.move is None:
                return False
            self.alter_log_dirs_manager.cancel(replica)
            return True

    def set_throttle(self, rate: int | None) -> None:
        self.alter_log_dirs_manager.set_throttle(rate)
        self.config.throttle_rate = rate
        log.info("intra-broker throttle set to %s", "unlimited" if rate is None else f"{rate} B/s")

    def _throttle_changed(self, changed: dict[str, object]) -> None:
        self.set_throttle(self.config.throttle_rate)

    def set_move_threads(self, n: int | None) -> None:
        self.config.num_move_threads = n
        self.alter_log_dirs_manager.resize(self.config.move_threads)

    def _move_ended(self, outcome: MoveOutcome) -> None:
        """A move's outcome, from its pool thread (or from `cancel` for one that never ran): act on it in storage,
        then detach the move from its Replica, which resumes retention."""
        move = outcome.move
        for path, err in outcome.failed_dirs:
            self.dir_failed(path, err)
        if outcome.retired_path is not None:
            for d in (move.source_dir, move.destination_dir):
                self._write_checkpoints(d)
            self._schedule_delete(outcome.retired_path, outcome.retired_log, delay=True)
        if outcome.state is MoveState.STOPPED:
            self._park_stopped_copy(move)
        if outcome.leftover_copy is not None and os.path.lexists(outcome.leftover_copy):
            # A resumed move's prefix, cancelled before it ran: renamed out of the way at once (a new move to the
            # same dir may start right after), its bytes deleted in the background.
            target = move.destination_dir / delete_dir_name(move.tp)
            with self.storage_guard(move.destination_dir, f"retire {outcome.leftover_copy}", reraise=False):
                os.rename(outcome.leftover_copy, target)
                self._schedule_delete(target, None, delay=False)
        self._detach(move)

    def _park_stopped_copy(self, move: ReplicaMove) -> None:
        """A move stopped by shutdown leaves its `.move`: rename it to Kafka's `-future` form in the same dir, a
        name both sides resume (recovery renames it back to `.move`; a Kafka broker, 2.x to 4.x, finishes the move
        itself) where a Kafka broker refuses to start beside a `.move` (docs/operations.md). One atomic rename
        within the dir, so the copy is under one of two names that both mean "a copy to resume".

        The copy gets the live copy's `partition.metadata` and `leader-epoch-checkpoint` first (the swap copies
        them only at its end): a KRaft broker refuses to start beside a `-future` without a topic id."""
        path = move.move_path
        dest = move.destination_dir
        state = self.dirs.get(dest)
        if state is None or not state.online or not os.path.lexists(path):
            return
        kafka_files: dict[str, bytes] = {}
        with self.storage_guard(move.source_dir, f"read the files of {move.tp}", reraise=False):
            live = move.source_dir / current_dir_name(move.tp)
            for name in (PARTITION_METADATA_FILE, LEADER_EPOCH_CHECKPOINT_FILE):
                with contextlib.suppress(FileNotFoundError):
                    kafka_files[name] = (live / name).read_bytes()
        target = dest / future_dir_name(move.tp)
        with self.storage_guard(dest, f"park {path}", reraise=False) as failed:
            for name, data in kafka_files.items():
                if not os.path.lexists(path / name):
                    # Whole or absent after a crash (tmp, fsync, rename); moverd's resumed copy overwrites it anyway.
                    atomic_write(path / name, data)
            os.rename(path, target)
            # Durable now, not at the next journal commit: a power cut after the stop must not bring back the
            # `.move` name, which would keep a Kafka broker from starting on this dir.
            fsync_dir(dest)
        if not failed:
            log.info("move of %s stopped: its copy %s is parked as %s for the next start", move.tp, path, target.name)

    def _detach(self, move: ReplicaMove) -> None:
        with self._lock:
            if move.replica.move is move:
                move.replica.move = None  # retention resumes, whatever way the move ended

    def moves(self) -> list[ReplicaMove]:
        with self._lock:
            return [r.move for r in self.replicas.values() if r.move is not None]

    # ------------------------------------------------------------------ failed dirs

    @contextlib.contextmanager
    def storage_guard(self, path: Path, what: str, *, reraise: bool = True) -> Iterator[list[OSError]]:
        """Run storage work on log dir `path`; the one place an OSError becomes a failed dir.

        A process limit (EMFILE, ENFILE, ENOMEM) fails the work with ResourceLimitError and leaves the dir online;
        any other OSError takes the dir offline and fails it with KafkaStorageError. With reraise=False the error
        is swallowed (background work: flush, checkpoints, retention) and the yielded list holds it."""
        failed: list[OSError] = []
        try:
            yield failed
        except OSError as e:
            failed.append(e)
            self.dir_failed(path, e)
            if reraise:
                if is_resource_limit(e):
                    raise ResourceLimitError(f"{what}: {describe_resource_limit(e)}") from e
                raise KafkaStorageError(f"{what}: {e}") from e

    def dir_failed(self, path: Path, err: OSError | str) -> None:
        """A log dir raised an I/O error: offline until restart. Except a resource limit (EMFILE, ENFILE,
        ENOMEM): the process, not the disk, is short; the request fails and the dir stays online."""
        if isinstance(err, OSError) and is_resource_limit(err):
            now = time.monotonic()
            self._limit_hits += 1
            if now >= self._limit_logged_at + RESOURCE_LIMIT_LOG_INTERVAL_S:
                # One line per interval: a burst of failed requests at the limit must not flood the log.
                log.error("log dir %s stays online: %s; %d requests failed on it since the last report; raise "
                          "the limit", path, describe_resource_limit(err), self._limit_hits)
                self._limit_logged_at = now
                self._limit_hits = 0
            return
        with self._lock:
            self._mark_offline(path, f"{type(err).__name__}: {err}" if isinstance(err, OSError) else err)

    def _mark_offline(self, path: Path, reason: str) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online:
            return
        state.error = reason
        self.alter_log_dirs_manager.set_online_dirs(self.online_dirs())
        log.error("log dir %s is now offline: %s", path, reason)
        for replica in list(self.replicas.values()):
            move = replica.move
            if replica.log_dir == path:
                replica.offline_reason = f"log dir {path} is offline"
                if move is not None:
                    move.fail(f"source log dir {path} failed")
            elif move is not None and move.destination_dir == path:
                move.fail(f"destination log dir {path} failed")
        self.remembered.forget_dir(path)

    def probe_dirs(self) -> None:
        """Look for failed dirs between I/O (mover.storage.dir_health.probe_log_dir): without a probe a failure
        would surface only at the next roll or checkpoint."""
        for state in list(self.dirs.values()):
            if state.online:
                err = probe_log_dir(state.path)
                if err is not None:
                    self.dir_failed(state.path, err)

    # ------------------------------------------------------------------ describe

    def describe_log_dirs(self, topics: dict[str, list[int] | None] | None = None) -> list[LogDirInfo]:
        """One entry per configured dir. `topics` None = every partition; {topic: None} = all its partitions.

        Hot at 10,000 partitions (an operator's describe every few seconds): one pass over the replicas, no lock,
        one tuple per partition grouped by topic, and the dir of each replica found by object identity first
        (Path equality costs microseconds, and there are only a few distinct dir objects)."""
        out: dict[Path, LogDirInfo] = {}
        cordoned = self.config.cordoned_dirs()
        for state in self.dirs.values():
            is_cordoned = state.path in cordoned
            if not state.online:
                out[state.path] = LogDirInfo(state.path, KafkaStorageError.code, is_cordoned=is_cordoned)
                continue
            out[state.path] = LogDirInfo(state.path, KafkaStorageError.code, is_cordoned=is_cordoned)
            with self.storage_guard(state.path, "disk usage", reraise=False):
                total, usable = disk_usage(state.path)
                out[state.path] = LogDirInfo(state.path, 0, {}, total, usable, is_cordoned)
        # id(dir object) -> (the object, its topics map, or None when the dir is offline or unknown); the object is
        # kept so that a recycled id can never match.
        slots: dict[int, tuple[Path, dict[str, list[PartitionRow]] | None]] = {
            id(p): (p, info.topics if info.error_code == 0 else None) for p, info in out.items()}

        def topics_of(d: Path) -> dict[str, list[PartitionRow]] | None:
            info = out.get(d)
            slot = slots[id(d)] = (d, info.topics if info is not None and info.error_code == 0 else None)
            return slot[1]

        for replica in list(self.replicas.values()):
            tp = replica.tp
            if topics is not None:
                parts = topics.get(tp.topic, ())
                if parts is not None and tp.partition not in parts:
                    continue
            current = replica.log
            if current is None:
                continue
            d = replica.log_dir
            slot = slots.get(id(d))
            by_topic = slot[1] if slot is not None and slot[0] is d else topics_of(d)
            if by_topic is not None and replica.offline_reason is None:
                # offset_lag = high watermark - log end offset: 0 on a single broker, where they are equal (Log).
                row = (tp.partition, current.size, 0, False)
                rows = by_topic.get(tp.topic)
                if rows is None:
                    by_topic[tp.topic] = [row]
                else:
                    rows.append(row)
            move = replica.move
            if move is not None and not move.state.done:
                dest = topics_of(move.destination_dir)
                if dest is not None:
                    lag = max(current.log_end_offset - move.copied_log_end_offset(), 0)
                    dest.setdefault(tp.topic, []).append((tp.partition, move.bytes_copied, lag, True))
        return [out[p] for p in self.config.log_dirs]

    # ------------------------------------------------------------------ checkpoints, deletes, retention

    def _replicas_in(self, path: Path) -> list[Replica]:
        return [r for r in list(self.replicas.values()) if r.log_dir == path and r.log is not None]

    def _write_checkpoints(self, path: Path, files: Collection[str] = CHECKPOINT_FILES) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online or state.log_dir is None:
            return
        logs = [r.log for r in self._replicas_in(path) if r.log is not None and not r.offline]
        with self.storage_guard(path, "checkpoint", reraise=False):
            state.log_dir.write_checkpoints(
                {lg.tp: lg.recovery_point for lg in logs},
                {lg.tp: lg.log_start_offset for lg in logs},
                {lg.tp: lg.high_watermark for lg in logs},
                files,
            )

    def _schedule_delete(self, path: Path, old_log: Log | None, *, delay: bool) -> None:
        delay_s = self.config.log_segment_delete_delay_ms / 1000 if delay else 0.0
        with self._lock:
            heapq.heappush(self._deletes, _PendingDelete(time.monotonic() + delay_s, path, old_log))
        self.scheduler.schedule_once("kafka-delete-logs", self._delete_logs, delay_s)

    def pending_deletes(self) -> list[Path]:
        with self._lock:
            return [d.path for d in self._deletes]

    def _delete_logs(self) -> None:
        """Kafka's `kafka-delete-logs`: delete the retired dirs whose delay has passed, then run again when the
        next one is due."""
        now = time.monotonic()
        with self._lock:
            due = []
            while self._deletes and self._deletes[0].due <= now:
                due.append(heapq.heappop(self._deletes))
            next_due = self._deletes[0].due if self._deletes else None
        for item in due:
            self._delete_now(item)
        if next_due is not None:
            self.scheduler.schedule_once("kafka-delete-logs", self._delete_logs, max(0.0, next_due - time.monotonic()))

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
            log.warning("could not delete %s: %s", item.path, e)
            owner = item.path.parent
            if owner in self.dirs:
                self.dir_failed(owner, e)

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
                with self.storage_guard(replica.log_dir, f"retention of {replica.tp}", reraise=False):
                    deleted += replica.log.delete_retained_segments(now_ms)
        if deleted:
            for path in self.dirs:
                self._write_checkpoints(path)
        return deleted

    def checkpoint_all(self, files: Collection[str] = CHECKPOINT_FILES) -> None:
        """Kafka's checkpoint tasks (`kafka-recovery-point-checkpoint` every log.flush.offset.checkpoint.interval.ms,
        `kafka-log-start-offset-checkpoint` every log.flush.start.offset.checkpoint.interval.ms): rewrite the named
        checkpoint files of every online dir from the logs' current offsets."""
        for path, state in list(self.dirs.items()):
            if state.online:
                self._write_checkpoints(path, files)

    def flush_all(self) -> None:
        for path, state in self.dirs.items():
            if not state.online:
                continue
            for replica in self._replicas_in(path):
                with replica.lock:
                    if replica.log is None or replica.offline:
                        continue
                    with self.storage_guard(path, f"flush of {replica.tp}", reraise=False):
                        replica.log.flush()
            self._write_checkpoints(path)

    def online_dirs(self) -> Iterable[Path]:
        return [s.path for s in self.dirs.values() if s.online]
