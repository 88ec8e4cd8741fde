"""File and directory name rules of Kafka's on-disk format, in one place (Kafka: LogFileUtils, UnifiedLog).

A log dir holds one directory per partition copy. Its name says what the copy is:

    topic-3                          the current (live) copy
    topic-3.move                     a copy being built by a running move of ours (KIP-113's name)
    topic-3.<32 hex>-future          a copy being built: the real Kafka broker's, or ours parked at a clean stop
    topic-3.<32 hex>-delete          a retired copy awaiting asynchronous deletion (Kafka's and, now, ours)
    topic-3.<32 hex>.delete          a retired copy written by moverd before it took Kafka's name (recognised only)
    topic-3.<32 hex>-stray           a copy the real Kafka broker found it should not have

Every name moverd leaves behind when it is not running is one the real broker (2.x to 4.x) accepts: at start-up
Kafka refuses any directory that is neither `topic-partition` nor one of its own `.<32 hex>-future|-delete|-stray`
forms ("is not in the form of topic-partition or topic-partition.uniqueId-delete"). So retired copies take Kafka's
`-delete` name, and a `.move` still in flight at a clean stop is renamed to a `-future` name, which Kafka resumes
(docs/operations.md, "Handing log dirs back to Kafka"). The `.move` name is kept while moverd runs (what KIP-113
and its users know); after a kill -9 mid-move it stays, and Kafka refuses it until moverd runs once more or the
operator renames it (the same document).

Topic names may contain '.', '-' and '_', so a name is parsed from its end.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import Enum

SEGMENT_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".snapshot"
MOVE_SUFFIX = ".move"
LEGACY_DELETE_SUFFIX = ".delete"
KAFKA_DELETE_SUFFIX = "-delete"
KAFKA_FUTURE_SUFFIX = "-future"
TMP_SUFFIX = ".tmp"

# KRaft's metadata log, `__cluster_metadata-0`, lives in `metadata.log.dir`, by default the first log dir. Kafka's
# LogManager never loads it as a partition (it belongs to the Raft layer), nor may a topic take the name: so it is
# not a partition here either, and moverd neither serves nor moves it when it opens a KRaft broker's dirs.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"

# Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH) and the file-system limit on one path component.
MAX_TOPIC_NAME_LENGTH = 249
MAX_FILE_NAME_LENGTH = 255

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
# Per-partition files of Kafka's: the topic id (a KRaft broker refuses to start with a partition dir, even a
# `-future` one, that lacks it) and the leader epochs.
PARTITION_METADATA_FILE = "partition.metadata"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
# Kafka writes this at a clean shutdown and, when it finds it at start-up, skips recovering its logs.
KAFKA_CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CHECKPOINT_FILES = (
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
_CURRENT_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_MOVE_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.move$")
_LEGACY_DELETE_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})\.delete$")
_KAFKA_RE = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})-(?P<kind>future|delete|stray)$"
)


class DirKind(Enum):
    CURRENT = "current"
    MOVE = "move"  # our `.move`
    KAFKA_FUTURE = "kafka-future"  # `.<32 hex>-future`: Kafka's copy being built, or our `.move` parked at a stop
    DELETE = "delete"  # `.<32 hex>-delete`: a retired copy, ours or Kafka's (the names are the same)
    LEGACY_DELETE = "legacy-delete"  # `.<32 hex>.delete`: a retired copy of an older moverd
    KAFKA_STRAY = "kafka-stray"


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class PartitionDirName:
    tp: TopicPartition
    kind: DirKind


def is_valid_topic_name(topic: str) -> bool:
    return (
        0 < len(topic) <= MAX_TOPIC_NAME_LENGTH
        and topic not in (".", "..", CLUSTER_METADATA_TOPIC)
        and _TOPIC_RE.match(topic) is not None
    )


def parse_partition_dir(name: str) -> PartitionDirName | None:
    """Classify a directory entry of a log dir; None when it is not a partition directory."""
    for regex, kind in ((_MOVE_RE, DirKind.MOVE), (_LEGACY_DELETE_RE, DirKind.LEGACY_DELETE)):
        m = regex.match(name)
        if m:
            return _named(m, kind)
    m = _KAFKA_RE.match(name)
    if m:
        kind = {
            "future": DirKind.KAFKA_FUTURE,
            "delete": DirKind.DELETE,
            "stray": DirKind.KAFKA_STRAY,
        }[m.group("kind")]
        return _named(m, kind)
    m = _CURRENT_RE.match(name)
    if m:
        return _named(m, DirKind.CURRENT)
    return None


def _named(m: re.Match[str], kind: DirKind) -> PartitionDirName | None:
    topic = m.group("topic")
    if not is_valid_topic_name(topic):
        return None
    return PartitionDirName(TopicPartition(topic, int(m.group("partition"))), kind)


def current_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def move_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}{MOVE_SUFFIX}"


def delete_dir_name(tp: TopicPartition, token: str | None = None) -> str:
    """A fresh retired-copy name in Kafka's form (`topic-p.<32 hex>-delete`, Kafka's UnifiedLog.logDeleteDirName):
    a Kafka broker started on the dir deletes it instead of refusing to start; unique, so that moving a partition
    away twice never collides. `token` (a `uuid.uuid4().hex`): one for all the partitions of a topic delete, whose
    names stay unique by their partitions; a uuid each was 5-8% of a 10,000-partition delete (py-spy)."""
    return f"{tp.topic}-{tp.partition}.{token or uuid.uuid4().hex}{KAFKA_DELETE_SUFFIX}"


def future_dir_name(tp: TopicPartition) -> str:
    """A fresh name in Kafka's form for a copy being built (`topic-p.<32 hex>-future`, UnifiedLog.logFutureDirName):
    what an unfinished `.move` becomes at a clean stop, so that a Kafka broker resumes the move."""
    return f"{tp.topic}-{tp.partition}.{uuid.uuid4().hex}{KAFKA_FUTURE_SUFFIX}"


def fits_file_name_limit(tp: TopicPartition) -> bool:
    """Whether every name this partition can take (the longest are the `.<32 hex>-delete` / `-future` ones) fits
    one path component."""
    return len(f"{tp.topic}-{tp.partition}.{'0' * 32}{KAFKA_DELETE_SUFFIX}") <= MAX_FILE_NAME_LENGTH


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:0{SEGMENT_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment file such as 00000000000000000042.log; None otherwise."""
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != SEGMENT_DIGITS or not stem.isdigit():
        return None
    return int(stem), "." + suffix
