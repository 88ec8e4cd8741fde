"""LogDir: one JBOD log directory of the broker: its lock, its identity and its checkpoint files.

Crash-safety invariants:
* `.lock` is held with flock(LOCK_EX | LOCK_NB) for the object's life, so two daemons (or a daemon and a Kafka
  broker, which locks the same file the same way) never write one dir. The kernel drops the lock when the
  process dies, so a crash never leaves a stale lock behind.
* meta.properties is created once, atomically (tmp, fsync, rename, fsync dir); an existing one is only read, so a
  Kafka broker's (version 1, `node.id`, `directory.id`) is kept exactly as it is.
* Kafka's `.kafka_cleanshutdown` marker is removed, durably, before anything in the dir is written: it tells a Kafka
  broker its logs need no recovery, which stops being true once moverd writes them (and a moverd crash could leave
  a torn tail that a Kafka broker started next would then trust).
* Each checkpoint is replaced atomically (checkpoint.py): a crash leaves the old or the new one, whole. Stray
  `*.tmp` files from a crash are ignored.
* A checkpoint that cannot be parsed is treated as empty: a recovery point of 0 makes `Log.open` CRC-check the
  last segment (slower, never wrong), a missing log start offset falls back to the first segment.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Collection, Mapping
from pathlib import Path

import psutil

from mover.storage.checkpoint import read_checkpoint, write_checkpoint
from mover.storage.errors import (
    BrokerIdMismatchError,
    ClusterIdMismatchError,
    CorruptCheckpointError,
    CorruptMetaPropertiesError,
    LogDirLockedError,
)
from mover.storage.files import atomic_write, fsync_dir
from mover.storage.names import (
    CHECKPOINT_FILES,
    CLEANER_OFFSET_CHECKPOINT,
    KAFKA_CLEAN_SHUTDOWN_FILE,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
)

log = logging.getLogger(__name__)

Checkpoints = dict[str, dict[TopicPartition, int]]


def parse_properties(text: str) -> dict[str, str]:
    """Java properties, the subset Kafka writes: `key=value` (or `key: value`) lines, `#` / `!` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            props[line] = ""
        else:
            props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def format_meta_properties(broker_id: int, cluster_id: str | None) -> str:
    lines = ["#", "#Written by moverd", "version=0", f"broker.id={broker_id}"]
    if cluster_id:
        lines.append(f"cluster.id={cluster_id}")
    return "\n".join(lines) + "\n"


