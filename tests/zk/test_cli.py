"""mover-log-dirs --zookeeper against a moverd fleet: brokers found in /brokers/ids, --execute and --move write the
reassignment znode, --verify reads it; KIP-179's rules for the deprecated flag."""

from __future__ import annotations

import json
from pathlib import Path

from mover.storage.names import TopicPartition
from mover.testing.log_dirs_tool import cli, replica_dirs
from mover.testing.moverd import Moverd
from mover.testing.ports import free_ports
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import broker_props, moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer

WARNING = "Warning: --zookeeper is deprecated"
SERVER_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
CLIENT_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
               'password="alice-secret";')


def test_describe_execute_verify_move_through_zookeeper(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    for i in range(2):
        write_partition(tmp_path / f"broker{i}" / "d1", TopicPartition("t", i), 5)
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t") == {"version": 1, "partitions": {"0": [0], "1": [1]}},
                 message="topic registered by both brokers")
        r = cli("--zookeeper", connect, "--describe")
        assert r.returncode == 0, r.stderr
        assert r.stderr.startswith(WARNING)
        described = json.loads(r.stdout.splitlines()[2])
        assert [b["broker"] for b in described["brokers"]] == [0, 1]

        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": i, "replicas": [i], "log_dirs": [str(brokers[i].dirs[1])]} for i in range(2)]}))
        r = cli("--zookeeper", connect, "--execute", "--reassignment-json-file", str(plan),
                "--replica-alter-log-dirs-throttle", "50000000")
        assert r.returncode == 0, r.stderr
        assert "Successfully started reassignment of partitions." in r.stdout
        assert read_json(zk, "/config/brokers/1") == {
            "version": 1, "config": {"replica.alter.log.dirs.io.max.bytes.per.second": "50000000"}}

        def verified() -> bool:
            v = cli("--zookeeper", connect, "--verify", "--reassignment-json-file", str(plan))
            assert v.returncode in (0, 3), v.stdout + v.stderr
            return v.returncode == 0 and "Throttle was removed." in v.stdout

        wait_for(verified, message="--verify to report completion")
        assert not zk.exists("/admin/reassign_partitions")
        for i, b in enumerate(brokers):
            assert replica_dirs(b.bootstrap, "t", i) == {str(b.dirs[1]): False}

        back = tmp_path / "back.json"
        back.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 1, "log_dir": str(brokers[1].dirs[0])}]}))
        r = cli("--zookeeper", connect, "--move", "--broker", "1", "--assignment", str(back))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: replica_dirs(brokers[1].bootstrap, "t", 1) == {str(brokers[1].dirs[0]): False},
                 message="the --move carried out through the znode")


def test_deprecated_flag_rules(zookeeper: ZooKeeperServer) -> None:
    both = cli("--zookeeper", zookeeper.connect_string, "--bootstrap-server", "127.0.0.1:1", "--describe")
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1
    assert "cannot be used together" in both.stderr
    progress = cli("--zookeeper", zookeeper.connect_string, "--progress")
    assert progress.returncode == 2 and "--progress needs --bootstrap-server" in progress.stderr
    empty = cli("--zookeeper", new_chroot(zookeeper), "--describe")
    assert empty.returncode == 1
    assert empty.stderr.splitlines()[0].startswith(WARNING)
    assert "no broker is registered in ZooKeeper" in empty.stderr


def test_describe_through_zookeeper_over_a_sasl_listener(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """A moverd registers its custom listener CLIENT with its protocol (SASL_PLAINTEXT), and --zookeeper with a SASL
    client config connects to that endpoint, not to the PLAINTEXT one."""
    connect = new_chroot(zookeeper)
    plain_port, client_port = free_ports(2)
    d = Moverd(tmp_path, props=broker_props(
        connect, 0, listeners=f"PLAINTEXT://127.0.0.1:{plain_port},CLIENT://127.0.0.1:{client_port}",
        **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
           "listener.name.client.sasl.enabled.mechanisms": "PLAIN",
           "listener.name.client.plain.sasl.jaas.config": SERVER_JAAS}))
    sasl = tmp_path / "sasl.properties"
    sasl.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={CLIENT_JAAS}\n")
    tls = tmp_path / "ssl.properties"
    tls.write_text("security.protocol=SSL\n")
    try:
        d.start()
        with zk_client(connect) as zk:
            assert read_json(zk, "/brokers/ids/0")["listener_security_protocol_map"] == {
                "PLAINTEXT": "PLAINTEXT", "CLIENT": "SASL_PLAINTEXT"}
        r = cli("--zookeeper", connect, "--command-config", str(sasl), "--describe")
        assert r.returncode == 0, r.stderr
        [broker] = json.loads(r.stdout.splitlines()[2])["brokers"]
        assert broker["broker"] == 0 and len(broker["logDirs"]) == 2
        refused = cli("--zookeeper", connect, "--command-config", str(tls), "--describe")
        assert refused.returncode == 1
        [warning, line] = refused.stderr.splitlines()
        assert warning.startswith(WARNING)
        assert line.endswith("broker 0 has no SSL endpoint in its registration (it offers PLAINTEXT, SASL_PLAINTEXT)")
    finally:
        if d.proc is not None:
            d.stop()
