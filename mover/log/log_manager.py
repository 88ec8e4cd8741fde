"""LogManager: the broker's log layer as the API handlers and the daemon see it; it wires the parts, runs their
life cycle (start-up, shutdown, the housekeeping tasks, the dynamic settings) and serves the data path itself.

The parts (each its own module, none calling up):
- LogLoader (log_loader.py): start-up: opens the dirs, recovers, builds the Replicas; returns what it found.
- LogDirs (log_dirs.py): the registry (`dirs`, `replicas`, `topics`), the structural lock, `storage_guard` and
  `dir_failed` (the one mapping of an OSError to a failed dir), checkpoints, flushes, retention, delayed deletes.
- TopicAdmin (topics.py): CreateTopics, CreatePartitions and DeleteTopics (`create_topic`, `create_partitions`,
  `delete_topic` here).
- AlterReplicaLogDirs (alter_replica_log_dirs.py): whether a replica may move where a request asks, the moves it
  starts or cancels and their KIP-179 request (`alter_replica_log_dirs` here; ZooKeeper's `request_recorder` is
  set here and read there).
- MoveOutcomes (move_outcomes.py): what a move's end means for the dirs (checkpoints, the delayed delete, dirs
  offline, a stopped copy parked); the moves manager's `on_outcome`, and shutdown's for the moves never started.
- DescribeLogDirs (describe_log_dirs.py): DescribeLogDirs' answer, `LogDirInfo` per dir (`describe_log_dirs` here).
- Scheduler (scheduler.py): the housekeeping, as Kafka's named tasks (`kafka-log-retention`, ...).
- ReplicaAlterLogDirsManager (mover/moves/): runs the moves and owns `Replica.move`.
- DynamicBrokerConfig (mover/config/dynamic.py): the throttle and the move threads change only through it; this
  registers for them.

Reads and writes are delegated: an append to the Replica (its lock, its producer state), a read to the Log, each
inside `storage_guard`.

Invariants:
* A replica is in exactly one log dir at a time (`Replica.log_dir`); a move adds a `.move` copy in a second dir,
  and the copy becomes the replica only through ReplicaMove's swap.
* A log dir that raised an I/O error is offline until restart: its replicas answer KAFKA_STORAGE_ERROR, moves
  touching it stop, and nothing is ever written to it again. Every other dir keeps working.
* Structural changes (create, delete, start/cancel a move, attaching or detaching one, a dir failing) take the
  structural lock (`_lock`, LogDirs.lock); copying never holds it, and appends take only their replica's lock.
* Checkpoint files list only the partitions whose current copy lives in that dir; after a swap both dirs'
  checkpoints are rewritten, so the entries follow the partition (MoveOutcomes).
* A move stopped by shutdown leaves its copy under Kafka's `-future` name, made durable before shutdown goes on
  (MoveOutcomes.park_stopped_copy): a moverd or a Kafka broker started next resumes it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from mover.config.broker import (
    CORDONED_KEY,
    DIR_BUDGET_KEY,
    THREADS_KEY,
    THROTTLE_KAFKA_KEY,
    THROTTLE_KEY,
    BrokerConfig,
)
from mover.config.dynamic import DynamicBrokerConfig
from mover.errors import (
    KafkaStorageError,
    NotLeaderOrFollowerError,
    ResourceLimitError,
    UnknownTopicOrPartitionError,
)
from mover.log.alter_replica_log_dirs import AlterReplicaLogDirs, RequestRecorder
from mover.log.describe_log_dirs import DescribeLogDirs, LogDirInfo
from mover.log.log_dirs import LogDirs, log_config_of
from mover.log.log_loader import LogDirState, LogLoader, cyclic_gc_paused, find_cluster_id, new_cluster_id
from mover.log.move_outcomes import MoveOutcomes
from mover.log.replica import Replica
from mover.log.scheduler import Scheduler
from mover.log.topics import TopicAdmin
from mover.moves import MoveOutcome, MoveRequests, ReplicaAlterLogDirsManager
from mover.moves.manager import MoveObserver
from mover.moves.remembered import RememberedDestinations
from mover.storage import producer_state
from mover.storage.broker_files import BrokerFiles
from mover.storage.errors import CorruptRecordError
from mover.storage.files import atomic_write
from mover.storage.log import AppendInfo, Log, LogConfig
from mover.storage.log_segment import FileSlice
from mover.storage.names import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
)
from mover.storage.record_batch import BatchHeader

log = logging.getLogger(__name__)

# What `kafka-recovery-point-checkpoint` rewrites: the recovery points, and with them the high watermarks (Kafka's
# ReplicaManager checkpoints those on its own timer; on one broker they follow the log) and the cleaner offsets
# (kept as read, filtered to the partitions still here). `kafka-log-start-offset-checkpoint` writes the fourth file.
RECOVERY_POINT_FILES = (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)

# Reads retried when the replica's log was swapped under them (see `read`).
SWAP_RETRIES = 3


class LogManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.cluster_id: str = config.cluster_id or ""
        self._lock = threading.RLock()  # the structural lock, shared by the parts below
        self.alter_log_dirs_manager = ReplicaAlterLogDirsManager(
            num_threads=config.move_threads,
            throttle_rate=config.throttle_rate,
            status_retention_ms=config.reassign_status_retention_ms,
            log_config=self.log_config,
            # Looked up when a move ends, not now: MoveOutcomes needs LogDirs, which needs this manager (no move
            # ends before `startup`).
            on_outcome=lambda outcome: self._move_outcomes.act_on(outcome),
            lock=self._lock,
        )
        self.alter_log_dirs_manager.set_dir_budgets(config.dir_budgets())
        # Housekeeping: the named tasks `startup` schedules (retention, flushes, checkpoints, deletes, dir probes).
        self.scheduler = Scheduler("kafka-scheduler")
        self.log_dirs = LogDirs(config, self.alter_log_dirs_manager, self._lock, self.scheduler)
        # Retention a move postponed runs when the move ends (LogDirs.move_ended).
        self.alter_log_dirs_manager.observers.append(self.log_dirs)
        self.topic_admin = TopicAdmin(config, self.log_dirs, self.alter_log_dirs_manager)
        # The recorder is read when a request is recorded, not now: mover/zk sets and clears it here at any time.
        self._alter_replica_log_dirs = AlterReplicaLogDirs(config, self.log_dirs, self.alter_log_dirs_manager,
                                                           lambda: self.request_recorder)
        self._move_outcomes = MoveOutcomes(self.log_dirs)
        self._describe_log_dirs = DescribeLogDirs(config, self.log_dirs)
        # The registry, as LogDirs holds it (the same dicts).
        self.dirs: dict[Path, LogDirState] = self.log_dirs.dirs
        self.replicas: dict[TopicPartition, Replica] = self.log_dirs.replicas
        self.topics: dict[str, int] = self.log_dirs.topics  # topic -> partition count
        # LogDirs' failure mapping, the same functions (the append path calls storage_guard once per append):
        # storage work on a dir inside `storage_guard(path, what, reraise=True)`; an error reported as an outcome to
        # `dir_failed(path, err)`.
        self.storage_guard = self.log_dirs.storage_guard
        self.dir_failed = self.log_dirs.dir_failed
        # Called with the partition after every append, from the appending thread: must be cheap and never block.
        self.append_listeners: list[Callable[[TopicPartition], None]] = []
        # Set by ZooKeeper coordination (mover/zk): (local request id, [(partition, destination)]) -> request id.
        self.request_recorder: RequestRecorder | None = None
        # Run-time settings (throttle, move threads) layered over server.properties; loaded at start-up before
        # any interrupted move resumes, so a resumed move runs at the operator's last throttle, not the static one.
        # Broker-wide files (dynamic config, request ids, ACLs, SCRAM users, the ZooKeeper session) live in every
        # online dir; an I/O error on one is that dir's failure, as for any storage call. Each copy is replaced
        # atomically, so a full dir keeps its old copy and stays online (the other dirs hold the new one).
        self.broker_files = BrokerFiles(self.online_dirs,
                                        lambda path, what: self.storage_guard(path, what, reraise=False,
                                                                              atomic=True))
        self.dynamic_config = DynamicBrokerConfig(config, self.broker_files)
        self.dynamic_config.register([THROTTLE_KEY, THROTTLE_KAFKA_KEY], self._throttle_changed)
        self.dynamic_config.register([DIR_BUDGET_KEY], self._dir_budgets_changed)
        self.dynamic_config.register([THREADS_KEY], self._threads_changed)
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

    def add_move_observer(self, observer: MoveObserver) -> None:
        """Hear every move start and end (metrics, ZooKeeper status): the one way in to the moves manager's
        observers from above."""
        self.alter_log_dirs_manager.observers.append(observer)

    def move_counts(self) -> tuple[int, int]:
        """(moves being copied or swapped now, moves waiting for a move thread), for status lines and metrics."""
        pool = self.alter_log_dirs_manager.pool
        return len(pool.running()), len(pool.queued())

    def last_move_outcome(self, tp: TopicPartition, destination: Path) -> MoveOutcome | None:
        """How the last move of `tp` into `destination` ended, while the moves manager remembers it."""
        return self.alter_log_dirs_manager.last_outcome(tp, destination)

    # ------------------------------------------------------------------ life cycle

    def startup(self) -> None:
        t0 = time.monotonic()
        loader = LogLoader(self.config, self.log_config())
        with cyclic_gc_paused():  # until every partition is open: what start-up builds lives on
            self.cluster_id = self.cluster_id or find_cluster_id(self.config.log_dirs) or new_cluster_id()
            self.dirs.update(loader.open_dirs(self.cluster_id))
            online = self.online_dirs()
            self.alter_log_dirs_manager.load(self.broker_files)
            self.dynamic_config.load()
            if not online:
                log.error("no log dir is online; moverd runs, but every partition is offline")
            loaded = loader.load(self.dirs)
            self.replicas.update(loaded.replicas)
            self.topics.update(loaded.topics)
            for path, err in loaded.failed:
                self.dir_failed(path, err)  # its partitions go offline with it
            for path in loaded.deletes:
                self.log_dirs.schedule_delete(path, None, delay=True)
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
            self._move_outcomes.park_stopped_copy(move)  # running moves were parked by their STOPPED outcome
            move.finished()
        self.log_dirs.flush_all()
        for replica in self.replicas.values():
            if replica.log is not None:
                with contextlib.suppress(OSError):
                    replica.log.close()
        for state in self.dirs.values():
            if state.log_dir is not None:
                state.log_dir.close()
        log.info("log manager stopped")

    def housekeeping_alive(self) -> bool:
        """Whether the housekeeping thread (retention, flushes, deletes, dir probes) still runs: a health check."""
        return self.scheduler.alive()

    def _schedule_housekeeping(self) -> None:
        """The periodic tasks, named as Kafka's LogManager.startup() names them (and one of ours, the dir probe).
        `kafka-delete-logs` is scheduled by each delete (LogDirs.schedule_delete) for when it is due."""
        c, logs = self.config, self.log_dirs
        every = self.scheduler.schedule
        every("kafka-log-retention", logs.run_retention, c.log_retention_check_interval_ms / 1000)
        every("kafka-log-flusher", logs.flush_all, c.log_flush_interval_ms / 1000)
        every("kafka-recovery-point-checkpoint", lambda: logs.checkpoint_all(RECOVERY_POINT_FILES),
              c.log_flush_offset_checkpoint_interval_ms / 1000)
        every("kafka-log-start-offset-checkpoint", lambda: logs.checkpoint_all((LOG_START_OFFSET_CHECKPOINT,)),
              c.log_flush_start_offset_checkpoint_interval_ms / 1000)
        # Kafka has no such task (it finds a failed dir at its next I/O): mover.storage.dir_health.probe_log_dir.
        every("log-dir-health-check", logs.probe_dirs, c.log_dir_health_check_interval_ms / 1000)

    def log_config(self) -> LogConfig:
        return log_config_of(self.config)

    # ------------------------------------------------------------------ topics and partitions

    def replica(self, tp: TopicPartition) -> Replica:
        replica = self.replicas.get(tp)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{tp} is not on this broker")
        return replica

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     *, validate_only: bool = False) -> None:
        """CreateTopics for one topic, all or none (TopicAdmin.create)."""
        self.topic_admin.create(name, num_partitions, replication_factor, validate_only=validate_only)

    def create_partitions(self, name: str, count: int, *, assignments: list[list[int]] | None = None,
                          validate_only: bool = False) -> int:
        """CreatePartitions for one topic: grow it to `count`, the new partitions all or none (TopicAdmin.
        add_partitions); returns how many it had."""
        return self.topic_admin.add_partitions(name, count, assignments=assignments, validate_only=validate_only)

    def delete_topic(self, name: str) -> None:
        """DeleteTopics for one topic (TopicAdmin.delete)."""
        self.topic_admin.delete(name)

    # ------------------------------------------------------------------ reads and writes (delegated)

    def append(self, tp: TopicPartition, records: bytes | bytearray,
               parsed: Sequence[BatchHeader] = ()) -> AppendInfo:
        """Append whole v2 batches to the partition (Replica.append: its lock, its producer state; `parsed` as
        there). Then the append listeners (Fetch's long-poll wake-up) hear of it, outside the lock."""
        replica = self.replica(tp)
        with self.storage_guard(replica.log_dir, f"append to {tp} failed"):
            info = replica.append(records, parsed)
        self._appended(replica)
        return info

    def try_append(self, replica: Replica, records: bytes | bytearray,
                   parsed: Sequence[BatchHeader] = ()) -> AppendInfo | None:
        """`append` to `replica` (one of `replicas`, which the caller on the event loop already looked up) if it
        can run now without blocking (Replica.try_append); None when not, and nothing was done."""
        try:
            info = replica.try_append(records, parsed)
        except OSError:
            # The guard (the one mapping of a disk error) is entered only when there is one: on the event loop's
            # quick path its context manager and message cost more than the rest of the append's bookkeeping.
            with self.storage_guard(replica.log_dir, f"append to {replica.tp} failed"):
                raise
        if info is not None:
            self._appended(replica)
        return info

    def _appended(self, replica: Replica) -> None:
        # The Replica's own tp: the listeners' dicts then find their key by identity, without comparing fields.
        tp = replica.tp
        for listener in self.append_listeners:
            listener(tp)

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

    def read_broker_file(self, name: str) -> dict[Path, bytes]:
        """`name` from every online log dir that holds it (broker-wide state such as the producer id block).

        A dir that fails the read goes offline and is left out (`storage_guard`). A process limit (EMFILE, ENOMEM)
        fails the whole read with ResourceLimitError instead: the copy it could not read may be the newest one, and
        a caller that went on without it could hand out again what that copy records."""
        found: dict[Path, bytes] = {}
        for path in list(self.online_dirs()):
            try:
                with self.storage_guard(path, f"read {name}"):
                    try:
                        found[path] = (path / name).read_bytes()
                    except FileNotFoundError:
                        continue  # never written there (a new dir): nothing to read, nothing failed
            except ResourceLimitError:
                raise
            except KafkaStorageError:
                continue  # the dir is offline now; the others hold the same file
        return found

    def write_broker_file(self, name: str, data: bytes) -> int:
        """Write `name` atomically in every online log dir (broker-wide state such as the producer id block);
        returns how many dirs hold it now. A dir that fails the write goes offline; a full one keeps its old copy
        whole and stays online (a stale copy is outranked by the others at the next read, as after a crash)."""
        written = 0
        for path in list(self.online_dirs()):
            with self.storage_guard(path, f"write {name}", reraise=False, atomic=True):
                atomic_write(path / name, data)
                written += 1
        return written

    # ------------------------------------------------------------------ moves

    def alter_replica_log_dirs(
        self, assignments: Iterable[tuple[TopicPartition, str]], *, record: bool = True,
        messages: dict[TopicPartition, str] | None = None,
    ) -> tuple[dict[TopicPartition, int], int | None]:
        """A whole AlterReplicaLogDirs request (AlterReplicaLogDirs.alter): the error code per partition and the
        KIP-179 request id when at least one move was started or redirected; `messages` receives each error's text.
        With `record` (a client's request) the `request_recorder`, when set (ZooKeeper), turns the local request id
        into a cluster-wide one; a reassignment read from ZooKeeper passes record=False."""
        return self._alter_replica_log_dirs.alter(assignments, record=record, messages=messages)

    # The throttle and the move threads change only through DynamicBrokerConfig (IncrementalAlterConfigs,
    # ZooKeeper, a server.properties reload), which keeps the live config at the effective value and calls these.

    def _throttle_changed(self, _changed: Mapping[str, object]) -> None:
        rate = self.config.throttle_rate
        self.alter_log_dirs_manager.set_throttle(rate)
        log.info("intra-broker throttle set to %s", "unlimited" if rate is None else f"{rate} B/s")

    def _dir_budgets_changed(self, _changed: Mapping[str, object]) -> None:
        budgets = self.config.dir_budgets()
        self.alter_log_dirs_manager.set_dir_budgets(budgets)
        log.info("log dir move budgets: %s", ", ".join(f"{p} {r} B/s" for p, r in sorted(budgets.items())) or "none")

    def _threads_changed(self, _changed: Mapping[str, object]) -> None:
        self.alter_log_dirs_manager.resize(self.config.move_threads)

    # ------------------------------------------------------------------ failed dirs (LogDirs')

    def online_dirs(self) -> list[Path]:
        return self.log_dirs.online_dirs()

    # ------------------------------------------------------------------ describe

    def describe_log_dirs(self, topics: dict[str, list[int] | None] | None = None) -> list[LogDirInfo]:
        """DescribeLogDirs (DescribeLogDirs.describe): one entry per configured dir. `topics` None = every
        partition; {topic: None} = all its partitions."""
        return self._describe_log_dirs.describe(topics)
