"""AlterReplicaLogDirs as the tools send it: per broker, re-sent while a broker does not hold a replica yet, as Kafka's
ReassignPartitionsCommand does. mover-log-dirs, mover-reassign and mover-audit execute start their log-dir moves here;
failures are AdminErrors (the command lines say them)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from mover.admin.client import Client
from mover.admin.common import AdminError, TopicPartitionReplica, error_name, some
from mover.wire.errors import ErrorCode
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS
from mover.wire.messages.log_dirs import NO_REQUEST_ID

# Kafka's ReassignPartitionsCommand re-sends AlterReplicaLogDirs this often while a replica is not there yet.
RETRY_INTERVAL_S = 0.1


def by_broker(replicas: dict[TopicPartitionReplica, str]) -> dict[int, dict[TopicPartitionReplica, str]]:
    grouped: dict[int, dict[TopicPartitionReplica, str]] = defaultdict(dict)
    for r, d in replicas.items():
        grouped[r.broker][r] = d
    return dict(sorted(grouped.items()))


def alter_log_dirs(client: Client, wanted: dict[TopicPartitionReplica, str], timeout_s: float) -> dict[int, list[int]]:
    """Send AlterReplicaLogDirs per broker, re-sending every 100 ms the replicas a broker does not hold yet
    (REPLICA_NOT_AVAILABLE) until `timeout_s`. Returns the request ids each broker gave. Any other error: AdminError."""
    pending = dict(wanted)
    request_ids: dict[int, list[int]] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        not_there: dict[TopicPartitionReplica, str] = {}
        for broker, group in by_broker(pending).items():
            request_id, codes = send(client, broker, group)
            if request_id != NO_REQUEST_ID:
                request_ids.setdefault(broker, []).append(request_id)
            for replica, code in codes.items():
                if code == ErrorCode.REPLICA_NOT_AVAILABLE:
                    not_there[replica] = group[replica]
                elif code != ErrorCode.NONE:
                    raise AdminError(f"Failed to move replica {replica} to log dir {group.get(replica)}: "
                                     f"{error_name(code)}")
        pending = not_there
        if not pending:
            return request_ids
        if time.monotonic() + RETRY_INTERVAL_S > deadline:
            raise AdminError(f"Timed out after {timeout_s:g} s waiting for replicas to appear on their brokers "
                             f"(REPLICA_NOT_AVAILABLE): {some(sorted(pending))}")
        time.sleep(RETRY_INTERVAL_S)


def send(client: Client, broker: int, group: dict[TopicPartitionReplica, str]
         ) -> tuple[int, dict[TopicPartitionReplica, int]]:
    """One AlterReplicaLogDirs to `broker` for `group` (its replicas): the request id it gave and each replica's
    error code. A replica the broker left out of its answer: AdminError."""
    reply = client.connection(broker).call(ALTER_REPLICA_LOG_DIRS, _alter_body(group))
    codes = {TopicPartitionReplica(topic["topic_name"], p["partition_index"], broker): p["error_code"]
             for topic in reply["results"] for p in topic["partitions"]}
    unanswered = sorted(set(group) - set(codes))
    if unanswered:
        raise AdminError(f"broker {broker} did not answer for replicas {some(unanswered)}")
    return reply["request_id"], codes


def _alter_body(group: dict[TopicPartitionReplica, str]) -> dict[str, Any]:
    by_dir: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r, d in group.items():
        by_dir[d][r.topic].append(r.partition)
    return {"dirs": [{"path": d, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
                     for d, topics in by_dir.items()]}
