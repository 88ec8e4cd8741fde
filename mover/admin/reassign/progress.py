"""KIP-179's Progress and the per-replica status every tool reports: one shape, one call.

`Progress` (KIP-179): a numerator, a denominator that is None when unknown (the wire's -1; never 0: an empty
partition's total is unknown, not zero), an error as a Kafka error code (mover.wire ErrorCode) with its message, and
whether it is complete. `ReplicaStatus`: where one replica stands (002's replicaStatus): topic, partition, broker,
the log dir holding it, when it was seen (ms), its lag in messages behind the leader, its bytes, and its Progress.

`replica_statuses` is the one call behind every tool's per-replica progress (mover-reassign --progress with a request
or a file, its step engine, mover-audit execute's moves between brokers): Metadata (unless the caller has the
partition states), DescribeLogDirs of each broker asked (the replica's dir and bytes, a future copy's too, the
leader's bytes as the denominator) and, with `lag=True`, ListOffsets for the lag in messages. Each log end offset is
asked of the broker that holds the replica, as a debugging replica (replica_id -2): Kafka then answers from its local
copy, a follower's own log end offset included, where a consumer's ListOffsets goes to the leader only
(docs/kafka-compat.md). moverd is one node: its replicas are their own leaders, always in sync.

The table of `--progress --reassignment-json-file` (KIP-179) prints `status`: In sync, Behind: N messages behind,
Unknown topic, Unknown partition, Unknown broker, Broker does not host this partition, or Unknown: <why>.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, error_name
from mover.admin.log_dir_state import DirInfo, describe_broker, replica_dirs
from mover.admin.reassign.kip455 import PartitionState, TopicPartition, partition_states
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
# The text of a broker that could not be asked (its replicas' Progress carries BROKER_NOT_AVAILABLE).
UNREACHABLE = "broker unreachable"
# A replica as its broker holds it (broker_replicas): in one dir, or with a copy being built in another (KIP-113).
IN_PLACE = "in place"
COPYING = "copying"
# The status of a replica whose lag was not asked (the step engine's polls): in the ISR is in sync, else this.
IN_PROGRESS = "In progress"


@dataclass(frozen=True)
class Failure:
    """An error as KIP-179 reports it: a Kafka error code and its message; str() is the message (else the code's
    name), the one line the tools print."""

    code: int
    message: str | None = None

    def __str__(self) -> str:
        return self.message or error_name(self.code)


@dataclass
class Progress:
    """KIP-179's Progress. Setting `denominator` to 0 or less stores None: a total is known or unknown, never 0."""

    numerator: int = 0
    denominator: int | None = None
    error: Failure | None = None
    complete: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "denominator" and value is not None and value <= 0:
            value = None
        object.__setattr__(self, name, value)

    @property
    def error_code(self) -> int:
        return ErrorCode.NONE if self.error is None else self.error.code

    @property
    def error_message(self) -> str | None:
        return None if self.error is None else self.error.message

    def fail(self, code: int, message: str | None = None) -> None:
        self.error = Failure(code, message)

    def amount(self, unit: str = "bytes") -> str:
        if self.denominator is None:
            return f"{self.numerator} {unit} of unknown total"
        pct = min(100.0, 100.0 * self.numerator / self.denominator)
        return f"{self.numerator} of {self.denominator} {unit} ({pct:.1f}%)"


@dataclass
class ReplicaStatus:
    """Where one replica stands, as one look at the cluster found it."""

    topic: str
    partition: int
    broker: int
    status: str  # the KIP-179 table's words (the constants above, "Behind: N messages behind", "Unknown: <why>")
    log_dir: str | None = None  # the dir holding its current copy; None: not held, or not asked
    status_ms: int = -1  # when it was seen (ms since the epoch)
    lag: int | None = None  # messages behind the leader, where known
    bytes: int | None = None  # its current copy's size, where known
    future_dir: str | None = None  # a copy being built in another dir of its broker (KIP-113)
    future_bytes: int = 0
    future_lag: int | None = None  # that copy's offset lag behind the current one, where the broker said
    # Between brokers: its bytes of the leader's; a future copy: that copy's bytes of the current copy's.
    progress: Progress = field(default_factory=Progress)

    @property
    def replica(self) -> TopicPartitionReplica:
        return TopicPartitionReplica(self.topic, self.partition, self.broker)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


