"""LogDirs: the broker's log dirs and the replicas in them, what the LogManager's parts share (topics, move
admission, housekeeping, describe), and the one place an OSError from a log dir is mapped to a failed dir.

- The registry: `dirs` (LogDirState per configured dir), `replicas`, `topics` (partition counts), and `lock`, the
  structural lock (create, delete, start/cancel a move, a dir failing; the moves manager attaches and detaches moves
  under it). Reads (describe, metrics, the data path) take no lock: they read each field once.
- Failures: `storage_guard(path, what)` around every storage call on a dir; `dir_failed(path, err)` for errors
  reported as outcomes (the loader's, a move's, the probe's). A process limit (EMFILE, ENFILE, ENOMEM) is not a
  disk failure: the request fails, the dir stays online.
- Housekeeping bodies the LogManager schedules: `run_retention`, `flush_all`, `checkpoint_all`, `probe_dirs`, and
  the delayed deletes (`schedule_delete`, Kafka's `kafka-delete-logs`). A retention check a move postponed (a move
  pauses its replica's retention) runs as soon as the move ends (`move_ended`, a moves-manager observer), not one
  log.retention.check.interval.ms later.

Crash-safety invariants:
* A log dir that raised an I/O error is offline until restart: its replicas answer KAFKA_STORAGE_ERROR, moves
  touching it fail, nothing is written to it again (every writer here checks `online` first, under a guard).
* Checkpoint files list only partitions whose current copy lives in that dir (`write_checkpoints` builds them from
  the replicas in it; each file is replaced atomically by LogDir); a timer may rewrite one file before another, so
  a file may lack partitions created since, which then open at recovery point 0 (slower, never wrong).
* A retired (`-delete`) dir is deleted only after its delay, entry by entry and then the dir: a crash part-way
  leaves a `-delete` dir, which recovery schedules for deletion again at the next start.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.errors import KafkaStorageError, ResourceLimitError
from mover.faults import crash_point
from mover.log.log_loader import LogDirState
from mover.log.replica import Replica, ReplicaTable
from mover.log.scheduler import Scheduler
from mover.moves import MoveOutcome, ReplicaAlterLogDirsManager, ReplicaMove
from mover.storage.dir_health import describe_resource_limit, is_no_space, is_resource_limit, probe_log_dir
from mover.storage.log import Log, LogConfig
from mover.storage.names import CHECKPOINT_FILES, TopicPartition

log = logging.getLogger(__name__)

# A process limit hit (EMFILE, ENOMEM) is logged at most this often, with the count of failures in between.
RESOURCE_LIMIT_LOG_INTERVAL_S = 10.0


def log_config_of(config: BrokerConfig) -> LogConfig:
    return LogConfig(
        segment_bytes=config.log_segment_bytes,
        retention_bytes=config.log_retention_bytes,
        retention_ms=config.log_retention_ms,
        index_interval_bytes=config.log_index_interval_bytes,
    )


@dataclass(order=True)
class PendingDelete:
    due: float  # time.monotonic()
    path: Path = field(compare=False)
    old_log: Log | None = field(compare=False, default=None)


class LogsToBeDeleted:
    """Kafka's `logsToBeDeleted`: retired (`-delete`) partition dirs waiting out log.segment.delete.delay.ms, in the
    order they are due."""

    def __init__(self) -> None:
        self._heap: list[PendingDelete] = []
        self._lock = threading.Lock()

    def add(self, item: PendingDelete) -> None:
        with self._lock:
            heapq.heappush(self._heap, item)

    def take_due(self, now: float) -> tuple[list[PendingDelete], float | None]:
        """The deletes due at `now`, taken out, and when the next one is due (None: none left)."""
        with self._lock:
            due = []
            while self._heap and self._heap[0].due <= now:
                due.append(heapq.heappop(self._heap))
            return due, (self._heap[0].due if self._heap else None)

    def paths(self) -> list[Path]:
        with self._lock:
            return [d.path for d in self._heap]


class LogDirs:
    def __init__(self, config: BrokerConfig, moves: ReplicaAlterLogDirsManager, lock: threading.RLock,
                 scheduler: Scheduler) -> None:
        self.config = config
        self.moves = moves
        self.lock = lock
        self.scheduler = scheduler
        self.dirs: dict[Path, LogDirState] = {}
        self.replicas: dict[TopicPartition, Replica] = ReplicaTable()
        self.topics: dict[str, int] = {}  # topic -> partition count
        self.logs_to_be_deleted = LogsToBeDeleted()
        # Replicas a retention check skipped because a move held them; checked again when their move ends.
        self._retention_postponed: set[TopicPartition] = set()
        self._limit_logged_at = -RESOURCE_LIMIT_LOG_INTERVAL_S
        self._limit_hits = 0

    def online_dirs(self) -> list[Path]:
        return [s.path for s in self.dirs.values() if s.online]

    def replicas_in(self, path: Path) -> list[Replica]:
        return [r for r in list(self.replicas.values()) if r.log_dir == path and r.log is not None]

    # ------------------------------------------------------------------ failed dirs

    @contextlib.contextmanager
    def storage_guard(self, path: Path, what: str, *, reraise: bool = True,
                      atomic: bool = False) -> Iterator[list[OSError]]:
        """Run storage work on log dir `path`; the one place an OSError from it is caught.

        A process limit (EMFILE, ENFILE, ENOMEM) fails the work with ResourceLimitError and leaves the dir online;
        any other OSError takes the dir offline and fails it with KafkaStorageError. With reraise=False the error
        is swallowed (background work: flush, checkpoints, retention, deletes) and the yielded list holds it.
        `atomic=True` says the work only replaces whole files (tmp, fsync, rename): a full disk (ENOSPC, EDQUOT)
        then leaves every old file whole, so the dir stays online and the work is tried again at its next turn
        (Kafka takes the dir offline; docs/operations.md)."""
        failed: list[OSError] = []
        try:
            yield failed
        except OSError as e:
            failed.append(e)
            if atomic and is_no_space(e):
                log.warning("log dir %s is full: %s failed and will be tried again; the dir stays online: %s",
                            path, what, e)
                if reraise:
                    raise KafkaStorageError(f"{what}: {e}") from e
                return
            self.dir_failed(path, e, what)
            if reraise:
                if is_resource_limit(e):
                    raise ResourceLimitError(f"{what}: {describe_resource_limit(e)}") from e
                raise KafkaStorageError(f"{what}: {e}") from e

    def dir_failed(self, path: Path, err: OSError | str, what: str = "") -> None:
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
        with self.lock:
            # The work that failed is in the line: an operator must know what broke, not only the errno.
            reason = f"{type(err).__name__}: {err}" if isinstance(err, OSError) else err
            self._mark_offline(path, f"{what}: {reason}" if what else reason)

    def _mark_offline(self, path: Path, reason: str) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online:
            return
        state.error = reason
        log.error("log dir %s is now offline: %s", path, reason)
        for replica in list(self.replicas.values()):
            move = replica.move
            if replica.log_dir == path:
                replica.offline_reason = f"log dir {path} is offline"
                if move is not None:
                    move.fail(f"source log dir {path} failed")
            elif move is not None and move.destination_dir == path:
                move.fail(f"destination log dir {path} failed")
        self.moves.remembered.forget_dir(path)

    def probe_dirs(self) -> None:
        """Look for failed dirs between I/O (mover.storage.dir_health.probe_log_dir): without a probe a failure
        would surface only at the next roll or checkpoint."""
        for state in list(self.dirs.values()):
            if state.online:
                err = probe_log_dir(state.path)
                if err is not None:
                    self.dir_failed(state.path, err)

    # ------------------------------------------------------------------ checkpoints, flushes, retention

    def write_checkpoints(self, path: Path, files: Collection[str] = CHECKPOINT_FILES) -> None:
        state = self.dirs.get(path)
        if state is None or not state.online or state.log_dir is None:
            return
        logs = [r.log for r in self.replicas_in(path) if r.log is not None and not r.offline]
        with self.storage_guard(path, "checkpoint", reraise=False, atomic=True):
            state.log_dir.write_checkpoints(
                {lg.tp: lg.recovery_point for lg in logs},
                {lg.tp: lg.log_start_offset for lg in logs},
                {lg.tp: lg.high_watermark for lg in logs},
                files,
            )

    def checkpoint_all(self, files: Collection[str] = CHECKPOINT_FILES) -> None:
        """Kafka's checkpoint tasks (`kafka-recovery-point-checkpoint` every log.flush.offset.checkpoint.interval.ms,
        `kafka-log-start-offset-checkpoint` every log.flush.start.offset.checkpoint.interval.ms): rewrite the named
        checkpoint files of every online dir from the logs' current offsets."""
        for path, state in list(self.dirs.items()):
            if state.online:
                self.write_checkpoints(path, files)

    def flush_all(self) -> None:
        for path, state in list(self.dirs.items()):
            if not state.online:
                continue
            for replica in self.replicas_in(path):
                with replica.lock:
                    if replica.log is None or replica.offline:
                        continue
                    with self.storage_guard(path, f"flush of {replica.tp}", reraise=False):
                        replica.log.flush()
            self.write_checkpoints(path)

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every replica that is not moving (a move pauses it; see Replica)."""
        return self._retention(list(self.replicas.values()), now_ms)

    def run_postponed_retention(self) -> int:
        """The retention checks moves postponed, for the replicas whose move has ended since."""
        with self.lock:
            due = [r for tp in self._retention_postponed if (r := self.replicas.get(tp)) is not None
                   and not r.retention_paused]
            self._retention_postponed.difference_update(r.tp for r in due)
        return self._retention(due, None)

    def _retention(self, replicas: list[Replica], now_ms: int | None) -> int:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        deleted = 0
        for replica in replicas:
            if replica.offline:
                continue
            with replica.lock:
                if replica.retention_paused:
                    # A long move would otherwise leave the partition past retention.bytes / .ms until the first
                    # check after it, minutes later by default (and never, for moves back to back).
                    with self.lock:
                        self._retention_postponed.add(replica.tp)
                    continue
                if replica.log is None:
                    continue
                if replica.tp in self._retention_postponed:
                    with self.lock:  # run_postponed_retention walks the set under it
                        self._retention_postponed.discard(replica.tp)
                with self.storage_guard(replica.log_dir, f"retention of {replica.tp}", reraise=False):
                    deleted += replica.log.delete_retained_segments(now_ms)
        if deleted:
            for path in list(self.dirs):
                self.write_checkpoints(path)
        return deleted

    # A moves-manager observer (mover.moves.manager.MoveObserver): runs on request and move threads, so it only
    # schedules; the check runs on the housekeeping thread. Scheduled after every move, postponed or not: a check
    # that saw the move attached may still be running there, and records the replica before this task can run.
    def move_started(self, move: ReplicaMove) -> None:
        pass

    def move_ended(self, outcome: MoveOutcome) -> None:
        self.scheduler.schedule_once("kafka-log-retention-postponed", self.run_postponed_retention)

    # ------------------------------------------------------------------ delayed deletes

    def schedule_delete(self, path: Path, old_log: Log | None, *, delay: bool) -> None:
        """Delete the retired dir `path` (and close `old_log`, the Log that read from it) after
        log.segment.delete.delay.ms, or at once without `delay`."""
        delay_s = self.config.log_segment_delete_delay_ms / 1000 if delay else 0.0
        self.logs_to_be_deleted.add(PendingDelete(time.monotonic() + delay_s, path, old_log))
        self.scheduler.schedule_once("kafka-delete-logs", self.delete_logs, delay_s)

    def delete_logs(self) -> None:
        """Kafka's `kafka-delete-logs`: delete the retired dirs whose delay has passed, then run again when the
        next one is due."""
        due, next_due = self.logs_to_be_deleted.take_due(time.monotonic())
        for item in due:
            self.delete_now(item)
        if next_due is not None:
            self.scheduler.schedule_once("kafka-delete-logs", self.delete_logs, max(0.0, next_due - time.monotonic()))

    def delete_now(self, item: PendingDelete) -> None:
        if item.old_log is not None:
            with contextlib.suppress(OSError):
                item.old_log.close()

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):  # gone already (a second delete, a restart's recovery)
                entries = sorted(os.listdir(item.path))
                for i, name in enumerate(entries):
                    os.unlink(item.path / name)
                    if i == 0:
                        crash_point("delete.during")
                os.rmdir(item.path)

        owner = item.path.parent
        failed: list[OSError] = []
        if owner in self.dirs:
            with self.storage_guard(owner, f"delete {item.path}", reraise=False) as failed:
                remove()
        else:
            try:
                remove()
            except OSError as e:
                failed.append(e)
        if failed:
            log.warning("could not delete %s: %s", item.path, failed[0])
        elif not os.path.lexists(item.path):
            log.info("deleted %s", item.path)
