"""LogLoader: what opens the broker's log dirs at start-up (Kafka's `LogManager.loadLogs` with its `LogLoader`).

Two steps, both called by `LogManager.startup` and neither calling anything above this module:
1. `open_dirs(cluster_id)`: each configured dir created if missing, locked, its meta.properties checked and its
   checkpoints read (`LogDir.open`); a dir that cannot be opened starts offline (the daemon still starts, as Kafka
   does). Returns one `LogDirState` per dir.
2. `load(dirs)`: recovery (recovery/: scan -> plan -> execute, the moves and swaps a crash interrupted) and then
   every partition's Log opened on a few threads, as Replicas. Returns a `LoadedLogs`: the replicas and topics, the
   interrupted moves to resume, the retired dirs recovery scheduled for deletion and the dirs that failed while
   loading, which the owner hands to its dir-failure handling (`LogManager.dir_failed`): outcomes, never calls up.

Crash-safety invariants:
* Loading itself writes nothing but what its callees state at their tops: LogDir.open writes meta.properties once,
  atomically, and drops Kafka's clean-shutdown marker durably; recovery's renames are each stated in recovery/;
  Log.open truncates a torn tail past the recovery point. A crash while loading leaves dirs the next start loads.
* A partition that cannot be opened is never absent: it is an offline Replica (a resource limit, or recovery could
  not choose between its copies), so a create of the same name can never land over its data.
* A partition whose dir failed while loading is in `LoadedLogs.replicas`; the owner takes the dir offline, and with
  it every partition in it, before anything is served.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import gc
import itertools
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import recovery
from mover.config.broker import BrokerConfig, parse_properties
from mover.log.replica import Replica
from mover.storage import record_batch
from mover.storage.dir_health import describe_resource_limit, is_resource_limit
from mover.storage.log import Log, LogConfig
from mover.storage.log_dir import LogDir
from mover.storage.names import (
    LOG_SUFFIX,
    META_PROPERTIES,
    DirKind,
    TopicPartition,
    current_dir_name,
    parse_partition_dir,
    parse_segment_file_name,
)

log = logging.getLogger(__name__)

# Opening logs waits on the disk when the page cache is cold (a listing, a stat, one header walk per partition), and
# a few threads hide that latency. More cost more than they hide: each syscall hands the GIL to another thread.
# Measured (bench/startup.py, 100,000 partitions, 2 cores): 2/4/8 threads took 8.0/9.8/11.0 s warm, 13.4/12.6/17.1 s
# with the page cache dropped.
OPEN_THREADS = 4
# Partitions one opening task takes: enough that the per-task cost (a future, a queue round trip) is noise, few
# enough that the threads share the work evenly (10,000 partitions: 40 tasks for 4 threads).
OPEN_CHUNK = 256


@dataclass
class LogDirState:
    path: Path
    log_dir: LogDir | None
    error: str | None = None

    @property
    def online(self) -> bool:
        return self.error is None


@dataclass
class LoadedLogs:
    """What `LogLoader.load` found and built."""

    replicas: dict[TopicPartition, Replica] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    # Moves a stop or crash interrupted: (partition, source dir, the `.move` copy to resume).
    resume: list[recovery.MoveToResume] = field(default_factory=list)
    # Retired partition dirs recovery left for the delayed delete.
    deletes: list[Path] = field(default_factory=list)
    # Dirs that failed while loading, in the order they failed, with the error: for the owner's dir-failure handling
    # (a process limit among them keeps its dir online; its partition is an offline replica here).
    failed: list[tuple[Path, OSError | str]] = field(default_factory=list)

    def add(self, replica: Replica) -> None:
        tp = replica.tp
        self.replicas[tp] = replica
        self.topics[tp.topic] = max(self.topics.get(tp.topic, 0), tp.partition + 1)


class LogLoader:
    def __init__(self, config: BrokerConfig, log_config: LogConfig) -> None:
        self.config = config
        self.log_config = log_config

    def open_dirs(self, cluster_id: str) -> dict[Path, LogDirState]:
        dirs: dict[Path, LogDirState] = {}
        for path in self.config.log_dirs:
            log_dir = LogDir(path)
            try:
                path.mkdir(parents=True, exist_ok=True)
                log_dir.open(self.config.broker_id, cluster_id)  # reads the checkpoints: an entry per partition
            except OSError as e:
                # A dir unreadable at start-up starts offline; the daemon still starts (Kafka does the same).
                log.error("log dir %s is offline: %s", path, e)
                dirs[path] = LogDirState(path, None, f"{type(e).__name__}: {e}")
                continue
            dirs[path] = LogDirState(path, log_dir)
        return dirs

    def load(self, dirs: dict[Path, LogDirState]) -> LoadedLogs:
        """Recover, then open every partition of the dirs online in `dirs` (which this does not change)."""
        loaded = LoadedLogs()
        result = recovery.recover(
            list(self.config.log_dirs),
            leo_of=read_log_end_offset,
            schedule_delete=loaded.deletes.append,
            logger=log,
        )
        loaded.resume = result.resume
        loaded.failed.extend(result.failed_dirs.items())
        failed = set(result.failed_dirs)
        jobs: list[tuple[TopicPartition, Path, int, int]] = []
        for state in dirs.values():
            if not state.online or state.log_dir is None or state.path in failed:
                continue
            # As LogDir.open read them: recovery renames partition dirs but never writes a checkpoint, and a second
            # read parsed every entry of every dir again (0.6 s of a 100,000-partition restart).
            checkpoints = state.log_dir.checkpoints
            recovery_points = checkpoints.get("recovery-point-offset-checkpoint", {})
            start_offsets = checkpoints.get("log-start-offset-checkpoint", {})
            try:
                entries = os.listdir(state.path)
            except OSError as e:
                loaded.failed.append((state.path, e))
                continue
            for name in entries:
                parsed = parse_partition_dir(name)
                if parsed is None or parsed.kind is not DirKind.CURRENT or parsed.tp in result.offline:
                    continue
                tp = parsed.tp
                jobs.append((tp, state.path, recovery_points.get(tp, 0), start_offsets.get(tp, 0)))
        self._open_logs(jobs, loaded)
        for tp, (paths, reason) in result.offline.items():
            replica = Replica(tp, None, paths[0].parent if paths else Path("/"))
            replica.offline_reason = reason
            loaded.add(replica)
            log.error("partition %s is offline: %s (%s)", tp, reason, ", ".join(map(str, paths)))
        return loaded

    def _open_logs(self, jobs: list[tuple[TopicPartition, Path, int, int]], loaded: LoadedLogs) -> None:
        cfg = self.log_config

        def open_one(job: tuple[TopicPartition, Path, int, int]) -> tuple[TopicPartition, Path, Log | OSError]:
            tp, dir_path, rp, lso = job
            try:
                return tp, dir_path, Log.open(dir_path / current_dir_name(tp), tp, cfg, recovery_point=rp,
                                              log_start_offset=lso)
            except OSError as e:
                return tp, dir_path, e

        def open_chunk(chunk: list[tuple[TopicPartition, Path, int, int]]) -> list[tuple[TopicPartition, Path,
                                                                                         Log | OSError]]:
            return [open_one(job) for job in chunk]

        # Chunks, not one task per partition: ThreadPoolExecutor.map submits every task at once, and 100,000
        # futures (each with its Condition and lock) were most of what the cyclic GC walked during start-up.
        chunks = [jobs[i:i + OPEN_CHUNK] for i in range(0, len(jobs), OPEN_CHUNK)]
        with ThreadPoolExecutor(OPEN_THREADS) as ex:
            for tp, dir_path, opened in itertools.chain.from_iterable(ex.map(open_chunk, chunks)):
                if isinstance(opened, OSError):
                    loaded.failed.append((dir_path, opened))
                    if is_resource_limit(opened):
                        # The dir stays online, but this partition could not be opened: offline until restart,
                        # never absent (an absent partition could be created again over its data).
                        replica = Replica(tp, None, dir_path)
                        replica.offline_reason = describe_resource_limit(opened)
                        loaded.add(replica)
                    continue
                loaded.add(Replica(tp, opened, dir_path))


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Run a block that builds many long-lived objects (start-up, a create of many partitions: about 30 GC-tracked
    objects per partition) with the cyclic GC off, and leave what it built in the oldest generation.

    With the GC on, each time the objects that survived grew by a quarter a full collection walked all of them: 20
    full collections, 7 s of a 26 s start with 100,000 partitions (0.2 s at 10,000), the part of start-up that grew
    faster than the partitions. Reference counting still frees almost everything; the block leaves no cycles
    behind (a collection after a 10,000-partition start found 5 objects).

    Afterwards the objects go to the oldest generation in constant time: `gc.freeze()` moves every tracked object to
    the permanent generation, `gc.unfreeze()` back into the oldest one. Left young, the first collection after the
    block would walk them all (1.3 s at 100,000 partitions), as would a `gc.collect()` here. A later full collection
    walks them once, except in moverd, which freezes them for good right after start-up (mover/daemon/main.py). If
    objects were frozen before (moverd, once started), unfreezing would thaw those too: one collection instead, which
    walks only what is not frozen (0.15-0.25 s for a create of 10,000 partitions, instead of the three full
    collections the create made with the GC on) and leaves the next full collection ten middle-generation
    collections away, so it no longer falls into the request after the block (a DeleteTopics of those partitions
    paid 0.26-0.40 s so, docs/data-path.md). Not frozen there: a freeze while clients are connected would keep
    each connection's objects (a cycle) for good once it closes. Nested, or with the GC already off, it changes
    nothing."""
    with _gc_off_then(_to_oldest_generation):
        yield


def _to_oldest_generation() -> None:
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
        gc.enable()
    else:
        gc.enable()
        gc.collect()


@contextlib.contextmanager
def young_collections_paused() -> Iterator[None]:
    """Run a block that makes many objects which outlive it but not the daemon (a DeleteTopics: four paths and a
    `PendingDelete` a partition, kept until the delayed delete) with the cyclic GC off, and walk them once at its
    end, in one collection of the youngest and middle generations.

    With the GC on, such a block frees about as many tracked objects as it makes (a rename replaces each segment's
    paths), so the youngest generation's count, which is made minus freed, stays low while its list grows: its
    first collection walked most of what the block had made, and a middle-generation collection soon walked it all
    again (0.07-0.13 s of a 10,000-partition delete, docs/data-path.md). Nested, or with the GC already off, it
    changes nothing."""
    with _gc_off_then(_collect_young_and_middle):
        yield


def _collect_young_and_middle() -> None:
    gc.enable()
    gc.collect(1)


@contextlib.contextmanager
def _gc_off_then(finish: Callable[[], None]) -> Iterator[None]:
    """The block with the cyclic GC off, then `finish()` (which enables it again). Nested, or with the GC already
    off, neither happens: the outer block finishes."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        finish()


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
