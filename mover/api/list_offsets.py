"""ListOffsets (key 2, v1-7): offsets by timestamp, and the log's start / end.

Timestamps, as in Kafka: -2 earliest (log start offset), -1 latest (log end offset = high watermark = last stable
offset: one replica, no transactions, so read_committed answers the same), -3 (v7, KIP-734) the record with the
largest timestamp, any other value the first record whose timestamp is >= it (time index, then the batches). No
such record: offset -1 and timestamp -1. Leader epochs are not tracked: leader_epoch is -1 and the request's
current_leader_epoch is not checked (Metadata hands out -1, so clients send -1).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mover.errors import ApiError
from mover.server import Handler, Route
from mover.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from mover.storage.names import TopicPartition
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import LIST_OFFSETS

if TYPE_CHECKING:
    from mover.api.broker import Broker
    from mover.log.log_manager import LogManager

log = logging.getLogger(__name__)

Body = dict[str, Any]

MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def list_offsets(header: RequestHeader, request: Body) -> Body:
        return handle_list_offsets(broker.manager, header.api_version, request)

    return {LIST_OFFSETS.key: Route(list_offsets, concurrent=True)}


def handle_list_offsets(manager: LogManager, version: int, request: Body) -> Body:
    topics = []
    seen: dict[TopicPartition, int] = {}
    for t in request["topics"]:
        for p in t["partitions"]:
            tp = TopicPartition(t["name"], p["partition_index"])
            seen[tp] = seen.get(tp, 0) + 1
    for t in request["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = TopicPartition(t["name"], p["partition_index"])
            if seen[tp] > 1:
                # Kafka answers a partition listed twice with INVALID_REQUEST (v1+), rather than guess which one.
                parts.append(_answer(tp, int(ErrorCode.INVALID_REQUEST)))
                continue
            parts.append(_list_partition(manager, tp, p["timestamp"]))
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _answer(tp: TopicPartition, code: int, offset: int = -1, timestamp: int = -1) -> Body:
    return {"partition_index": tp.partition, "error_code": code, "timestamp": timestamp, "offset": offset,
            "leader_epoch": -1}


def _list_partition(manager: LogManager, tp: TopicPartition, timestamp: int) -> Body:
    if tp not in manager.replicas:
        return _answer(tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    lookup = max_timestamp_offset if timestamp == MAX_TIMESTAMP else (lambda lg: lg.offset_for_timestamp(timestamp))
    try:
        found = manager.offset_for_timestamp(tp, lookup)
    except ApiError as e:
        return _answer(tp, e.code)
    if found is None:
        return _answer(tp, 0)
    offset, ts = found
    if timestamp in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
        ts = -1
    return _answer(tp, 0, offset, ts)


def max_timestamp_offset(current: Log) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with the largest timestamp; None for an empty log.

    Each segment knows its largest timestamp (kept by appends, or the time index's last entry, which a roll
    writes): only the batches of the winning segment are read."""
    best = -1
    for seg in current.segments():
        if seg.size == 0:
            continue
        ts = seg.max_timestamp
        if ts < 0:
            ts = seg.time_index.largest_timestamp() or -1
        best = max(best, ts)
    if best < 0:
        return None
    return current.offset_for_timestamp(best)
