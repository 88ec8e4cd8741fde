"""What the tools' admin library shares: its one error, Kafka's TopicPartitionReplica, Kafka's error and exception
names. The command lines (mover/cli, mover/audit) map an AdminError to one line on stderr and its exit code."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mover.wire.errors import ErrorCode, error_name

# The exit code an AdminError carries unless it says otherwise (docs/cli.md: 1 = the action failed).
EXIT_ERROR = 1
# How many items of a list an error names before it summarises (`some`): enough to find the problem in a file, and a
# file of 200,000 unknown partitions is still one short line.
SHOWN = 10

KAFKA_ERRORS_PACKAGE = "org.apache.kafka.common.errors."
# Kafka's exception class for the codes whose name does not follow from the enum name (Errors.java).
_EXCEPTION_NAMES = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollowerException",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    ErrorCode.LOG_DIR_NOT_FOUND: "LogDirNotFoundException",
}


class AdminError(Exception):
    """A user-facing failure: printed as one line on stderr by the command line, exit code `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class ClusterUnavailable(AdminError):
    """The cluster cannot answer now: a broker answered with a retriable error code (mover.wire.errors.RETRIABLE: its
    controller moving or restarting, say), or no broker answered at all (BrokersUnreachable). A one-shot command
    reports it like any AdminError; a watch waits for it as for a lost connection (mover/cli/progress.py
    poll_until_done)."""


class BrokersUnreachable(ClusterUnavailable):
    """No broker of the cluster answered (each one's failure is in the message): a cluster down or restarting, not a
    refused request."""


@dataclass(frozen=True, order=True)
class TopicPartitionReplica:
    """Kafka's TopicPartitionReplica; str() is Kafka's `topic-partition-broker`."""

    topic: str
    partition: int
    broker: int

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}-{self.broker}"


def exception_class_name(code: int) -> str:
    """The fully qualified class of the exception Kafka's admin client raises for `code`; kafka-log-dirs.sh
    prints `getClass().getName()`, so the package is part of the output."""
    simple = _EXCEPTION_NAMES.get(code)  # type: ignore[call-overload]
    if simple is None:
        words = error_name(code).split("_")
        simple = "".join(w.capitalize() for w in words)
        simple = re.sub(r"Exception$", "", simple) + "Exception"
    return KAFKA_ERRORS_PACKAGE + simple


def format_bytes(n: float | None) -> str:
    """A byte count for people: `512 B`, `1.5 GiB`; "unknown" for None, NaN or a negative count (Kafka's -1 for a
    size a broker does not know). The one byte-size formatter of the tools."""
    if n is None or n != n or n < 0:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} PiB"


def some(items: Iterable[object], sep: str = ", ", shown: int = SHOWN) -> str:
    """A list for an error line: all of it up to `shown` items, else the first ones and a count (`a, b, ... j and
    199,990 more (200,000 in all)`). The one way the tools name many partitions, replicas, brokers or dirs."""
    texts = [str(x) for x in items]
    if len(texts) <= shown:
        return sep.join(texts)
    return f"{sep.join(texts[:shown])} and {len(texts) - shown:,} more ({len(texts):,} in all)"
