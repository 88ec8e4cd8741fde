"""The real-Kafka harness itself (mover/testing/kafka_cluster.py, kafka_node.py): a KRaft node with two log dirs
starts, takes a topic made by kafka-python, answers our DescribeLogDirs with both dirs, and comes back on the same dirs
after kill -9."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.kafka_node import STALE_EPOCH_LOOP, STALE_EPOCH_RESTARTS, STARTED, KafkaNode
from mover.testing.wait import wait_for


def test_topic_and_describe_log_dirs_list_both_dirs(kafka: KafkaCluster) -> None:
    kafka.create_topic("smoke", partitions=4)

    def listed() -> list | None:  # the broker makes each partition's log after CreateTopics answers: polled
        with Client(kafka.bootstrap) as client:
            found = describe_broker(client, 1)
        return found if sum(len(d.partitions) for d in found) == 4 else None

    dirs = wait_for(listed, 30, "the topic's 4 partitions in DescribeLogDirs")
    assert sorted(d.path for d in dirs) == sorted(str(d) for d in kafka.log_dirs(1))
    assert all(d.error_code == 0 and d.total_bytes > 0 and d.usable_bytes > 0 for d in dirs)
    held = {(p.name, d.path) for d in dirs for p in d.partitions}
    # Kafka spreads new partitions over the dirs; what DescribeLogDirs says matches the files.
    assert held == {(f"smoke-{p}", str(kafka.dir_of(1, "smoke", p))) for p in range(4)}
    assert len({path for _, path in held}) == 2


def test_kill_9_and_restart_on_the_same_dirs(kafka: KafkaCluster) -> None:
    kafka.create_topic("crash", partitions=1)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    try:
        for i in range(10):
            producer.send("crash", value=b"v%d" % i, partition=0)
        producer.flush(30)
    finally:
        producer.close()
    pid = kafka.broker(1).pid
    kafka.kill(1)
    assert not kafka.broker(1).running
    kafka.start_broker(1)
    assert kafka.broker(1).pid not in (None, pid)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        tp = TopicPartition("crash", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = [m.value for m in itertools.islice(consumer, 10)]  # the timeout only ends a short read
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(10)]


def test_the_nodes_map_the_runs_class_data_archive(kafka: KafkaCluster, kafka_jvm_opts: str) -> None:
    """The archive mover/testing/jvm_archive.py makes is the one the node's JVM mapped: the JVM ignores one it
    cannot use without a word, so only its memory map says the start was cheaper."""
    archive = kafka_jvm_opts.split("-XX:SharedArchiveFile=")[1].split()[0]
    node = kafka.broker(1)
    assert node.pid is not None
    with open(f"/proc/{node.pid}/maps") as maps:
        assert archive in maps.read()


def _stale_epoch_home(tmp_path: Path, stuck_starts: int) -> Path:
    """A Kafka home whose kafka-server-start.sh acts out 3.7's stale-epoch loop on its first `stuck_starts` starts
    (the broker's lines, then nothing more) and starts well after that; each start is counted in starts.txt."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "kafka-server-start.sh"
    script.write_text(f"""#!/bin/sh
echo start >> {tmp_path}/starts.txt
if [ "$(wc -l < {tmp_path}/starts.txt)" -le {stuck_starts} ]; then
  i=0
  while [ $i -lt {STALE_EPOCH_LOOP} ]; do
    echo "WARN [BrokerLifecycleManager id=1] Broker 1 sent a heartbeat request but received error STALE_BROKER_EPOCH."
    i=$((i + 1))
  done
else
  echo "INFO [KafkaRaftServer nodeId=1] {STARTED} (kafka.server.KafkaRaftServer)"
fi
exec sleep 600
""")
    script.chmod(0o755)
    return home


@pytest.mark.parametrize("stuck_starts", [1, STALE_EPOCH_RESTARTS])
def test_a_broker_stuck_on_a_stale_epoch_is_started_again(tmp_path: Path, stuck_starts: int) -> None:
    node = KafkaNode(_stale_epoch_home(tmp_path, stuck_starts), tmp_path / "nodes", 1, "broker", log_dirs=1,
                     ports={"PLAINTEXT": 1}, props={}, heap="-Xmx64m")
    node.start()
    try:
        node.wait_started(timeout=60)
        assert (tmp_path / "starts.txt").read_text().count("start") == stuck_starts + 1
    finally:
        node.kill()


def test_a_broker_stuck_at_every_start_fails_saying_so(tmp_path: Path) -> None:
    node = KafkaNode(_stale_epoch_home(tmp_path, STALE_EPOCH_RESTARTS + 1), tmp_path / "nodes", 1, "broker",
                     log_dirs=1, ports={"PLAINTEXT": 1}, props={}, heap="-Xmx64m")
    node.start()
    try:
        with pytest.raises(TimeoutError, match="stuck on received error STALE_BROKER_EPOCH after 2 restarts"):
            node.wait_started(timeout=60)
    finally:
        node.kill()
