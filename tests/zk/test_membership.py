"""Broker membership through ZooKeeper: Kafka's registration formats, the cluster id, topic assignments merged
across brokers, a taken broker id refused, a restart after kill -9 not blocked by its own stale registration."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mover.storage.names import TopicPartition
from mover.testing.moverd import Moverd
from mover.testing.ports import free_port
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import broker_props, moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer


def test_registration_in_kafka_format_and_chroot_created(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1"]
        data, stat = zk.get("/brokers/ids/1")
        assert stat.ephemeralOwner != 0
        reg = json.loads(data)
        host, port = brokers[1].host, brokers[1].port
        # Kafka 2.x's BrokerIdZNode version 4, key order included.
        assert list(reg) == ["listener_security_protocol_map", "endpoints", "jmx_port", "host", "timestamp",
                             "port", "version"]
        assert reg["endpoints"] == [f"PLAINTEXT://{host}:{port}"]
        assert (reg["host"], reg["port"], reg["version"], reg["jmx_port"]) == (host, port, 4, -1)
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert data.startswith(b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":[')
        # One cluster id, created by the first broker, adopted by the second and written to meta.properties.
        cluster = read_json(zk, "/cluster/id")
        assert set(cluster) == {"version", "id"} and cluster["version"] == "1"
        for b in brokers:
            meta = (b.dirs[0] / "meta.properties").read_text()
            assert f"cluster.id={cluster['id']}" in meta
        brokers[1].stop()
        wait_for(lambda: zk.get_children("/brokers/ids") == ["0"], message="broker 1's ephemeral registration to go")


def test_topics_merged_across_brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    for i, parts in enumerate([(0, 1), (1, 2)]):
        for p in parts:
            write_partition(tmp_path / f"broker{i}" / "d1", TopicPartition("shared", p), 1)
    with moverd_cluster(tmp_path, connect, 2), zk_client(connect) as zk:
        def assignment() -> object:
            value = read_json(zk, "/brokers/topics/shared")
            return value and value == {"version": 1, "partitions": {"0": [0], "1": [0, 1], "2": [1]}}
        wait_for(assignment, message="both brokers' partitions in /brokers/topics/shared")


def test_partitions_added_to_a_topic_reach_its_assignment_znode(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """CreateTopics, then CreatePartitions (kafka-topics.sh --alter --partitions): /brokers/topics/<t> lists the
    new partitions too, as a ZooKeeper-era tool reading the assignment expects."""
    from mover.testing.raw import RawClient
    from mover.wire.messages import CREATE_PARTITIONS, CREATE_TOPICS

    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1) as [d], zk_client(connect) as zk, RawClient(d.port) as c:
        created = c.call(CREATE_TOPICS, 4, {"topics": [{"name": "grown", "num_partitions": 1, "replication_factor": 1,
                                                         "assignments": [], "configs": []}],
                                            "timeout_ms": 60000, "validate_only": False})[1]
        assert created["topics"][0]["error_code"] == 0
        grown = c.call(CREATE_PARTITIONS, 3, {"topics": [{"name": "grown", "count": 3, "assignments": None}],
                                              "timeout_ms": 60000, "validate_only": False})[1]
        assert grown["results"][0]["error_code"] == 0
        wait_for(lambda: read_json(zk, "/brokers/topics/grown") == {
            "version": 1, "partitions": {"0": [0], "1": [0], "2": [0]}}, message="the three partitions in ZooKeeper")


def test_standalone_without_zookeeper(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        assert d.proc is not None and d.proc.poll() is None
        assert not (d.dirs[0] / "zookeeper-session.json").exists()


def test_broker_id_held_by_a_live_broker_is_refused(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1) as brokers, zk_client(connect) as zk:
        before = zk.get("/brokers/ids/0")
        twin = Moverd(tmp_path / "twin", props=broker_props(connect, 0))
        (tmp_path / "twin").mkdir()
        with pytest.raises(RuntimeError, match="exited with 1"):
            twin.start()
        assert "broker id 0 is registered in ZooKeeper by another live broker" in twin.log()
        assert zk.get("/brokers/ids/0") == before
        assert brokers[0].proc is not None and brokers[0].proc.poll() is None


def test_restart_after_kill_is_not_blocked_by_its_stale_registration(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    # A long session timeout: the stale znode certainly outlives the restart, as with Kafka's 18 s default.
    props = broker_props(connect, 0, **{"zookeeper.session.timeout.ms": 30000})
    d = Moverd(tmp_path, props=props).start()
    try:
        with zk_client(connect) as zk:
            old_owner = zk.get("/brokers/ids/0")[1].ephemeralOwner
            d.kill()
            t0 = time.monotonic()
            d.start()
            new_owner = zk.get("/brokers/ids/0")[1].ephemeralOwner
            assert new_owner != old_owner
            assert time.monotonic() - t0 < 30, "waited out the old session"
            assert "taking over the registration left by this broker's previous run" in d.log_file.read_text()
    finally:
        d.stop()


def test_restart_on_another_port_uses_the_recorded_session(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    d = Moverd(tmp_path, props=broker_props(connect, 0, **{"zookeeper.session.timeout.ms": 30000})).start()
    try:
        d.kill()
        d.props["listeners"] = "PLAINTEXT://127.0.0.1:0"  # a new port: only the recorded session id tells
        d.start()
        with zk_client(connect) as zk:
            assert read_json(zk, "/brokers/ids/0")["port"] == d.port
    finally:
        d.stop()


def test_log_dirs_of_another_cluster_are_refused(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 1):
        pass
    other = tmp_path / "other"
    other.mkdir()
    with Moverd(other):  # stand-alone: a cluster id of its own in meta.properties
        pass
    d = Moverd(other, props=broker_props(connect, 5))
    with pytest.raises(RuntimeError, match="exited with 1"):
        d.start()
    assert "does not match ZooKeeper's /cluster/id" in d.log()


def test_unreachable_zookeeper_or_bad_cluster_id_refuses_to_start(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    down = Moverd(tmp_path / "down", props=broker_props(f"127.0.0.1:{free_port()}", 0,
                                                         **{"zookeeper.connection.timeout.ms": 1000}))
    (tmp_path / "down").mkdir()
    with pytest.raises(RuntimeError, match="exited with 1"):
        down.start()
    assert "cannot reach ZooKeeper at 127.0.0.1:" in down.log()
    connect = new_chroot(zookeeper)
    with zk_client(connect) as zk:
        zk.create("/cluster/id", b"garbage", makepath=True)
    bad = Moverd(tmp_path / "bad", props=broker_props(connect, 0))
    (tmp_path / "bad").mkdir()
    with pytest.raises(RuntimeError, match="exited with 1"):
        bad.start()
    assert "cluster id: not JSON" in bad.log()
    assert "Traceback" not in bad.log()
