"""Where each replica a reassignment file names stands (KIP-179's per-replica status, its `--progress` table): In
sync, Behind by some messages, Unknown topic, Unknown partition, Unknown broker, or Broker does not host this
partition.

The lag is in messages: the replica's log end offset behind its leader's. Each is asked of the broker that holds it,
with ListOffsets as a debugging replica (replica_id -2): Kafka then answers from its local copy, a follower's own log
end offset included, where a consumer's ListOffsets goes to the leader only (docs/kafka-compat.md). moverd is one
node: its replicas are their own leaders, always in sync.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, error_name
from mover.admin.reassign.kip455 import partition_states
from mover.wire.errors import ErrorCode
from mover.wire.messages import LIST_OFFSETS

# ListOffsets' replica_id for a debugging client: answered from any replica's local log, not only the leader's.
DEBUGGING_REPLICA_ID = -2
LATEST_TIMESTAMP = -1

IN_SYNC = "In sync"
UNKNOWN_TOPIC = "Unknown topic"
UNKNOWN_PARTITION = "Unknown partition"
UNKNOWN_BROKER = "Unknown broker"
NOT_HOSTED = "Broker does not host this partition"


@dataclass(frozen=True)
class ReplicaStatus:
    topic: str
    partition: int
    broker: int
    status: str  # one of the constants above, or "Behind: N messages behind", or "Unknown: <why>"
    lag: int | None = None  # messages behind the leader, where known


def replica_statuses(client: Client, replicas: list[tuple[str, int, int]]) -> list[ReplicaStatus]:
    """The status of each (topic, partition, broker), in the order given. Raises AdminError when the cluster's
    metadata cannot be read; a broker that does not answer makes its replicas `Unknown: ...`, not an error."""
    states, unknown_topics = partition_states(client, {t for t, _, _ in replicas})
    brokers = set(client.brokers)
    # Every replica whose log end offset is wanted, its leader's included, grouped by the broker asked.
    asked: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for topic, partition, broker in replicas:
        state = states.get((topic, partition))
        if state is not None and broker in state.replicas and broker in brokers:
            asked[broker].add((topic, partition))
            if state.leader >= 0:
                asked[state.leader].add((topic, partition))
    ends: dict[tuple[int, str, int], int | str] = {}
    for broker, tps in asked.items():
        ends.update(_log_end_offsets(client, broker, tps))
    out = []
    for topic, partition, broker in replicas:
        state = states.get((topic, partition))
        if topic in unknown_topics:
            out.append(ReplicaStatus(topic, partition, broker, UNKNOWN_TOPIC))
        elif state is None:
            out.append(ReplicaStatus(topic, partition, broker, UNKNOWN_PARTITION))
        elif broker not in brokers:
            out.append(ReplicaStatus(topic, partition, broker, UNKNOWN_BROKER))
        elif broker not in state.replicas:
            out.append(ReplicaStatus(topic, partition, broker, NOT_HOSTED))
        else:
            mine, leaders = ends.get((broker, topic, partition)), ends.get((state.leader, topic, partition))
            if not isinstance(mine, int) or not isinstance(leaders, int):
                why = mine if isinstance(mine, str) else leaders if isinstance(leaders, str) else "no leader"
                out.append(ReplicaStatus(topic, partition, broker, f"Unknown: {why}"))
                continue
            lag = max(0, leaders - mine)
            in_sync = lag == 0 and broker in state.isr
            out.append(ReplicaStatus(topic, partition, broker,
                                     IN_SYNC if in_sync else f"Behind: {lag} messages behind", lag))
    return out


def _log_end_offsets(client: Client, broker: int, tps: set[tuple[str, int]]) -> dict[tuple[int, str, int], int | str]:
    """broker's log end offset of each partition it holds (or why it could not say)."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(tps):
        by_topic[topic].append(partition)
    body = {"replica_id": DEBUGGING_REPLICA_ID, "isolation_level": 0, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "timestamp": LATEST_TIMESTAMP, "current_leader_epoch": -1}
                                   for p in ps]} for t, ps in by_topic.items()]}
    try:
        reply = client.connection(broker).call(LIST_OFFSETS, body)
    except (ClientError, AdminError) as e:
        return {(broker, t, p): f"broker {broker} did not answer ({e})" for t, p in tps}
    out: dict[tuple[int, str, int], int | str] = {}
    for t in reply["topics"]:
        for p in t["partitions"]:
            code = p["error_code"]
            key = (broker, t["name"], p["partition_index"])
            if code == ErrorCode.NONE:
                out[key] = p["offset"]
            else:
                out[key] = f"broker {broker} answered {error_name(code)}"
    return out


def table(statuses: list[ReplicaStatus]) -> list[str]:
    """KIP-179's --progress table: Topic, Partition, Broker, Status, the columns as wide as their longest value."""
    rows = [("Topic", "Partition", "Broker", "Status")] + [
        (s.topic, str(s.partition), str(s.broker), s.status) for s in statuses]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return lines
