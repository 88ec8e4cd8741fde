"""One fake broker's state, apart from what it answers: its dirs, replicas, moves, configs and how it misbehaves. The
broker's APIs (log_dirs.py, configs.py, reassignments.py) are mixins over this one dataclass and FakeBroker
(broker.py) joins them, so a test keeps one object per broker, as Kafka has, and makes a broker misbehave (slow,
paused, unswapped, a dir offline) by setting its fields directly."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mover.config.broker import CORDON_ALL, CORDONED_KEY

if TYPE_CHECKING:
    from mover.testing.fake_kafka.cluster import FakeCluster

# How a broker misbehaves: answers, never answers DescribeLogDirs, or hangs up on it.
OK = "ok"
SLOW = "slow"
REFUSE = "refuse"


@dataclass
class Move:
    topic: str
    partition: int
    source: str
    destination: str
    size: int
    copied: int = 0


@dataclass
class BrokerState:
    """The fields of a FakeBroker, and what its APIs ask of them (the dirs cordoned, where a replica is)."""

    cluster: FakeCluster
    node_id: int
    dirs: list[str]
    # dir -> {(topic, partition): size}
    replicas: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    moves: dict[tuple[str, int], Move] = field(default_factory=dict)
    offline: set[str] = field(default_factory=set)
    total_bytes: int = 10 << 30
    configs: dict[str, str] = field(default_factory=dict)  # set at run time for this broker (DYNAMIC_BROKER_CONFIG)
    static_configs: dict[str, str] = field(default_factory=dict)  # server.properties (STATIC_BROKER_CONFIG)
    config_history: list[tuple[str, str | None]] = field(default_factory=list)
    # 3.x: unknown keys deleted at run time, which DescribeConfigs of every key still lists (DEFAULT_CONFIG, null).
    forgotten: set[str] = field(default_factory=set)
    behaviour: str = OK
    paused: bool = False  # moves make no progress (a stalled copy)
    # Kafka 3.7.0 after KAFKA-16365: a copy once complete is never swapped in, until this is cleared (the broker
    # restarted). It keeps following its partition, so as on a partition being written its lag shows 0 and 1 in turn.
    unswapped: bool = False
    _looks: int = 0
    # Fenced by the controller (a KRaft controller does it ~9 s after a broker stops heartbeating, broker.session.
    # timeout.ms): Metadata then leaves it out of its brokers and lists it among each partition's offline replicas.
    fenced: bool = False
    # Benchmarks: encode each distinct DescribeLogDirs request's answer once and replay it (state must not change).
    canned: bool = False
    latency: float = 0.0  # seconds before each DescribeLogDirs answer (a broker far away, or busy)
    # The next this many AlterReplicaLogDirs are carried out and the connection closed instead of answering: a broker
    # that died right after taking the request (Kafka resumes the copy when it is back).
    unanswered_alters: int = 0
    _canned: dict[tuple[int, bytes], bytes] = field(default_factory=dict)
    port: int = 0
    _sock: socket.socket | None = None

    def cordoned(self) -> set[str]:
        """The dirs cordoned.log.dirs names now (dynamic value over server.properties; `*` = every dir)."""
        if not self.cluster.version.has_cordons:
            return set()
        raw = self.configs.get(CORDONED_KEY, self.static_configs.get(CORDONED_KEY, ""))
        entries = {e.strip() for e in raw.split(",") if e.strip()}
        return set(self.dirs) if CORDON_ALL in entries else entries & set(self.dirs)

    def where(self, topic: str, partition: int) -> str | None:
        for d, held in self.replicas.items():
            if (topic, partition) in held:
                return d
        return None
