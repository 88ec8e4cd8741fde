"""A reassignment file's moves between the log dirs of their brokers (KIP-113), the library half of mover-log-dirs
--execute / --move / --verify / --cancel and of mover-reassign --execute of a file that changes only log dirs: where
the partitions and replicas are, the checks before anything starts (AdminError, one line each, in Kafka's words where
Kafka has the check), the move throttle, and AlterReplicaLogDirs. The brokers carry the moves out; the command lines
print Kafka's lines around these calls (mover/cli/reassign_log_dirs.py).

With a ZooKeeper session (`zk`, --zookeeper: brokers before Kafka 2.4) the partitions come from /brokers/topics, the
throttle goes to /config/brokers and the moves to /admin/reassign_partitions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from mover.admin import throttle
from mover.admin.alter_log_dirs import alter_log_dirs, by_broker
from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget
from mover.admin.client import Client, join_ids
from mover.admin.common import AdminError, TopicPartitionReplica, some
from mover.admin.log_dir_state import DirInfo, ReplicaDirs, describe_broker, replica_dirs
from mover.admin.zookeeper import AdminZkClient, entries_of_moves, entries_of_targets
from mover.wire.errors import ErrorCode

# Per broker: its dirs, and where each replica asked for is.
BrokerDirs = dict[int, tuple[list[DirInfo], dict[TopicPartitionReplica, ReplicaDirs]]]


def partition_assignment(client: Client, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> replica broker ids, from Metadata; unknown topics are simply absent."""
    reply = client.metadata(topics)
    assignment: dict[tuple[str, int], list[int]] = {}
    for t in reply["topics"]:
        if t["error_code"] == ErrorCode.NONE:
            for p in t["partitions"]:
                assignment[(t["name"], p["partition_index"])] = list(p["replica_nodes"])
    return assignment


def _topics_of(replicas: Iterable[TopicPartitionReplica]) -> dict[str, list[int]]:
    topics: dict[str, set[int]] = defaultdict(set)
    for r in replicas:
        topics[r.topic].add(r.partition)
    return {t: sorted(ps) for t, ps in topics.items()}


def describe_replicas(client: Client, replicas: dict[TopicPartitionReplica, str]) -> BrokerDirs:
    """Per broker: its dirs, and where each of `replicas` currently is."""
    out = {}
    for broker, group in by_broker(replicas).items():
        dirs = describe_broker(client, broker, _topics_of(group))
        out[broker] = (dirs, replica_dirs(broker, dirs))
    return out


def check_destinations(wanted: dict[TopicPartitionReplica, str], state: BrokerDirs) -> None:
    """Refuse before anything starts: a destination that is not a log dir of its broker can only fail."""
    for replica, log_dir in wanted.items():
        dirs = [d.path for d in state[replica.broker][0]]
        if log_dir not in dirs:
            raise AdminError(f"log dir {log_dir} for replica {replica} is not a log dir of broker {replica.broker} "
                             f"(its log dirs: {', '.join(dirs)})")


@dataclass
class LogDirPlan:
    """A checked file: the partitions' replicas now, each replica's wanted dir, and the file to roll back to (each
    replica's current dir rather than Kafka's "any", so that feeding it back really moves the replicas back)."""

    assignment: dict[tuple[str, int], list[int]]
    wanted: dict[TopicPartitionReplica, str]
    current: list[PartitionTarget]

    @property
    def brokers(self) -> list[int]:
        return sorted({r.broker for r in self.wanted})


def check_log_dir_plan(client: Client, targets: list[PartitionTarget], zk: AdminZkClient | None = None
                       ) -> LogDirPlan:
    """Everything that makes the file impossible, before anything starts (AdminError, Kafka 2.3's words for what its
    tool checks): partitions that do not exist, brokers the cluster does not have, a partition whose brokers the file
    changes (that is a move between brokers), a dir that is not one of its broker's."""
    topics = sorted({t.topic for t in targets})
    assignment = zk.assignment(topics) if zk is not None else partition_assignment(client, topics)
    missing = [t.name for t in targets if (t.topic, t.partition) not in assignment]
    if missing:
        raise AdminError(f"The proposed assignment contains non-existent partitions: {some(missing)}")
    unknown = sorted({b for t in targets for b in t.replicas} - client.brokers.keys())
    if unknown:
        raise AdminError(f"The proposed assignment contains non-existent brokerIDs: {some(unknown, ',')}")
    for t in targets:
        current = assignment[(t.topic, t.partition)]
        if sorted(current) != sorted(t.replicas):
            raise AdminError(f"partition {t.name} is on brokers {current}, not {list(t.replicas)}: mover-log-dirs "
                             f"moves replicas between the log dirs of their broker, not between brokers")
    wanted = {r: d for t in targets for r, d in t.replica_dirs().items()}
    # Replicas that are not on their broker yet (a move between brokers through ZooKeeper) have no dir to check.
    state = describe_replicas(client, {TopicPartitionReplica(t.topic, t.partition, b): ANY_LOG_DIR
                                       for t in targets for b in assignment[(t.topic, t.partition)]})
    check_destinations({r: d for r, d in wanted.items() if r.broker in state}, state)

    def now_in(t: PartitionTarget, broker: int) -> str:
        info = state[broker][1].get(TopicPartitionReplica(t.topic, t.partition, broker)) if broker in state else None
        return info.current if info is not None and info.current is not None else ANY_LOG_DIR

    current = [PartitionTarget(t.topic, t.partition, tuple(assignment[(t.topic, t.partition)]),
                               tuple(now_in(t, b) for b in assignment[(t.topic, t.partition)])) for t in targets]
    return LogDirPlan(assignment, wanted, current)


