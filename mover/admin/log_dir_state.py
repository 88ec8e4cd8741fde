"""Where a broker's replicas are: DescribeLogDirs, decoded into per-dir and per-replica views."""

from __future__ import annotations

from dataclasses import dataclass

from mover.admin.client import Client
from mover.admin.common import AdminError, TopicPartitionReplica, error_name
from mover.wire.messages import DESCRIBE_LOG_DIRS

# The DescribeLogDirs version that reports cordoned dirs (KIP-1066, Kafka 4.3); a broker offering it knows
# cordoned.log.dirs (docs/cordons.md).
CORDON_VERSION = 5


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class DirInfo:
    path: str
    error_code: int
    total_bytes: int  # -1: unknown (DescribeLogDirs before v4, or an offline dir)
    usable_bytes: int
    partitions: tuple[PartitionInfo, ...]
    # KIP-1066 (DescribeLogDirs v5: Kafka 4.3, moverd); None when the broker does not report it (before v5).
    is_cordoned: bool | None = None


@dataclass
class ReplicaDirs:
    """A replica's current copy and, while it is being moved, its future copy."""

    current: str | None = None
    current_size: int = 0
    future: str | None = None
    future_size: int = 0
    future_lag: int = 0


def describe_broker(client: Client, broker: int, topics: dict[str, list[int]] | None = None) -> list[DirInfo]:
    """DescribeLogDirs on `broker` for `topics` (None: every topic)."""
    body = {"topics": None if topics is None else [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
    conn = client.connection(broker)
    version = conn.version_for(DESCRIBE_LOG_DIRS)
    reply = conn.call(DESCRIBE_LOG_DIRS, body, version)
    reports_cordons = version >= CORDON_VERSION
    if reply["error_code"]:
        raise AdminError(f"broker {broker} answered DescribeLogDirs with {error_name(reply['error_code'])}")
    return [
        DirInfo(
            r["log_dir"], r["error_code"], r["total_bytes"], r["usable_bytes"],
            tuple(PartitionInfo(t["name"], p["partition_index"], p["partition_size"], p["offset_lag"],
                                p["is_future_key"])
                  for t in r["topics"] for p in t["partitions"]),
            r["is_cordoned"] if reports_cordons else None,
        )
        for r in reply["results"]
    ]


def replica_dirs(broker: int, dirs: list[DirInfo]) -> dict[TopicPartitionReplica, ReplicaDirs]:
    replicas: dict[TopicPartitionReplica, ReplicaDirs] = {}
    for d in dirs:
        for p in d.partitions:
            info = replicas.setdefault(TopicPartitionReplica(p.topic, p.partition, broker), ReplicaDirs())
            if p.is_future:
                info.future, info.future_size, info.future_lag = d.path, p.size, p.offset_lag
            else:
                info.current, info.current_size = d.path, p.size
    return replicas


def online_dirs(dirs: list[DirInfo]) -> list[str]:
    return [d.path for d in dirs if d.error_code == 0]
