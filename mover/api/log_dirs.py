"""KIP-113's log-dir APIs: DescribeLogDirs (key 35, v0-5) and AlterReplicaLogDirs (key 34, v0-2).

Both are thin: they call the LogManager, whose parts own the rules (mover/log/alter_replica_log_dirs.py: checks in
Kafka's order, last-wins duplicates, remembered destinations, KIP-179 request ids; mover/log/describe_log_dirs.py).
Handlers are plain functions, so the server runs them in its thread pool: describing stats every log dir and
altering may delete a cancelled copy, neither of which may stall the event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mover.log.describe_log_dirs import LogDirInfo
from mover.server import Handler, Route
from mover.storage.names import TopicPartition, is_valid_topic_name
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS
from mover.wire.messages.log_dirs import NO_REQUEST_ID

if TYPE_CHECKING:
    from mover.api.broker import Broker

Body = dict[str, Any]


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def describe_log_dirs(header: RequestHeader, request: Body) -> Body:
        return describe(broker, request)

    def alter_replica_log_dirs(header: RequestHeader, request: Body) -> Body:
        return alter(broker, request)

    return {
        # Read-only: may overlap other requests on the connection (mover.server.Route).
        DESCRIBE_LOG_DIRS.key: Route(describe_log_dirs, concurrent=True),
        ALTER_REPLICA_LOG_DIRS.key: alter_replica_log_dirs,
    }


# ---------------------------------------------------------------------------------------------- DescribeLogDirs


def describe(broker: Broker, request: Body) -> Body:
    wanted: dict[str, list[int] | None] | None = None
    if request["topics"] is not None:
        sets: dict[str, set[int]] = {}
        for t in request["topics"]:
            sets.setdefault(t["topic"], set()).update(t["partitions"])
        # LogManager tests membership with `in`; sets keep that O(1) for a request naming thousands of partitions.
        wanted = sets  # type: ignore[assignment]
    infos = broker.manager.describe_log_dirs(wanted)
    return {"throttle_time_ms": 0, "error_code": 0, "results": [_result(info) for info in infos]}


def _result(info: LogDirInfo) -> Body:
    return {
        "error_code": info.error_code,
        "log_dir": str(info.path),
        # Partitions are (partition_index, partition_size, offset_lag, is_future_key) tuples in the schema's field
        # order: the codec packs such rows of fixed-width fields in one call each (mover/wire/plans.py).
        "topics": [{"name": name, "partitions": rows} for name, rows in info.topics.items()],
        "total_bytes": info.total_bytes,
        "usable_bytes": info.usable_bytes,
        "is_cordoned": info.is_cordoned,
    }


# ------------------------------------------------------------------------------------------ AlterReplicaLogDirs


def alter(broker: Broker, request: Body) -> Body:
    # Duplicates: the last entry for a partition wins (Kafka builds a map from the request the same way).
    wanted: dict[TopicPartition, str] = {}
    for d in request["dirs"]:
        for t in d["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p)
                wanted.pop(tp, None)
                wanted[tp] = d["path"]
    codes: dict[TopicPartition, int] = {}
    valid: list[tuple[TopicPartition, str]] = []
    for tp, path in wanted.items():
        # A name no partition dir can carry, or a negative partition, can never name a replica here; answering it
        # without the manager also keeps such names out of the remembered destinations.
        if not is_valid_topic_name(tp.topic):
            codes[tp] = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif tp.partition < 0:
            codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            valid.append((tp, path))
    request_id: int | None = None
    if valid:
        managed, request_id = broker.manager.alter_replica_log_dirs(valid)
        codes.update(managed)
    results: dict[str, list[Body]] = {}
    for tp in wanted:
        results.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": int(codes[tp])})
    return {
        "throttle_time_ms": 0,
        "results": [{"topic_name": name, "partitions": parts} for name, parts in results.items()],
        "request_id": request_id if request_id is not None else NO_REQUEST_ID,
    }
