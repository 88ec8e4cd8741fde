"""What the real-cluster tests of mover-reassign (tests/kafka/reassign/) look at in the cluster while and after a
reassignment runs: how many partitions and replicas were moving at once (`Sampler`, ListPartitionReassignments
polled on a thread), where each partition's replicas and leader are (`partitions`), which throttle configs are left
(`throttles_left`), and that every record acknowledged under load was read back once (`Load`); and the topics they
move (`create_topic`: min.insync.replicas=2).

    create_topic(cluster, "t", 4, [1, 2, 3])
    load = Load(cluster, "t", 4, prefill_records=1000)
    with Sampler(cluster.bootstrap, "t") as sampler:
        ...                                       # the reassignment
    assert sampler.max_partitions() <= 2 and throttles_left(cluster, "t") == {}
    load.check()
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mover.admin.client import Client
from mover.admin.reassign.kip455 import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    list_reassignments,
    own_configs,
    partition_states,
)
from mover.admin.reassign.replication_throttle import BROKER_KEYS, TOPIC_KEYS
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.producers import PyProducer, prefill


class Sampler:
    """ListPartitionReassignments every 100 ms: how many partitions were moving at once, how many replicas were
    being added to one partition at once."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        client = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = Client(self.bootstrap, timeout=5)
                ongoing = {tp: og for tp, og in list_reassignments(client).items() if tp[0] == self.topic}
                self.samples.append((time.monotonic(), len(ongoing),
                                     max((len(og.adding) for og in ongoing.values()), default=0)))
            except Exception:  # noqa: BLE001 - a broker being killed: sample again
                if client is not None:
                    client.close()
                client = None
            self._stop.wait(0.1)
        if client is not None:
            client.close()

    def max_partitions(self, since: float = 0.0, until: float = float("inf")) -> int:
        return max((n for t, n, _ in self.samples if since <= t <= until), default=0)

    def max_adding(self) -> int:
        return max((a for _, _, a in self.samples), default=0)


def partitions(cluster: KafkaCluster, topic: str) -> dict[int, tuple[list[int], int]]:
    with Client(cluster.bootstrap, timeout=10) as client:
        states, _ = partition_states(client, [topic])  # from any live broker
    return {p: (list(s.replicas), s.leader) for (_, p), s in states.items()}


def throttles_left(cluster: KafkaCluster, topic: str) -> dict[str, Any]:
    with Client(cluster.bootstrap, timeout=10) as client:
        brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids
                                                        if cluster.broker(b).running], BROKER_KEYS)
        topics = own_configs(client, TOPIC_RESOURCE, [topic], TOPIC_KEYS)
    return {k: v for k, v in {**brokers, **topics}.items() if v}


class Load:
    """An idempotent acks=all producer and a consumer on every partition of `topic`, while a reassignment runs."""

    def __init__(self, cluster: KafkaCluster, topic: str, n: int, prefill_records: int) -> None:
        self.cluster = cluster
        self.tps = [(topic, p) for p in range(n)]
        self.acked = prefill(cluster.bootstrap, self.tps, prefill_records, pad=1000)
        self.producer = PyProducer("load", cluster.bootstrap, self.tps, rate=40, pad=200).start()
        self.consumer = PyConsumer("reader", cluster.bootstrap, self.tps).start()

    def check(self) -> None:
        self.producer.stop()
        acked, failed = self.producer.snapshot()
        assert not failed, f"{len(failed)} sends failed, e.g. {failed[0]}"
        assert len(acked) > 0
        ends = end_offsets(self.cluster.bootstrap, self.tps)
        wait_caught_up([self.consumer], ends)
        assert_clean(check("reader", self.consumer.stop(), ends, self.acked + acked))


def create_topic(cluster: KafkaCluster, name: str, n: int, on: list[int]) -> None:
    """`name` with `n` partitions, each on the replicas `on`, min.insync.replicas=2."""
    cluster.create_topic(name, assignment={p: on for p in range(n)}, configs={"min.insync.replicas": 2})
