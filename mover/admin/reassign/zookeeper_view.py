"""The step engine's view of a cluster through ZooKeeper, for `mover-reassign --zookeeper` (brokers before Kafka 2.4,
which have no KIP-455 APIs): the same KIP-435 steps, carried out as Kafka 2.x's controller carries out
reassignments (docs/cli.md#mover-reassign-kafka-reassign-partitionssh-in-kip-435-steps).

* Where partitions stand: `/brokers/topics/<t>` (replicas) and `/brokers/topics/<t>/partitions/<p>/state` (leader,
  ISR), which the controller writes first.
* A step starts by creating `/admin/reassign_partitions` with the batch. A controller before 2.4 reads that znode
  only when it is created, so a batch starts only once the previous one's znode is gone (`one_batch_at_a_time`);
  the controller removes each partition's entry when its new replicas are in the ISR and deletes the znode when
  it is empty.
* A preferred-leader election is `/admin/preferred_replica_election`, created when absent (the controller deletes
  it when done).
* Throttles: `/config/brokers/<id>` and `/config/topics/<t>` plus a change notification, as Kafka 2.x's tool wrote
  them (`ZkConfigs`, for mover/admin/reassign/replication_throttle.py).
Cancelling needs KIP-455: there is no way to take a partition out of a running ZooKeeper reassignment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from mover.admin.common import AdminError
from mover.admin.reassign.kip455 import BROKER_RESOURCE, Ongoing, PartitionState, TopicPartition
from mover.admin.zookeeper import change_config
from mover.storage.names import TopicPartition as ZkTopicPartition
from mover.wire.errors import ErrorCode
from mover.zk import bounded_json, znodes

PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONFIG_TOPICS = "/config/topics"


class ZkReassignments:
    """The four calls the step engine makes of a cluster, through ZooKeeper."""

    one_batch_at_a_time = True

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    def _json(self, path: str) -> dict | None:  # type: ignore[type-arg]
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        try:
            value = bounded_json.loads(data or b"null")  # a hostile znode nests past the recursion limit
        except ValueError:
            raise AdminError(f"ZooKeeper {path} is not JSON") from None
        return value if isinstance(value, dict) else None

    def partition_states(self, topics: Iterable[str]) -> tuple[dict[TopicPartition, PartitionState], set[str]]:
        states: dict[TopicPartition, PartitionState] = {}
        missing: set[str] = set()
        for topic in sorted(set(topics)):
            try:
                data, _ = self.zk.get(znodes.topic_path(topic))
            except NoNodeError:
                missing.add(topic)
                continue
            try:
                assignment = znodes.decode_topic(topic, data)
            except znodes.ZnodeFormatError as e:
                raise AdminError(f"ZooKeeper {znodes.topic_path(topic)}: {e}") from None
            for p, replicas in assignment.items():
                state = self._json(f"{znodes.topic_path(topic)}/partitions/{p}/state") or {}
                isr = state.get("isr") if isinstance(state.get("isr"), list) else []
                leader = state.get("leader") if isinstance(state.get("leader"), int) else -1
                states[(topic, p)] = PartitionState(tuple(replicas), tuple(isr), leader)
        return states, missing

    def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, Ongoing]:
        """The znode's entries (of `partitions`, or all) as KIP-455 would list them: the controller has the target's
        replicas and the ones leaving in /brokers/topics while it runs; new replicas out of the ISR are adding."""
        try:
            data, _ = self.zk.get(znodes.REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}
        try:
            entries = znodes.decode_reassignment(data).entries
        except znodes.ZnodeFormatError as e:
            raise AdminError(f"{znodes.REASSIGN_PARTITIONS} is unreadable: {e}") from None
        wanted = None if partitions is None else set(partitions)
        targets = {(e.tp.topic, e.tp.partition): tuple(e.replicas) for e in entries}
        targets = {tp: r for tp, r in targets.items() if wanted is None or tp in wanted}
        states, _ = self.partition_states({tp[0] for tp in targets})
        out: dict[TopicPartition, Ongoing] = {}
        for tp, target in targets.items():
            state = states.get(tp, PartitionState((), (), -1))
            leaving = tuple(b for b in state.replicas if b not in target)
            adding = tuple(b for b in target if b not in state.isr)
            out[tp] = Ongoing(target + leaving, adding, leaving)
        return out

    def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Start the batch by creating the znode; refused (retriable) while another batch's znode exists."""
        if any(r is None for r in targets.values()):
            return {tp: (ErrorCode.UNSUPPORTED_VERSION, "cancelling needs KIP-455 (--bootstrap-server, Kafka 2.4+)")
                    for tp in targets}
        entries = [znodes.ReassignmentEntry(ZkTopicPartition(t, p), tuple(r or ()), None)
                   for (t, p), r in sorted(targets.items())]
        try:
            self.zk.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(entries), makepath=True)
        except NodeExistsError:
            return {tp: (ErrorCode.REASSIGNMENT_IN_PROGRESS, f"{znodes.REASSIGN_PARTITIONS} exists") for tp in targets}
        return {}

    def elect_preferred(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = sorted(set(partitions))
        if not tps:
            return {}
        body = json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in tps]}).encode()
        try:
            self.zk.create(PREFERRED_REPLICA_ELECTION, body, makepath=True)
        except NodeExistsError:
            pass  # another election runs: the engine asks again while the leader is not the preferred one
        return {}


class ZkConfigs:
    """Resources' own configs in ZooKeeper, changed as Kafka 2.x's tools change them: the entity's znode under its
    version, then a change notification the brokers act on."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    @staticmethod
    def _path(kind: int, name: str) -> tuple[str, str]:
        if kind == BROKER_RESOURCE:
            return znodes.config_path(name), f"brokers/{name}"
        return f"{CONFIG_TOPICS}/{name}", f"topics/{name}"

    def own(self, kind: int, names: Iterable[str], keys: list[str]) -> dict[str, dict[str, str]]:
        out = {}
        for name in sorted(set(names)):
            path, _ = self._path(kind, name)
            try:
                data, _ = self.zk.get(path)
                config = znodes.decode_config(name, data)
            except NoNodeError:
                config = {}
            except znodes.ZnodeFormatError as e:
                raise AdminError(f"ZooKeeper {path}: {e}") from None
            out[name] = {k: v for k, v in config.items() if k in keys}
        return out

    def alter(self, kind: int, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        for name, entries in sorted(changes.items()):
            if not entries:
                continue
            path, entity = self._path(kind, name)
            change_config(self.zk, path, name, entity, entries)