def replica_statuses(client: Client, replicas: Iterable[TopicPartitionReplica | tuple[str, int, int]], *,
                     lag: bool = True, states: Mapping[TopicPartition, PartitionState] | None = None,
                     unknown_topics: Iterable[str] = ()) -> list[ReplicaStatus]:
    """The status of each (topic, partition, broker), in the order given. `states`: the partitions' states when the
    caller has just read them (else Metadata is asked, and raises AdminError when it cannot be read); `lag`: ask
    ListOffsets for each replica's lag in messages (the step engine, polling every second, asks sizes only). A broker
    that does not answer gives its replicas `Unknown: ...` and a Progress error, never an exception."""
    wanted = [TopicPartitionReplica(*r) if isinstance(r, tuple) else r for r in replicas]
    if states is None:
        states, missing = partition_states(client, {r.topic for r in wanted})
        unknown_topics = missing
    unknown = set(unknown_topics)
    brokers = set(client.brokers)
    # Every replica wanted, its leader's included (the denominator, and the lag's reference), by the broker asked.
    asked: dict[int, set[TopicPartition]] = defaultdict(set)
    for r in wanted:
        state = states.get((r.topic, r.partition))
        if state is not None and r.broker in state.replicas and r.broker in brokers:
            asked[r.broker].add((r.topic, r.partition))
            if state.leader >= 0:
                asked[state.leader].add((r.topic, r.partition))
    dirs: dict[int, dict[TopicPartitionReplica, ReplicaStatus] | str] = {}
    ends: dict[tuple[int, str, int], int | str] = {}
    for broker, tps in asked.items():
        dirs[broker] = _dirs(client, broker, tps)
        if lag:
            ends.update(_log_end_offsets(client, broker, tps))
    seen_ms = int(time.time() * 1000)
    return [_status(r, states.get((r.topic, r.partition)), r.topic in unknown, r.broker in brokers, dirs, ends,
                    lag, seen_ms) for r in wanted]


def _status(r: TopicPartitionReplica, state: PartitionState | None, unknown_topic: bool, known_broker: bool,
            dirs: Mapping[int, dict[TopicPartitionReplica, ReplicaStatus] | str],
            ends: Mapping[tuple[int, str, int], int | str], lag: bool, seen_ms: int) -> ReplicaStatus:
    s = ReplicaStatus(r.topic, r.partition, r.broker, "", status_ms=seen_ms)
    if unknown_topic:
        s.status = UNKNOWN_TOPIC
        s.progress.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, s.status)
        return s
    if state is None:
        s.status = UNKNOWN_PARTITION
        s.progress.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, s.status)
        return s
    if not known_broker:
        s.status = UNKNOWN_BROKER
        s.progress.fail(ErrorCode.BROKER_NOT_AVAILABLE, s.status)
        return s
    if r.broker not in state.replicas:
        s.status = NOT_HOSTED
        s.progress.fail(ErrorCode.REPLICA_NOT_AVAILABLE, s.status)
        return s
    mine = dirs.get(r.broker)
    if isinstance(mine, str):
        s.progress.fail(ErrorCode.BROKER_NOT_AVAILABLE, UNREACHABLE)
    elif mine is not None:
        held = mine.get(r)
        if held is not None:
            s.log_dir, s.bytes, s.future_dir, s.future_bytes = held.log_dir, held.bytes, held.future_dir, \
                held.future_bytes
        leaders = dirs.get(state.leader)
        leader = leaders.get(TopicPartitionReplica(r.topic, r.partition, state.leader)) \
            if isinstance(leaders, dict) else None
        s.progress.numerator = s.bytes or 0
        s.progress.denominator = leader.bytes if leader is not None else None
    s.progress.complete = r.broker in state.isr
    if not lag:
        s.status = IN_SYNC if s.progress.complete else IN_PROGRESS
        return s
    mine_end, leader_end = ends.get((r.broker, r.topic, r.partition)), ends.get((state.leader, r.topic, r.partition))
    if not isinstance(mine_end, int) or not isinstance(leader_end, int):
        why = mine_end if isinstance(mine_end, str) else leader_end if isinstance(leader_end, str) else "no leader"
        s.status = f"Unknown: {why}"
        return s
    s.lag = max(0, leader_end - mine_end)
    s.status = IN_SYNC if s.lag == 0 and r.broker in state.isr else f"Behind: {s.lag} messages behind"
    return s


