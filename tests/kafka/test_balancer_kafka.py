"""mover-audit balance against a real Apache Kafka 3.7 cluster (KRaft, a controller and three brokers of three log
dirs, the topic of tests/kafka/test_audit_cluster.py filled so that every broker has one disk far above its mean),
with an idempotent acks=all producer and the balancer's canary (replication factor 3, acks=all: Kafka checks the
canary's hand-written record batch, CRC included) running: within three cycles every disk is in band, no throttle
key is left on any broker, no future copy remains, and every acknowledged record reads back once."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker
from mover.audit.balancer import command
from mover.audit.cli import build_parser
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.testing.kafka import KafkaCluster
from mover.testing.workload import PyProducer, read_back
from tests.kafka.test_audit_cluster import BROKERS, CLUSTER, TPS, admin_configs, fill_unevenly

BAND = 0.09


@pytest.fixture(scope="module")
def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(brokers=3, log_dirs=3, controller=True, props={"replica.fetch.max.bytes": 65536})


def usage(client: Client, broker: int) -> dict[str, int]:
    return {d.path: sum(p.size for p in d.partitions if not p.is_future) for d in describe_broker(client, broker)}


def in_band(used: dict[str, int], band: float) -> bool:
    mean = sum(used.values()) / len(used)
    return all(abs(u - mean) <= band * mean for u in used.values())


@pytest.mark.timeout(900)
def test_the_balancer_brings_every_disk_of_a_real_kafka_into_band(cluster: KafkaCluster, tmp_path: Path,
                                                                  spark: Any) -> None:
    acked = fill_unevenly(cluster)
    with Client(cluster.bootstrap) as client:
        assert not any(in_band(usage(client, b), BAND) for b in BROKERS)
    producer = PyProducer("during", cluster.bootstrap, TPS, rate=12, pad=100).start()
    argv = ["balance", "--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER, "--state-dir",
            str(tmp_path / "state"), "--band", f"{BAND:.0%}", "--interval", "0.1", "--check-interval", "1",
            "--poll-interval", "0.2", "--throttle", "1000000", "--max-produce-p99-ms", "5000",
            "--canary-interval", "0.2", "--max-cycles", "3"]
    out = io.StringIO()
    try:
        rc = command.run(build_parser(argv)[0].parse_args(argv), out)
    finally:
        producer.stop()
    text = out.getvalue()
    assert rc == 0, text
    with Client(cluster.bootstrap) as client:
        for b in BROKERS:
            used = usage(client, b)
            # The plan's band is on the snapshot's sizes; the producer adds ~1 KB/s meanwhile.
            assert in_band(used, BAND + 0.01), (b, used, text)
            assert not any(p.is_future for d in describe_broker(client, b) for p in d.partitions), text
    assert "nothing to move (0 disk(s) out of band)" in text, text
    assert all(THROTTLE_KAFKA_KEY not in configs for configs in admin_configs(cluster).values()), text
    assert "canary of k: created topic __mover_balance_canary (1 partition, replication factor 3)" in text, text
    # The only pause: at the start, until the canary has a p99 (no move starts on a latency not known yet).
    assert [line for line in text.splitlines() if line.startswith(("paused", "resumed"))] == [
        "paused k: waiting for the canary's first 5 produces", "resumed k"], text
    during, failures = producer.snapshot()
    assert not failures and during
    read_back("after", cluster.bootstrap, TPS, acked + during)