class LogDir:
    def __init__(self, path: Path) -> None:
        if not path.is_absolute():
            raise ValueError(f"log dir {path} is not an absolute path")
        self.path = path
        self.online = False
        self.broker_id: int | None = None
        self.cluster_id: str | None = None
        self._lock_fd: int | None = None
        self._checkpoints: Checkpoints = {name: {} for name in CHECKPOINT_FILES}
        # Moves, housekeeping and topic changes all checkpoint: one writer at a time, newest state last.
        self._checkpoint_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LogDir({self.path}, online={self.online})"

    # ------------------------------------------------------------------ open / close

    def open(self, broker_id: int, cluster_id: str | None = None) -> None:
        """Lock the dir, create or check meta.properties, read the checkpoints. OSError on I/O failure."""
        self._lock()
        try:
            self._check_meta(broker_id, cluster_id)
            self._drop_kafka_clean_shutdown_marker()
            self.read_checkpoints()
        except BaseException:
            self.close()
            raise
        self.online = True

    def _lock(self) -> None:
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(
                f"log dir {self.path} is locked ({self.path / LOCK_FILE}): another moverd or a Kafka broker "
                "is using it") from None
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _drop_kafka_clean_shutdown_marker(self) -> None:
        try:
            os.unlink(self.path / KAFKA_CLEAN_SHUTDOWN_FILE)
        except FileNotFoundError:
            return
        # Gone for good before moverd writes a byte here: after a power cut the marker must not come back beside
        # logs it no longer describes.
        fsync_dir(self.path)
        log.info("%s: removed Kafka's clean-shutdown marker (moverd now writes these logs)", self.path)

    def _check_meta(self, broker_id: int, cluster_id: str | None) -> None:
        path = self.path / META_PROPERTIES
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            # First start on this dir: claim it for this broker, atomically (never half a file after a crash).
            atomic_write(path, format_meta_properties(broker_id, cluster_id).encode("utf-8"))
            self.broker_id, self.cluster_id = broker_id, cluster_id
            return
        props = parse_properties(text)
        raw_id = props.get("broker.id", props.get("node.id"))
        try:
            found = int(raw_id) if raw_id is not None else None
        except ValueError:
            found = None
        if found is None:
            raise CorruptMetaPropertiesError(f"{path} has no valid broker.id or node.id")
        if found != broker_id:
            raise BrokerIdMismatchError(
                f"{path} belongs to broker {found}, but this is broker {broker_id}: "
                "wrong log dir or broker.id?")
        found_cluster = props.get("cluster.id") or None
        if cluster_id and found_cluster and found_cluster != cluster_id:
            raise ClusterIdMismatchError(
                f"{path} belongs to cluster {found_cluster}, but this broker is in cluster {cluster_id}")
        self.broker_id, self.cluster_id = found, found_cluster or cluster_id

    def close(self) -> None:
        self.online = False
        if self._lock_fd is not None:
            # Closing the fd releases the flock.
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ checkpoints

    @property
    def checkpoints(self) -> Checkpoints:
        """The checkpoints as last read or written."""
        return self._checkpoints

    def read_checkpoints(self) -> Checkpoints:
        """The four checkpoint files, by file name; an unreadable one reads as {} (with a warning)."""
        out: Checkpoints = {}
        with self._checkpoint_lock:
            for name in CHECKPOINT_FILES:
                try:
                    out[name] = read_checkpoint(self.path / name)
                except CorruptCheckpointError as e:
                    log.warning("ignoring corrupt checkpoint: %s", e)
                    out[name] = {}
            self._checkpoints = out
        return out

    def write_checkpoints(self, recovery_points: Mapping[TopicPartition, int],
                          log_start_offsets: Mapping[TopicPartition, int],
                          high_watermarks: Mapping[TopicPartition, int] | None = None,
                          files: Collection[str] = CHECKPOINT_FILES) -> None:
        """Rewrite the checkpoints named in `files` (default: all four) for the partitions listed in
        `recovery_points`. The replication offset is the high watermark (defaults to the recovery point); cleaner
        offsets are kept as read. The files not named keep their entries until their own timer rewrites them."""
        with self._checkpoint_lock:
            self._write_checkpoints(recovery_points, log_start_offsets, high_watermarks, files)

    def _write_checkpoints(self, recovery_points: Mapping[TopicPartition, int],
                           log_start_offsets: Mapping[TopicPartition, int],
                           high_watermarks: Mapping[TopicPartition, int] | None,
                           files: Collection[str]) -> None:
        hw = high_watermarks if high_watermarks is not None else recovery_points
        cleaner_read = self._checkpoints.get(CLEANER_OFFSET_CHECKPOINT, {})
        new: Checkpoints = {
            RECOVERY_POINT_CHECKPOINT: dict(recovery_points),
            REPLICATION_OFFSET_CHECKPOINT: {tp: hw.get(tp, off) for tp, off in recovery_points.items()},
            LOG_START_OFFSET_CHECKPOINT: {tp: log_start_offsets.get(tp, 0) for tp in recovery_points},
            CLEANER_OFFSET_CHECKPOINT: {tp: off for tp, off in cleaner_read.items() if tp in recovery_points},
        }
        written = dict(self._checkpoints)
        for name in CHECKPOINT_FILES:
            if name not in files:
                continue
            written[name] = new[name]
            unchanged = new[name] == cleaner_read and (self.path / name).exists()
            if name == CLEANER_OFFSET_CHECKPOINT and unchanged:
                continue  # nothing of ours in it changed: leave Kafka's file alone
            write_checkpoint(self.path / name, new[name])
        self._checkpoints = written

    # ------------------------------------------------------------------ space

    def usage(self) -> tuple[int, int]:
        """(total bytes, usable bytes) of the file system holding the dir (usable = free to non-root)."""
        return disk_usage(self.path)


def disk_usage(path: Path) -> tuple[int, int]:
    """(total bytes, usable bytes) of the file system holding `path`. Usable is what a non-root writer may still
    use (statvfs f_bavail), not f_bfree: the broker should not count on the root-reserved blocks. Raises OSError."""
    du = psutil.disk_usage(str(path))
    return du.total, du.free
