"""TopicAdmin: CreateTopics, CreatePartitions and DeleteTopics on this broker's log dirs (Kafka's AdminManager with
the log side of its controller: the placement, the partition dirs made and retired).

It works on the LogDirs the LogManager owns (the registry, the structural lock, `storage_guard`, checkpoints and the
delayed deletes) and on the moves manager (remembered destinations, a deleted partition's move cancelled); it calls
nothing above it. The LogManager's `create_topic` / `create_partitions` / `delete_topic` are these.

Crash-safety invariants:
* A create is all or none: the new partitions are made with `Log.open(sync=False)`, made durable together
  (`_make_durable`: fsyncs of the new dirs and the log dirs, or one syncfs per file system for many), and only then
  published to `replicas`/`topics` under the lock; a failure renames each made partition dir to `-delete` (which
  recovery also finishes after a crash) and deletes it. A crash mid-create leaves unpublished partition dirs that
  load at the next start as partitions of the topic (nothing was acknowledged).
* Adding partitions to a topic (CreatePartitions) is the same all or none for the new partitions: made, made
  durable, then published with the topic's new count under the lock, or rolled back. A crash mid-way leaves new
  partition dirs that load at the next start as partitions of the topic, as Kafka's would after its controller
  wrote the new count.
* A delete retires each partition dir with one atomic rename to `-delete` (`Log.rename_to`: under the Log's
  PathGuard, files pinned), makes the renames durable with one fsync per log dir before it answers (a deleted topic
  never comes back after a power cut), rewrites the touched dirs' checkpoints (a topic created again under the
  name never inherits old recovery points) and leaves the bytes to `kafka-delete-logs`.
* No create writes a checkpoint: a partition missing from the checkpoints opens at recovery point 0 (its last
  segment is checked whole), which is correct.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from mover.faults import crash_point, fail_point
from mover.log.log_dirs import LogDirs, PendingDelete, log_config_of
from mover.log.log_loader import cyclic_gc_paused, young_collections_paused
from mover.log.replica import Replica
from mover.moves import ReplicaAlterLogDirsManager
from mover.storage.files import fsync_dir, sync_filesystem
from mover.storage.log import Log
from mover.storage.log_dir import disk_usage
from mover.storage.names import (
    TopicPartition,
    current_dir_name,
    delete_dir_name,
    fits_file_name_limit,
    is_valid_topic_name,
)

log = logging.getLogger(__name__)

# A create of up to this many partitions fsyncs each new directory; a larger one syncs each file system once,
# and builds its partitions with the cyclic GC paused (`cyclic_gc_paused`).
FSYNC_EACH_UP_TO = 64


class TopicAdmin:
    def __init__(self, config: BrokerConfig, logs: LogDirs, moves: ReplicaAlterLogDirsManager) -> None:
        self.config = config
        self._logs = logs
        self._moves = moves
        # Names reserved while their partition dirs are made or retired outside the structural lock: a request
        # that would make or retire a dir of the same name waits for none of it and answers as Kafka does instead.
        # Each entry has exactly one owner (a create, or the one grow running), released in the lock hold that
        # publishes or after the roll back: never by another request's clean-up.
        self._creating: dict[str, int] = {}  # topics being created or grown: name -> partitions being made
        self._deleting: set[str] = set()  # topics whose partition dirs are being renamed to `-delete`
        self._grow_lock = threading.Lock()  # CreatePartitions one at a time

    def create(self, name: str, num_partitions: int, replication_factor: int = 1,
               *, validate_only: bool = False) -> None:
        """Create a topic's partitions, all or none: published to `replicas`/`topics` together once every partition
        exists and is durable, rolled back (nothing left on disk) when one fails.

        Holds the structural lock only to reserve the name and to publish: a create of 10,000 partitions never stalls
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
        with self._logs.lock:
            if name in self._deleting:
                # Its old partition dirs are still being renamed away: a new `name-0` made now would be renamed
                # with them (a missing file, read as a failed disk). Kafka's ZooKeeper-era words for this state.
                raise TopicAlreadyExistsError(f'Topic "{name}" is marked for deletion.')
            if name in self._logs.topics or name in self._creating:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            self._check_room(num_partitions)
            self._check_placeable()
            if validate_only:
                return
            self._creating[name] = num_partitions
        self._make(name, None, range(num_partitions))
        log.info("created topic %s with %d partitions", name, num_partitions)

    def add_partitions(self, name: str, count: int, *, assignments: list[list[int]] | None = None,
                       validate_only: bool = False) -> int:
        """CreatePartitions for one topic: grow it to `count` partitions, the new ones all or none (made, durable,
        then published with the new count), placed as a create places them. Returns how many it had.
        `assignments`, if given, are the brokers of each new partition: one list per new partition, each this
        broker alone (the whole cluster); checked after the count, against the count read under the lock, in
        Kafka's order and words.

        One at a time (`_grow_lock`): Kafka's controller serializes them too, and a second request for the topic
        must see the first one's count."""
        with self._grow_lock:
            with self._logs.lock:
                current = self._logs.topics.get(name)
                if current is None:
                    raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
                if count < current:
                    raise InvalidPartitionsError(
                        f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
                if count == current:
                    raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
                if assignments is not None:
                    self._check_assignments(assignments, count - current)
                if not fits_file_name_limit(TopicPartition(name, count - 1)):
                    raise InvalidPartitionsError(f"partition {count - 1} of {name!r} would not fit a file name")
                self._check_room(count - current)
                self._check_placeable()
                if validate_only:
                    return current
                # Counted against max.broker.partitions while made; the name is taken (it exists), so no create
                # can share the entry.
                self._creating[name] = count - current
            self._make(name, current, range(current, count))
        log.info("added partitions %d-%d to topic %s", current, count - 1, name)
        return current

    def _check_assignments(self, assignments: list[list[int]], more: int) -> None:
        if len(assignments) != more:
            raise InvalidReplicaAssignmentError(
                f"Attempted to add {more} additional partition(s), but only {len(assignments)} assignment(s) were "
                "specified.")
        me = self.config.broker_id
        for brokers in assignments:
            if brokers != [me]:
                raise InvalidReplicaAssignmentError(
                    f"each new partition must be assigned to broker {me} alone, the only broker (got {brokers})")

    def _check_room(self, more: int) -> None:
        """max.broker.partitions against what exists and what is being made (under the lock)."""
        limit = self.config.max_broker_partitions
        have = len(self._logs.replicas) + sum(self._creating.values())
        if have + more > limit:
            raise PolicyViolationError(
                f"{more} more partitions would make {have + more} on this broker; max.broker.partitions is {limit}")

    def _make(self, name: str, before: int | None, partitions: range) -> None:
        """Build `partitions` of the topic that had `before` partitions (None: a new topic), then publish them with
        the new count, or roll back what was made; the `_creating` entry is released either way."""
        created: list[Replica] = []
        try:
            self._build(name, partitions, created)
            with self._logs.lock:
                if self._logs.topics.get(name) != before:
                    # Deleted while the new partitions were built (a grow): nothing of them may be published.
                    raise UnknownTopicOrPartitionError(f"topic {name!r} was deleted meanwhile")
                self._publish(name, created)
                self._logs.topics[name] = partitions.stop
                # Released in the hold that publishes: once the name is in `topics` a grow may reserve it, and a
                # release in a later hold would drop that grow's entry, letting a create of the name (after a
                # delete) make partition dirs the grow is making too.
                self._creating.pop(name, None)  # never raise here: the partitions are published
        except BaseException:
            # The dirs are retired before the name is released, so nothing made under it can be reused.
            self._roll_back_create(name, created)
            with self._logs.lock:
                self._creating.pop(name, None)
            raise

    def _build(self, name: str, partitions: range, created: list[Replica]) -> None:
        """Make the partitions (outside the lock, appended to `created` as they are made, so the caller's roll back
        finds them after a failure) and make them durable together."""
        usable = self._usable_bytes()
        placed: dict[Path, int] = {}
        cfg = log_config_of(self.config)
        # Many partitions are built with the cyclic GC paused (in moverd: one collection at the end instead of
        # three during the build): they live until deleted, and otherwise the full collection the create made
        # due fell into whatever request came next (a DeleteTopics of them, docs/data-path.md).
        with cyclic_gc_paused() if len(partitions) > FSYNC_EACH_UP_TO else contextlib.nullcontext():
            for p in partitions:
                tp = TopicPartition(name, p)
                with self._logs.lock:
                    dir_path = self._choose_dir(tp, placed, usable)
                placed[dir_path] = placed.get(dir_path, 0) + 1
                with self._logs.storage_guard(dir_path, f"cannot create {tp} in {dir_path}"):
                    fail_point("create.partition")
                    new_log = Log.open(dir_path / current_dir_name(tp), tp, cfg, sync=False)
                created.append(Replica(tp, new_log, dir_path))
        self._make_durable(name, created, list(placed))

    def _publish(self, name: str, created: list[Replica]) -> None:
        """Under the lock: the new replicas become visible, unless a dir they are on failed meanwhile."""
        for replica in created:
            if not self._logs.dirs[replica.log_dir].online:
                raise KafkaStorageError(f"log dir {replica.log_dir} failed while {name} was created")
        for replica in created:
            self._logs.replicas[replica.tp] = replica

    def _make_durable(self, name: str, created: list[Replica], log_dirs: list[Path]) -> None:
        """Before the answer says "created", the new names must survive a power cut: each new partition dir's entry
        for its first segment, and each log dir's entries for the partition dirs (Log.open skipped its two fsyncs
        per partition). A few partitions: those directory fsyncs. Many: one syncfs per file system, which commits
        them all at once (two fsyncs per partition, each a journal commit, took 7 s for 10,000 here), at the cost
        of also writing out whatever else is dirty on that disk now rather than within the next 30 s."""
        if len(created) <= FSYNC_EACH_UP_TO:
            targets = [(r.log.dir, r.log_dir) for r in created if r.log is not None] + [(d, d) for d in log_dirs]
            for path, owner in targets:
                with self._logs.storage_guard(owner, f"cannot make {name}'s partitions in {owner} durable"):
                    fsync_dir(path)
            return
        seen: set[int] = set()
        for d in log_dirs:
            with self._logs.storage_guard(d, f"cannot make {name}'s partitions in {d} durable"):
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
            state = self._logs.dirs.get(replica.log_dir)
            if state is None or not state.online:
                continue
            target = lg.dir.parent / delete_dir_name(replica.tp)
            with self._logs.storage_guard(replica.log_dir, f"roll back {replica.tp}", reraise=False) as failed:
                os.rename(lg.dir, target)
            if not failed:
                self._logs.delete_now(PendingDelete(0.0, target, None))
        log.warning("create of topic %s failed: %d partitions it had made were removed", name, len(created))

    def _usable_bytes(self) -> dict[Path, int]:
        """Usable bytes of each online dir, read once per create: new partitions are empty, so they do not change
        what placement compares (a statvfs per partition per dir made 10,000 partitions cost 40,000 calls)."""
        out: dict[Path, int] = {}
        for state in list(self._logs.dirs.values()):
            if not state.online:
                continue
            with self._logs.storage_guard(state.path, "disk usage", reraise=False):
                out[state.path] = disk_usage(state.path)[1]
        return out

    def _check_placeable(self) -> None:
        """A new partition needs an online dir that is not cordoned; with none, Kafka 4.3's controller refuses the
        create with INVALID_REPLICATION_FACTOR and these words (one broker here, so 0 usable brokers)."""
        cordoned = self.config.cordoned_dirs()
        if any(s.online and s.path not in cordoned for s in self._logs.dirs.values()):
            return
        if not any(s.online for s in self._logs.dirs.values()):
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
        remembered = self._moves.remembered.take(tp)
        if (remembered is not None and self._logs.dirs.get(remembered) and self._logs.dirs[remembered].online
                and remembered not in cordoned):
            return remembered
        candidates = [(p, u) for p, u in usable.items() if self._logs.dirs[p].online and p not in cordoned]
        if not candidates:
            # Cordoned (or failed) since the create began: the same answer as before it began.
            self._check_placeable()
            raise KafkaStorageError("no log dir is online")
        best = max(u for _, u in candidates)
        near = [(placed.get(p, 0), -u, str(p), p) for p, u in candidates if u >= best * 0.99]
        return min(near)[3]

    def delete(self, name: str) -> None:
        """Retire every partition of the topic (one rename each), make the renames durable with one fsync per log
        dir, rewrite each touched dir's checkpoints once (so a topic created again under this name never inherits
        the old recovery points), and leave the bytes to the background deleter."""
        with self._logs.lock:
            if name not in self._logs.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            victims = [r for tp, r in self._logs.replicas.items() if tp.topic == name]
            del self._logs.topics[name]
            for replica in victims:
                del self._logs.replicas[replica.tp]
                if replica.move is not None:
                    self._moves.cancel(replica)
            self._deleting.add(name)  # until every partition dir is renamed: no create of the name before
        try:
            self._retire(name, victims)
        finally:
            with self._logs.lock:
                self._deleting.discard(name)
        log.info("deleted topic %s", name)

    def _retire(self, name: str, victims: list[Replica]) -> None:
        """Rename each partition dir of a deleted topic to `-delete`, make the renames durable, rewrite the touched
        dirs' checkpoints and schedule the bytes' deletion."""
        crash_point("delete.rename")
        # The renamed paths and the pending deletes outlive the request: walked once, after it, not twice during it.
        with young_collections_paused() if len(victims) > FSYNC_EACH_UP_TO else contextlib.nullcontext():
            retired: list[tuple[Path, Log]] = []
            touched: set[Path] = set()
            token = uuid.uuid4().hex  # one for every partition's `-delete` name (delete_dir_name)
            for replica in victims:
                move = replica.move
                if move is not None:
                    move.wait(30)
                with replica.lock:
                    old = replica.log
                    replica.log = None
                    replica.offline_reason = "deleted"
                    if old is None or not self._logs.dirs[replica.log_dir].online:
                        continue
                    target = old.dir.parent / delete_dir_name(replica.tp, token)
                    with self._logs.storage_guard(replica.log_dir, f"delete {replica.tp}", reraise=False) as failed:
                        # Retire the whole partition dir in one atomic step; the bytes go later, in the background.
                        # Under the Log's PathGuard (`rename_to`): a reader of the old Log still in flight reopens no
                        # stale path.
                        old.rename_to(target, appends=False)  # replica.log is None: nobody appends to it
                    if failed:
                        continue
                retired.append((target, old))
                touched.add(replica.log_dir)
            for path in touched:
                with self._logs.storage_guard(path, f"delete of {name}", reraise=False):
                    # The renames durable before the answer: after a power cut the topic must not come back.
                    fsync_dir(path)
                self._logs.write_checkpoints(path)
            for target, old in retired:
                self._logs.schedule_delete(target, old, delay=True)
