"""CreateTopics (key 19, v0-7), CreatePartitions (key 37, v0-3) and DeleteTopics (key 20, v0-6): admin clients
create topics, add partitions to them and delete them here.

This broker is the whole cluster, so a topic has replication factor 1 (or -1, "the default", which is 1) and every
replica lives here. LogManager validates and places partitions (the live log dir with the most usable bytes, a
remembered AlterReplicaLogDirs destination first); this module shapes requests and answers like Kafka's.
Creation is synchronous, so `timeout_ms` never runs out and the answer means "created", not "being created".
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

from mover.errors import ApiError
from mover.server import Handler, Route
from mover.storage.names import is_valid_topic_name
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS

if TYPE_CHECKING:
    from mover.api.broker import Broker

log = logging.getLogger(__name__)

Body = dict[str, Any]

# Topic ids are not kept (see mover.api.metadata.NO_TOPIC_ID): the zero uuid means "none" to clients.
NO_TOPIC_ID = uuid.UUID(int=0)

# CreateTopics' "use the broker default" for num_partitions and replication_factor (KIP-464, v4+).
USE_DEFAULT = -1


def routes(broker: Broker) -> dict[int, Handler | Route]:
    # On the broker's admin threads, not the request pool (mover.api.broker.Broker.admin_executor).
    async def create_topics(header: RequestHeader, request: Body) -> Body:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(broker.admin_executor, create, broker, header.api_version, request)

    async def delete_topics(header: RequestHeader, request: Body) -> Body:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(broker.admin_executor, delete, broker, header.api_version, request)

    async def create_partitions(header: RequestHeader, request: Body) -> Body:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(broker.admin_executor, grow, broker, request)

    return {CREATE_TOPICS.key: create_topics, DELETE_TOPICS.key: delete_topics,
            CREATE_PARTITIONS.key: create_partitions}


# -------------------------------------------------------------------------------------------------- CreateTopics


def create(broker: Broker, version: int, request: Body) -> Body:
    total = sum(len(t["assignments"]) if t["assignments"] else
                broker.config.num_partitions if t["num_partitions"] == USE_DEFAULT else max(t["num_partitions"], 0)
                for t in request["topics"])
    # `create.topics.max.partitions.per.request` (default 10,000, Kafka's ReplicationControlManager.
    # MAX_PARTITIONS_PER_BATCH): POLICY_VIOLATION past it, for the whole request, so a single request (or a
    # corrupted count) cannot tie the broker up. Not INVALID_PARTITIONS: each count may be valid on its own.
    limit = broker.config.create_topics_max_partitions_per_request
    if total > limit:
        message = (f"{total} partitions in one request; create.topics.max.partitions.per.request allows {limit} "
                   "at once")
        names = dict.fromkeys(t["name"] for t in request["topics"])
        return {"throttle_time_ms": 0,
                "topics": [_created(name, ErrorCode.POLICY_VIOLATION, message) for name in names]}
    counts = Counter(t["name"] for t in request["topics"])
    results = []
    answered: set[str] = set()
    for topic in request["topics"]:
        name = topic["name"]
        if name in answered:
            continue  # one answer per name, as Kafka's response is keyed by name
        answered.add(name)
        if counts[name] > 1:
            # Kafka refuses every entry of a name listed twice rather than guess which one was meant.
            results.append(_created(name, ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed more than once"))
            continue
        results.append(_create_one(broker, version, topic, request["validate_only"]))
    return {"throttle_time_ms": 0, "topics": results}


def _create_one(broker: Broker, version: int, topic: Body, validate_only: bool) -> Body:
    name = topic["name"]
    if not is_valid_topic_name(name):
        return _created(name, ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"{name!r} is not a valid topic name: up to 249 of [a-zA-Z0-9._-], not '.' or '..'")
    num_partitions = topic["num_partitions"]
    replication_factor = topic["replication_factor"]
    assignments = topic["assignments"]
    if assignments:
        if num_partitions != USE_DEFAULT or replication_factor != USE_DEFAULT:
            return _created(name, ErrorCode.INVALID_REQUEST,
                            "num_partitions and replication_factor must be -1 when assignments are given")
        indexes = sorted(a["partition_index"] for a in assignments)
        if indexes != list(range(len(indexes))):
            return _created(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "assigned partitions must be numbered 0 to n-1, each once")
        for a in assignments:
            if a["broker_ids"] != [broker.node_id]:
                return _created(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"partition {a['partition_index']} must be assigned to broker {broker.node_id} "
                                "alone, the only broker")
        num_partitions, replication_factor = len(assignments), 1
    if topic["configs"]:
        keys = ", ".join(sorted(c["name"] for c in topic["configs"]))
        return _created(name, ErrorCode.INVALID_CONFIG,
                        f"per-topic configs are not supported (got {keys}): topics use the broker's settings")
    if num_partitions == USE_DEFAULT:
        num_partitions = broker.config.num_partitions
    try:
        broker.manager.create_topic(name, num_partitions, replication_factor, validate_only=validate_only)
    except ApiError as e:
        return _created(name, e.code, str(e))
    if not validate_only:
        log.info("created topic %r with %d partitions", name, num_partitions)
    return {
        "name": name,
        "topic_id": NO_TOPIC_ID,
        "error_code": 0,
        "error_message": None,
        "num_partitions": num_partitions,
        "replication_factor": 1,
        "configs": [],
    }


def _created(name: str, code: int, message: str) -> Body:
    return {"name": name, "topic_id": NO_TOPIC_ID, "error_code": int(code), "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": None}


# ---------------------------------------------------------------------------------------------- CreatePartitions


def grow(broker: Broker, request: Body) -> Body:
    """Each topic grown to its `count` as Kafka's controller does it (ReplicationControlManager.createPartitions):
    a name listed twice is refused in every entry; assignments, when given, name one list of brokers per new
    partition, and here each must be this broker alone (the whole cluster, replication factor 1)."""
    counts = Counter(t["name"] for t in request["topics"])
    added = sum(max(t["count"], 0) for t in request["topics"])
    limit = broker.config.create_topics_max_partitions_per_request
    results = []
    for topic in request["topics"]:
        name = topic["name"]
        if counts[name] > 1:
            results.append(_grown(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        if added > limit:
            # The same bound as CreateTopics': the counts asked for in one request (a corrupted count cannot tie
            # the broker up making partitions).
            results.append(_grown(name, ErrorCode.POLICY_VIOLATION,
                                  f"{added} partitions in one request; create.topics.max.partitions.per.request "
                                  f"allows {limit} at once"))
            continue
        results.append(_grow_one(broker, topic, request["validate_only"]))
    return {"throttle_time_ms": 0, "results": results}


def _grow_one(broker: Broker, topic: Body, validate_only: bool) -> Body:
    name, count, assignments = topic["name"], topic["count"], topic["assignments"]
    try:
        broker.manager.create_partitions(
            name, count, assignments=None if assignments is None else [a["broker_ids"] for a in assignments],
            validate_only=validate_only)
    except ApiError as e:
        return _grown(name, e.code, str(e))
    return _grown(name, ErrorCode.NONE, None)


def _grown(name: str, code: int, message: str | None) -> Body:
    return {"name": name, "error_code": int(code), "error_message": message}


# -------------------------------------------------------------------------------------------------- DeleteTopics


def delete(broker: Broker, version: int, request: Body) -> Body:
    if version >= 6:
        wanted = [(t["name"], t["topic_id"]) for t in request["topics"]]
    else:
        wanted = [(name, NO_TOPIC_ID) for name in request["topic_names"]]
    results = []
    seen: set[tuple[str | None, uuid.UUID]] = set()
    for name, topic_id in wanted:
        if (name, topic_id) in seen:
            continue  # Kafka deletes a set of topics: a repeated name is one deletion, one answer
        seen.add((name, topic_id))
        results.append(_delete_one(broker, name, topic_id))
    return {"throttle_time_ms": 0, "responses": results}


def _delete_one(broker: Broker, name: str | None, topic_id: uuid.UUID) -> Body:
    if name is None:
        # v6 deletion by id: no topic here has an id, so none can match.
        return _deleted(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
    try:
        broker.manager.delete_topic(name)
    except ApiError as e:
        return _deleted(name, topic_id, e.code, str(e))
    return _deleted(name, topic_id, ErrorCode.NONE, None)


def _deleted(name: str | None, topic_id: uuid.UUID, code: int, message: str | None) -> Body:
    return {"name": name, "topic_id": topic_id, "error_code": int(code), "error_message": message}