def set_move_throttle(client: Client, brokers: list[int], rate: int, zk: AdminZkClient | None = None) -> None:
    """The log-dir move throttle on `brokers`: before the moves start, so none of them runs a moment unthrottled."""
    if zk is not None:
        zk.set_throttle(brokers, rate)
    else:
        throttle.set_throttle(client, brokers, rate)


def start_moves(client: Client, targets: list[PartitionTarget], plan: LogDirPlan, timeout_s: float,
                zk: AdminZkClient | None = None) -> dict[int, list[int]]:
    """Start the file's moves: AlterReplicaLogDirs to each replica's broker (re-sent while the broker does not hold it
    yet, up to `timeout_s`), or the reassignment znode with `zk` (the brokers carry it out; no request id is known
    yet). Returns the request ids each broker gave (KIP-179)."""
    if zk is not None:
        zk.write_reassignment(entries_of_targets(targets))
        return {}
    return alter_log_dirs(client, plan.wanted, timeout_s)


def check_move(client: Client, broker: int, wanted: dict[TopicPartitionReplica, str],
               zk: AdminZkClient | None = None) -> dict[TopicPartitionReplica, str]:
    """kafka-log-dirs.sh --move's checks (KIP-113 Scripts 1: one broker, every replica to the dir named): returns
    each replica's current dir (the rollback)."""
    if broker not in client.brokers:
        raise AdminError(f"broker {broker} is not in the cluster (brokers: {join_ids(client.brokers)})")
    topics = sorted({r.topic for r in wanted})
    assignment = zk.assignment(topics) if zk is not None else partition_assignment(client, topics)
    missing = [r.partition_name for r in wanted if (r.topic, r.partition) not in assignment]
    if missing:
        raise AdminError(f"The proposed assignment contains non-existent partitions: {some(missing)}")
    state = describe_replicas(client, wanted)
    check_destinations(wanted, state)
    replicas = state[broker][1]
    return {r: replicas[r].current for r in wanted  # type: ignore[misc]
            if r in replicas and replicas[r].current is not None}


def start_move(client: Client, wanted: dict[TopicPartitionReplica, str], timeout_s: float,
               zk: AdminZkClient | None = None) -> dict[int, list[int]]:
    """--move: AlterReplicaLogDirs (request ids per broker), or the reassignment znode with `zk`."""
    if zk is not None:
        zk.write_reassignment(entries_of_moves(wanted))
        return {}
    return alter_log_dirs(client, wanted, timeout_s)


def check_cancel(client: Client, targets: list[PartitionTarget]) -> tuple[dict[TopicPartitionReplica, str],
                                                                           BrokerDirs]:
    """--cancel's checks: the file's replicas with a dir (AdminError when none, or when a broker or partition does
    not exist), and where each is now."""
    wanted = {r: d for t in targets for r, d in t.replica_dirs().items()}
    if not wanted:
        raise AdminError("the reassignment names no replica with a log dir: nothing to cancel")
    unknown = sorted({r.broker for r in wanted} - client.brokers.keys())
    if unknown:
        raise AdminError(f"The proposed assignment contains non-existent brokerIDs: {some(unknown, ',')}")
    assignment = partition_assignment(client, sorted({r.topic for r in wanted}))
    missing = sorted({r.partition_name for r in wanted if (r.topic, r.partition) not in assignment})
    if missing:
        raise AdminError(f"The proposed assignment contains non-existent partitions: {some(missing)}")
    return wanted, describe_replicas(client, wanted)


def cancel_moves(client: Client, back: dict[TopicPartitionReplica, str], timeout_s: float) -> None:
    """Cancel running copies, as Kafka does: AlterReplicaLogDirs to the dir each replica is in now, so its future
    copy is dropped."""
    alter_log_dirs(client, back, timeout_s)