def broker_replicas(client: Client, broker: int, topics: Mapping[str, list[int]] | None = None
                    ) -> tuple[dict[TopicPartitionReplica, ReplicaStatus], list[DirInfo]]:
    """Where `broker` holds each replica (of `topics`; None: all), from one DescribeLogDirs: a ReplicaStatus each
    (its dir and bytes; while a copy is built in another of its dirs, KIP-113, that copy's dir and bytes and its
    Progress: the copy's bytes of the current copy's, an empty current copy giving an unknown total), and the
    broker's dirs. Raises AdminError / ClientError when the broker cannot be asked."""
    seen_ms = int(time.time() * 1000)
    dirs = describe_broker(client, broker, None if topics is None else dict(topics))
    out = {}
    for replica, info in replica_dirs(broker, dirs).items():
        s = ReplicaStatus(replica.topic, replica.partition, broker, IN_PLACE, log_dir=info.current, status_ms=seen_ms,
                          bytes=info.current_size if info.current is not None else None, future_dir=info.future,
                          future_bytes=info.future_size)
        if info.future is not None:
            s.status, s.progress = COPYING, Progress(info.future_size, info.current_size)
            s.future_lag = info.future_lag
        out[replica] = s
    return out, dirs


def moving_replicas(client: Client, broker: int
                    ) -> tuple[list[ReplicaStatus], dict[TopicPartitionReplica, ReplicaStatus]]:
    """Every replica of `broker` with a copy being built in another of its dirs (status "copying"), and where each
    of the broker's replicas is (to tell a copy that vanished swapped in from one dropped): mover-log-dirs
    --progress of a broker without DescribeReplicaMoves."""
    where, _ = broker_replicas(client, broker)
    return [s for _, s in sorted(where.items()) if s.future_dir is not None and s.log_dir is not None], where


def _dirs(client: Client, broker: int, tps: set[TopicPartition]) -> dict[TopicPartitionReplica, ReplicaStatus] | str:
    """Where `broker` holds each of `tps`, or why it could not say."""
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(tps):
        topics[topic].append(partition)
    try:
        return broker_replicas(client, broker, topics)[0]
    except (ClientError, AdminError) as e:
        return f"broker {broker} did not answer ({e})"


def _log_end_offsets(client: Client, broker: int, tps: set[TopicPartition]) -> dict[tuple[int, str, int], int | str]:
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


def progress_line(s: ReplicaStatus, stalled: bool = False) -> str:
    """One replica of --progress of a request: `Replica t-0-4: 10 of 40 bytes (25.0%), in progress`."""
    p = s.progress
    state = "complete" if p.complete else f"error {p.error}" if p.error else "stalled" if stalled else "in progress"
    return f"Replica {s.replica}: {p.amount()}, {state}"


def table(statuses: list[ReplicaStatus]) -> list[str]:
    """KIP-179's --progress table: Topic, Partition, Broker, Status, the columns as wide as their longest value."""
    rows = [("Topic", "Partition", "Broker", "Status")] + [
        (s.topic, str(s.partition), str(s.broker), s.status) for s in statuses]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return lines
