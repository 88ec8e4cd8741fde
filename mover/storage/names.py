"""File and directory name rules of Kafka's on-disk format, in one place (Kafka: LogFileUtils, UnifiedLog).

A log dir holds one directory per partition copy. Its name says what the copy is:

    topic-3                          the current (live) copy
    topic-3.move                     a copy being built by a move of ours (KIP-113)
    topic-3.<32 hex>.delete          a retired copy of ours, awaiting asynchronous deletion
    topic-3.<32 hex>-future          the real Kafka broker's copy being built
    topic-3.<32 hex>-delete          the real Kafka broker's retired copy
    topic-3.<32 hex>-stray           a copy the real Kafka broker found it should not have

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
DELETE_SUFFIX = ".delete"
TMP_SUFFIX = ".tmp"

# Kafka's limit on a topic name (Topic.MAX_NAME_LENGTH) and the file-system limit on one path component.
MAX_TOPIC_NAME_LENGTH = 249
MAX_FILE_NAME_LENGTH = 255

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
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
_DELETE_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})\.delete$")
_KAFKA_RE = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})-(?P<kind>future|delete|stray)$"
)


class DirKind(Enum):
    CURRENT = "current"
    MOVE = "move"
    DELETE = "delete"
    KAFKA_FUTURE = "kafka-future"
    KAFKA_DELETE = "kafka-delete"
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
        and topic not in (".", "..")
        and _TOPIC_RE.match(topic) is not None
    )


def parse_partition_dir(name: str) -> PartitionDirName | None:
    """Classify a directory entry of a log dir; None when it is not a partition directory."""
    for regex, kind in ((_MOVE_RE, DirKind.MOVE), (_DELETE_RE, DirKind.DELETE)):
        m = regex.match(name)
        if m:
            return _named(m, kind)
    m = _KAFKA_RE.match(name)
    if m:
        kind = {
            "future": DirKind.KAFKA_FUTURE,
            "delete": DirKind.KAFKA_DELETE,
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


def delete_dir_name(tp: TopicPartition) -> str:
    """A fresh retired-copy name: unique, so that moving a partition away twice never collides."""
    return f"{tp.topic}-{tp.partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}"


def fits_file_name_limit(tp: TopicPartition) -> bool:
    """Whether every name this partition can take (the longest is the .delete one) fits one path component."""
    return len(f"{tp.topic}-{tp.partition}.{'0' * 32}{DELETE_SUFFIX}") <= MAX_FILE_NAME_LENGTH


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:0{SEGMENT_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment file such as 00000000000000000042.log; None otherwise."""
    stem, dot, suffix = name.partition(".")
    if not dot or len(stem) != SEGMENT_DIGITS or not stem.isdigit():
        return None
    return int(stem), "." + suffix
