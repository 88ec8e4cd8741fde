"""mover-reassign --zookeeper (deprecated, KIP-179: brokers before Kafka 2.4) in KIP-435 steps on a real Kafka 3.7
in ZooKeeper mode (4 brokers and a real ZooKeeper), whose controller still carries out /admin/reassign_partitions
and /admin/preferred_replica_election as Kafka 2.x's did.

Each batch is one znode, created only once the previous one is gone; the sampled znode never lists more partitions
than --max-partition-movements; the throttle goes to /config/brokers and /config/topics and is gone afterwards; the
assignment ends at the target with the new preferred leaders, and every acknowledged record is read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from mover.admin.client import Client
from mover.admin.reassign.replication_throttle import BROKER_KEYS, TOPIC_KEYS
from mover.testing import prefork
from mover.testing.exactly_once import read_back
from mover.testing.kafka_home import kafka_home
from mover.testing.kafka_node import TOOL_HEAP
from mover.testing.producers import prefill
from mover.testing.wait import wait_for
from mover.testing.zk_kafka_cluster import ZkKafkaCluster
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.errors import ErrorCode
from mover.wire.messages import LIST_PARTITION_REASSIGNMENTS

BROKERS = (1, 2, 3, 4)
HEAP = "-Xmx200m -Xms64m"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, kafka_jvm_opts: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ZkKafkaCluster]:
    kafka = ZkKafkaCluster(tmp_path_factory.mktemp("zk-kafka"), zookeeper.connect_string + "/kafka", BROKERS,
                           heap=HEAP, props={"auto.leader.rebalance.enable": "false"},
                           jvm_opts=kafka_jvm_opts)
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.stop()


def zk_json(zk: KazooClient, path: str) -> dict | None:  # type: ignore[type-arg]
    try:
        return json.loads(zk.get(path)[0] or b"null")
    except NoNodeError:
        return None


def test_steps_through_zookeeper(cluster: ZkKafkaCluster, tmp_path: Path) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "zksteps"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="zk-test")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={p: [1, 2, 3] for p in range(3)},
                                      topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    zk = KazooClient(hosts=cluster.connect)
    zk.start()
    try:
        wait_for(lambda: all((zk_json(zk, f"/brokers/topics/{topic}/partitions/{p}/state") or {}).get("leader") == 1
                             for p in range(3)), 60, "leaders for the new topic")
        tps = [(topic, p) for p in range(3)]
        acked = prefill(cluster.bootstrap, tps, 300, pad=1000)
        targets = {p: [4, 2, 3] for p in range(3)}
        f = tmp_path / "r.json"
        f.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": r} for p, r in targets.items()]}))

        # The znode, every 50 ms: how many partitions one batch named, and the throttle while it runs.
        batches: list[int] = []
        throttled: list[dict[str, str]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                znode = zk_json(zk, "/admin/reassign_partitions")
                if znode is not None:
                    batches.append(len(znode["partitions"]))
                    throttled.append((zk_json(zk, "/config/brokers/4") or {}).get("config", {}))
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            r = prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", "--zookeeper", cluster.connect,
                             "--execute", "--reassignment-json-file", str(f), "--max-partition-movements", "2",
                             "--throttle", "5000000", "--poll-interval", "0.3"], capture_output=True, text=True,
                            timeout=240, stdin=subprocess.DEVNULL,
                            env={**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")})
        finally:
            stop.set()
            sampler.join(10)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stderr.startswith("Warning: --zookeeper is deprecated"), r.stderr
        assert "Successfully reassigned partitions" in r.stdout, r.stdout
        # [1,2,3] -> [4,2,3] under --max-replica-movements 1: add 4 as the preferred leader, then drop 1.
        for p in range(3):
            assert f"Partition {topic}-{p}: step 1 [1, 2, 3] -> [4, 2, 3, 1] +[4], new preferred leader" in r.stdout
            assert f"Partition {topic}-{p}: step 2 [4, 2, 3, 1] -> [4, 2, 3] -[1]" in r.stdout
        assert batches and max(batches) <= 2, batches
        assert any(c.get("follower.replication.throttled.rate") == "5000000" for c in throttled), throttled
        # Where the controller left it: the target, each new preferred leader elected, no znode, no throttle.
        for p, replicas in targets.items():
            assert zk_json(zk, f"/brokers/topics/{topic}")["partitions"][str(p)] == replicas  # type: ignore[index]
            assert zk_json(zk, f"/brokers/topics/{topic}/partitions/{p}/state")["leader"] == 4  # type: ignore[index]
        assert zk.exists("/admin/reassign_partitions") is None
        for b in BROKERS:
            assert not set((zk_json(zk, f"/config/brokers/{b}") or {}).get("config", {})) & set(BROKER_KEYS)
        topic_config = zk_json(zk, f"/config/topics/{topic}")["config"]  # type: ignore[index]
        assert not set(topic_config) & set(TOPIC_KEYS) and topic_config["min.insync.replicas"] == "2"
        # Kafka 2.3's --verify lines through ZooKeeper: done.
        v = prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", "--zookeeper", cluster.connect,
                         "--verify", "--reassignment-json-file", str(f)], capture_output=True, text=True, timeout=60,
                        stdin=subprocess.DEVNULL,
                        env={**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")})
        assert v.returncode == 0, v.stdout + v.stderr
        assert [f"Reassignment of partition {topic}-{p} completed successfully" for p in range(3)] == [
            line for line in v.stdout.splitlines() if line.startswith("Reassignment of partition")], v.stdout
    finally:
        zk.stop()
        zk.close()
    read_back("zk-reader", cluster.bootstrap, tps, acked)


def test_bootstrap_server_finds_the_controller(cluster: ZkKafkaCluster, tmp_path: Path) -> None:
    """--bootstrap-server on a ZooKeeper-mode cluster whose controller is not the lowest broker id: KIP-455's
    requests go to the controller, as Kafka's AdminClient sends them. A broker that is not the controller answers
    ListPartitionReassignments and AlterPartitionReassignments with NOT_CONTROLLER (41) and does not forward them."""
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "zkbootstrap"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="zk-test")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={p: [1, 2, 3] for p in range(2)})])
    finally:
        admin.close()
    zk = KazooClient(hosts=cluster.connect)
    zk.start()
    try:
        # A new election each time the znode goes: until a broker other than 1 (the one asked first) wins one.
        def elsewhere() -> bool:
            controller = zk_json(zk, "/controller")
            if controller is None:
                return False
            if controller["brokerid"] != 1:
                return True
            zk.delete("/controller")
            return False

        wait_for(elsewhere, 120, "a controller other than broker 1")
        wait_for(lambda: all((zk_json(zk, f"/brokers/topics/{topic}/partitions/{p}/state") or {}).get("leader") == 1
                             for p in range(2)), 60, "leaders for the new topic")
        tps = [(topic, p) for p in range(2)]
        acked = prefill(cluster.bootstrap, tps, 200, pad=1000)
        with Client(cluster.bootstrap, timeout=10) as client:
            reply = client.connection(1).call(LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None})
            assert reply["error_code"] == ErrorCode.NOT_CONTROLLER, reply
        f = tmp_path / "r.json"
        f.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": p, "replicas": [4, 2, 3]} for p in range(2)]}))
        env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")}
        out = {}
        for action in (["--execute", "--poll-interval", "0.3"], ["--verify"]):
            r = prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", "--bootstrap-server",
                             cluster.bootstrap, *action, "--reassignment-json-file", str(f)],
                            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL, env=env)
            assert r.returncode == 0, r.stdout + r.stderr
            out[action[0]] = r.stdout
        assert "Successfully reassigned partitions" in out["--execute"], out
        assert [f"Reassignment of partition {topic}-{p} is completed." for p in range(2)] == [
            line for line in out["--verify"].splitlines() if line.startswith("Reassignment of partition")], out
        for p in range(2):
            assert zk_json(zk, f"/brokers/topics/{topic}")["partitions"][str(p)] == [4, 2, 3]  # type: ignore[index]
    finally:
        zk.stop()
        zk.close()
    read_back("zk-bootstrap-reader", cluster.bootstrap, tps, acked)


def test_verify_compares_replica_lists_in_order(cluster: ZkKafkaCluster, tmp_path: Path) -> None:
    """A partition on [4,2,3] for a file that wants [2,3,4] is not done: the first replica is the preferred leader.
    Through ZooKeeper mover-reassign prints Kafka 2.3's ERROR and failed lines; through the brokers exactly what Kafka
    3.7's kafka-reassign-partitions.sh prints for the same file on the same cluster."""
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "zkorder"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="zk-test")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [4, 2, 3]})])
    finally:
        admin.close()
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 3, 4]}]}))
    env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")}

    def mover_reassign(*args: str) -> subprocess.CompletedProcess[str]:
        return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args, "--verify",
                            "--reassignment-json-file", str(f)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, env=env)

    through_zk = mover_reassign("--zookeeper", cluster.connect)
    assert through_zk.returncode == 1, through_zk.stdout + through_zk.stderr
    assert through_zk.stdout.splitlines() == [
        "Status of partition reassignment: ",
        f"ERROR: Assigned replicas (4,2,3) don't match the list of replicas for reassignment (2,3,4) for partition "
        f"{topic}-0",
        f"Reassignment of partition {topic}-0 failed"]

    ours = mover_reassign("--bootstrap-server", cluster.bootstrap)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    home = kafka_home()
    assert home is not None
    tool_env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "KAFKA_OPTS", "KAFKA_DEBUG")}
    theirs = subprocess.run([str(home / "bin" / "kafka-reassign-partitions.sh"), "--bootstrap-server",
                             cluster.bootstrap, "--verify", "--reassignment-json-file", str(f)], capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL,
                            env={**tool_env, "KAFKA_HEAP_OPTS": TOOL_HEAP, "LOG_DIR": str(tmp_path / "tool-logs")})
    assert theirs.returncode == 0, theirs.stderr
    assert ours.stdout == theirs.stdout
    assert (f"There is no active reassignment of partition {topic}-0, but replica set is 4,2,3 rather than 2,3,4."
            in ours.stdout.splitlines())
