"""The fake cluster: what its brokers share and what a test does to all of them at once. Kafka's brokers agree on one
view of the cluster (its brokers, the partitions' assignment, the controller), so the fakes keep it once, under one
lock every API takes, and answer Metadata from it; a test places replicas, removes partitions, reads the peaks of
moves running at once and starts and stops every broker here."""

from __future__ import annotations

import random
import socket
import threading
from typing import Any

from mover.testing.fake_kafka.broker import FakeBroker
from mover.testing.fake_kafka.broker_state import Move
from mover.testing.fake_kafka.configs import TopicConfigs
from mover.testing.fake_kafka.reassignments import Reassignments
from mover.testing.fake_kafka.versions import KafkaVersion
from mover.testing.fake_topic_log import FakeTopicLogs


class FakeCluster(Reassignments, TopicConfigs):
    """Brokers of one fake Kafka cluster sharing Metadata (brokers and partition assignment). Its controller
    (Reassignments) and its topic configs (TopicConfigs) are mixins over the state set here."""

    def __init__(self, version: KafkaVersion, *, brokers: int | list[int] = 1, dirs: list[str] | None = None,
                 move_step: int = 1 << 20, cluster_id: str = "fake-cluster") -> None:
        self.version = version
        self.lock = threading.RLock()
        self.released = threading.Event()  # SLOW brokers answer nothing until the cluster stops
        self.move_step = move_step
        self.cluster_id = cluster_id
        ids = list(range(brokers)) if isinstance(brokers, int) else brokers
        dirs = dirs or ["/d1", "/d2"]
        self.brokers = {i: FakeBroker(self, i, list(dirs), replicas={d: {} for d in dirs}) for i in ids}
        self.assignment: dict[tuple[str, int], list[int]] = {}
        # KIP-455: ZooKeeper mode's controller; each reassignment (original replicas, target, polls so far) is done
        # after `reassign_polls` answers of ListPartitionReassignments; elected leaders; topic configs.
        self.controller = min(ids)
        self.reassign_polls = 2
        self.reassigning: dict[tuple[str, int], tuple[list[int], list[int], int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.logs = FakeTopicLogs()  # one-partition topics written and read (the tools' reassignment status topic)
        self.peak_moves: dict[str, int] = {}
        self._connections: dict[int, list[socket.socket]] = {}

    def add_replica(self, broker: int, log_dir: str, topic: str, partition: int, size: int) -> None:
        with self.lock:
            self.brokers[broker].replicas[log_dir][(topic, partition)] = size
            replicas = self.assignment.setdefault((topic, partition), [])
            if broker not in replicas:
                replicas.append(broker)
            self.leaders.setdefault((topic, partition), broker)

    def remove_partition(self, topic: str, partition: int) -> None:
        with self.lock:
            self.assignment.pop((topic, partition), None)
            for b in self.brokers.values():
                for held in b.replicas.values():
                    held.pop((topic, partition), None)
                b.moves.pop((topic, partition), None)

    def running_moves(self) -> list[tuple[int, Move]]:
        with self.lock:
            return [(b.node_id, m) for b in self.brokers.values() for m in b.moves.values()]

    def record_peaks(self) -> None:
        """Remember the most moves running at once: per cluster, per broker and per dir (source or destination)."""
        with self.lock:
            counts: dict[str, int] = {"cluster": 0}
            for b in self.brokers.values():
                counts["cluster"] += len(b.moves)
                counts[f"broker {b.node_id}"] = len(b.moves)
                for m in b.moves.values():
                    for d in {m.source, m.destination}:
                        k = f"dir {b.node_id}:{d}"
                        counts[k] = counts.get(k, 0) + 1
            for k, n in counts.items():
                self.peak_moves[k] = max(self.peak_moves.get(k, 0), n)

    def peak(self, kind: str) -> int:
        """The most moves seen at once for `kind` "cluster", "broker" or "dir" (the maximum over all of them)."""
        return max((n for k, n in self.peak_moves.items() if k.split(" ")[0] == kind), default=0)

    def metadata(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            topics: dict[str, list[dict[str, Any]]] = {}
            fenced = {b.node_id for b in self.brokers.values() if b.fenced}
            for tp in sorted(self.assignment):
                replicas = self.replicas(tp)
                isr, leader = self.isr_and_leader(tp, fenced)
                topics.setdefault(tp[0], []).append({"error_code": 0, "partition_index": tp[1], "leader_id": leader,
                                                     "replica_nodes": replicas, "isr_nodes": isr,
                                                     "offline_replicas": [b for b in replicas if b in fenced]})
            wanted = None if request["topics"] is None else {t["name"] for t in request["topics"]}
            live = [b.node_id for b in self.brokers.values() if not b.fenced]
            # The status topic's leader is a broker that is up: a real cluster's (replication factor up to 3) moves
            # off a broker that stopped within seconds, where its own replicas above stay led by it until fenced.
            up = [b.node_id for b in self.brokers.values() if not b.fenced and b._sock is not None]
            return {
                "brokers": [{"node_id": b.node_id, "host": "127.0.0.1", "port": b.port}
                            for b in self.brokers.values() if not b.fenced],
                "cluster_id": self.cluster_id,
                "controller_id": self.controller if self.version.zookeeper else random.choice(live or [-1]),
                "topics": [{"error_code": 0, "name": t, "is_internal": False, "partitions": ps}
                           for t, ps in topics.items() if wanted is None or t in wanted]
                + self.logs.metadata_topics(min(up or live or [-1]), wanted),
            }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values() if b._sock is not None)

    def keep_connection(self, broker: FakeBroker, conn: socket.socket) -> None:
        with self.lock:
            self._connections.setdefault(broker.node_id, []).append(conn)

    def take_connections(self, broker: FakeBroker) -> list[socket.socket]:
        with self.lock:
            return self._connections.pop(broker.node_id, [])

    def start(self) -> FakeCluster:
        self.released.clear()
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        self.released.set()
        for b in self.brokers.values():
            b.stop()

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
