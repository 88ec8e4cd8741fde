"""Metadata (key 3, v0-12): this broker as the whole cluster, its topics, and auto-creation of unknown topics.

A moverd is one broker's daemon, so the cluster it describes has one node, itself: it is the controller, and the
leader, only replica and only in-sync replica of every partition. Clients bootstrap with this answer and then
connect to the advertised listener (mover.api.broker.Broker.advertised), so that must be an address they
can reach.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from mover.errors import ApiError
from mover.server import Handler, Route
from mover.storage.names import TopicPartition, is_valid_topic_name
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import METADATA

if TYPE_CHECKING:
    from mover.api.broker import Broker

log = logging.getLogger(__name__)

Body = dict[str, Any]

# The manager keeps no topic ids (ZooKeeper-era brokers had none either and sent the zero uuid, which every client
# reads as "no id"); a made-up id would invite clients to use it in id-based requests we cannot resolve.
NO_TOPIC_ID = uuid.UUID(int=0)

# Leader epochs are not tracked: -1 ("unknown", the schema default) makes clients skip epoch fencing and the
# OffsetForLeaderEpoch validation (KIP-320) that a known epoch would trigger, an API this broker does not serve.
UNKNOWN_LEADER_EPOCH = -1

# Kafka's "no leader" node id in Metadata partitions.
NO_LEADER = -1


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def metadata(header: RequestHeader, request: Body) -> Body:
        return describe_cluster(broker, header.api_version, request)

    return {METADATA.key: metadata}


def describe_cluster(broker: Broker, version: int, request: Body) -> Body:
    manager = broker.manager
    me = broker.advertised
    wanted = request["topics"]
    # v0 has no null array: an empty list meant "all topics" until v1 introduced null for that (Kafka's schema).
    if wanted is None or (version == 0 and not wanted):
        topics = [_topic(broker, name) for name in sorted(dict(manager.topics))]
    else:
        # v0-3 always auto-create; v4 made it the client's choice (AllowAutoTopicCreation, default true).
        allow_create = request["allow_auto_topic_creation"] or version < 4
        topics = []
        seen: set[str] = set()
        for t in wanted:
            name = t["name"]
            if name is None:
                if version < 12:
                    # Kafka refuses ids before v12 (INVALID_REQUEST); the answer's name cannot be null there.
                    topics.append(_error_topic("", ErrorCode.INVALID_REQUEST, t["topic_id"]))
                else:
                    # Lookup by id: we hand out no ids, so none can match.
                    topics.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, t["topic_id"]))
                continue
            if name in seen:
                continue
            seen.add(name)
            topics.append(_requested_topic(broker, name, allow_create))
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": broker.node_id, "host": me.host, "port": me.port, "rack": None}],
        "cluster_id": manager.cluster_id or None,
        "controller_id": broker.node_id,
        "topics": topics,
    }


def _requested_topic(broker: Broker, name: str, allow_create: bool) -> Body:
    manager = broker.manager
    if name in manager.topics:
        return _topic(broker, name)
    if not is_valid_topic_name(name):
        return _error_topic(name, ErrorCode.INVALID_TOPIC_EXCEPTION)
    if not (allow_create and broker.config.auto_create_topics_enable):
        return _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        manager.create_topic(name, broker.config.num_partitions)
    except ApiError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # another request created it meanwhile: that is fine
            log.info("auto-creating topic %r: %s", name, e)
            return _error_topic(name, e.code)
    else:
        log.info("auto-created topic %r with %d partitions", name, broker.config.num_partitions)
    # A ZooKeeper-mode Kafka answers the request that triggered creation with LEADER_NOT_AVAILABLE and no
    # partitions; clients retry and find the leader on the next refresh.
    return _error_topic(name, ErrorCode.LEADER_NOT_AVAILABLE)


def _error_topic(name: str | None, code: int, topic_id: uuid.UUID = NO_TOPIC_ID) -> Body:
    return {"error_code": int(code), "name": name, "topic_id": topic_id, "is_internal": False, "partitions": []}


def _topic(broker: Broker, name: str) -> Body:
    manager = broker.manager
    me = broker.node_id
    partitions = []
    for p in range(manager.topics.get(name, 0)):
        replica = manager.replicas.get(TopicPartition(name, p))
        if replica is not None and not replica.offline:
            partitions.append({"error_code": 0, "partition_index": p, "leader_id": me,
                               "leader_epoch": UNKNOWN_LEADER_EPOCH, "replica_nodes": [me], "isr_nodes": [me],
                               "offline_replicas": []})
        else:
            # The only replica sits in a failed log dir: no node can lead it (Kafka's offline partition). Kafka's
            # metadata cache answers a partition without a live leader with LEADER_NOT_AVAILABLE and lists the
            # replica as offline; the storage error itself reaches clients through Produce and Fetch.
            partitions.append({"error_code": int(ErrorCode.LEADER_NOT_AVAILABLE), "partition_index": p,
                               "leader_id": NO_LEADER, "leader_epoch": UNKNOWN_LEADER_EPOCH, "replica_nodes": [me],
                               "isr_nodes": [], "offline_replicas": [me]})
    return {"error_code": 0, "name": name, "topic_id": NO_TOPIC_ID, "is_internal": False, "partitions": partitions}
