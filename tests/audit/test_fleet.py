"""Fleet sources: the fleet file, Cruise Control's capacity file, and ZooKeeper discovery against a real ZooKeeper
holding /brokers/ids in Kafka's format. Every bad input is one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from mover.audit.cli import main
from mover.audit.fleet import CAPACITY_UNIT_BYTES, ClusterSource, discover, load_capacity, load_fleet
from mover.testing.fake_kafka import KAFKA_2_3, FakeCluster
from mover.testing.zookeeper import ZooKeeperServer

# Cruise Control's own example (config/capacityJBOD.json): the -1 default and two brokers that override it.
CC_CAPACITY = {"brokerCapacities": [
    {"brokerId": "-1", "capacity": {"DISK": {"/d1": "100000", "/d2": "50000"}, "CPU": "100", "NW_IN": "10000",
                                    "NW_OUT": "10000"}, "doc": "default"},
    {"brokerId": "0", "capacity": {"DISK": {"/d1": "500000"}, "CPU": "100"}, "doc": "broker 0"},
]}


def registration(port: int, *, legacy: bool = False) -> bytes:
    """/brokers/ids/<id> as a ZooKeeper-mode Kafka broker writes it (version 4, endpoints and protocol map)."""
    if legacy:
        return json.dumps({"jmx_port": -1, "host": "127.0.0.1", "timestamp": "1", "port": port,
                           "version": 1}).encode()
    return json.dumps({"listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "SSL": "SSL"},
                       "endpoints": ["SSL://127.0.0.1:1", f"INTERNAL://127.0.0.1:{port}"], "jmx_port": -1,
                       "host": "127.0.0.1", "timestamp": "1700000000000", "port": 1, "version": 4}).encode()


@pytest.fixture
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def collect(*args: str) -> int:
    return main(["collect", "--local", *args])


def test_capacity_file_in_cruise_controls_format(tmp_path: Path) -> None:
    path = tmp_path / "capacityJBOD.json"
    path.write_text(json.dumps(CC_CAPACITY))
    cap = load_capacity(path)
    assert cap.for_broker(0) == {"/d1": 500000 * CAPACITY_UNIT_BYTES}
    assert cap.for_broker(7) == {"/d1": 100000 * CAPACITY_UNIT_BYTES, "/d2": 50000 * CAPACITY_UNIT_BYTES}


def test_fleet_file_with_capacity_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "cap.json").write_text(json.dumps(CC_CAPACITY))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[clusters.east]\nbootstrap = ["h1:9092", "h2:9092"]\ncapacity = "cap.json"\n\n'
                     '[clusters.west]\nzookeeper = "z1:2181,z2:2181/kafka"\n')
    east, west = load_fleet(fleet)
    assert (east.name, east.bootstrap, east.zookeeper) == ("east", "h1:9092,h2:9092", None)
    assert east.capacity is not None and east.capacity.for_broker(0) == {"/d1": 500000 * CAPACITY_UNIT_BYTES}
    assert (west.name, west.bootstrap, west.zookeeper, west.capacity) == ("west", None, "z1:2181,z2:2181/kafka", None)


@pytest.mark.parametrize(("text", "says"), [
    ("[clusters.a\nbootstrap = 'h:1'", "is not valid TOML"),
    ("title = 'x'", "unknown top-level key 'title'"),
    ("[clusters]", "names no cluster"),
    ("[clusters.a]\nbootstrap = 'h:1'\nzookeeper = 'z:2'", "give exactly one of bootstrap, zookeeper"),
    ("[clusters.a]\ncapacity = 'c.json'", "give exactly one of bootstrap, zookeeper"),
    ("[clusters.a]\nbootstrap = 'h:1'\nbootsrap = 'h:2'", "unknown key 'bootsrap'"),
    ("[clusters.a]\nbootstrap = 'nohostport'", "expected HOST:PORT"),
    ("[clusters.a]\nbootstrap = 9092", "bootstrap must be"),
    ("[clusters.a]\nzookeeper = 'z:2181//kafka'", "empty path element"),
    ("[clusters.a]\nbootstrap = 'h:1'\ncapacity = 'missing.json'", "cannot read capacity file"),
    ("[clusters.a]\nbootstrap = 'h:1'\nx = " + "[" * 100_000, "is not valid TOML: nested too deeply"),
])
def test_bad_fleet_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                               says: str) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    assert collect("--fleet", str(fleet), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("doc", "says"), [
    ("not json", "is not JSON"),
    ("[" * 100_000, "is not JSON: nested deeper than 512 levels"),
    (json.dumps({"brokers": []}), "Cruise Control's format"),
    (json.dumps({"brokerCapacities": [{"brokerId": "x", "capacity": {"DISK": {}}}]}), "is not a broker id"),
    (json.dumps({"brokerCapacities": [{"brokerId": "1", "capacity": {"DISK": "100"}}]}), "DISK must map"),
    (json.dumps({"brokerCapacities": [{"brokerId": "1", "capacity": {"DISK": {"/d": "lots"}}}]}), "not a number"),
])
def test_bad_capacity_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: str, says: str) -> None:
    (tmp_path / "cap.json").write_text(doc)
    assert collect("--bootstrap-server", "127.0.0.1:1", "--capacity", str(tmp_path / "cap.json"),
                   "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err


def test_unknown_cluster_name_and_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text("[clusters.east]\nbootstrap = 'h:1'\n[clusters.west]\nbootstrap = 'h:2'\n")
    assert collect("--fleet", str(fleet), "--cluster", "north", "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("cluster north is not in " + str(fleet) + " (clusters: east, west)"), err
    assert collect("--out", str(tmp_path / "o")) == 2
    assert "give exactly one of --fleet, --bootstrap-server, --zookeeper" in capsys.readouterr().err
    assert collect("--fleet", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")) == 2
    assert "cannot read fleet file" in capsys.readouterr().err


def test_zookeeper_discovery_reads_kafkas_registrations(zk: KazooClient) -> None:
    cluster = FakeCluster(KAFKA_2_3, brokers=[1, 2, 3])
    cluster.add_replica(1, "/d1", "t", 0, 10)
    cluster.add_replica(2, "/d2", "t", 0, 10)
    with cluster:
        ports = {i: b.port for i, b in cluster.brokers.items()}
        zk.create("/kafka-a/brokers/ids/1", registration(ports[1]), makepath=True)
        zk.create("/kafka-a/brokers/ids/2", registration(ports[2], legacy=True), makepath=True)
        # Broker 3 is registered but down: ZooKeeper still names it, so it is asked (and recorded as failed).
        zk.create("/kafka-a/brokers/ids/3", registration(ports[3]), makepath=True)
        cluster.brokers[3].stop()
        view = discover(ClusterSource("a", zookeeper=f"{zk.hosts[0][0]}:{zk.hosts[0][1]}/kafka-a"), timeout=5)
        assert view.error is None
        assert [(b.broker, b.port) for b in view.brokers] == [(1, ports[1]), (2, ports[2]), (3, ports[3])]
        assert view.partitions == [("t", 0, [1, 2])]


def test_zookeeper_assignment_wins_over_metadata_and_a_bad_one_is_recorded(zk: KazooClient) -> None:
    """/brokers/topics is the controller's source of what Metadata serves: where both list a partition, its order
    is ZooKeeper's; a partition only Metadata knows stays; a topic znode that is not Kafka's JSON fails the cluster
    with a line naming it, and the rest of the fleet goes on (discover returns, never raises)."""
    cluster = FakeCluster(KAFKA_2_3, brokers=[1, 2])
    cluster.add_replica(1, "/d1", "t", 0, 10)
    cluster.add_replica(2, "/d2", "t", 0, 10)
    cluster.add_replica(1, "/d1", "u", 0, 10)
    with cluster:
        for i, b in cluster.brokers.items():
            zk.create(f"/kafka-t/brokers/ids/{i}", registration(b.port), makepath=True)
        zk.create("/kafka-t/brokers/topics/t", json.dumps({"version": 1, "partitions": {"0": [2, 1]}}).encode(),
                  makepath=True)
        connect = f"{zk.hosts[0][0]}:{zk.hosts[0][1]}/kafka-t"
        view = discover(ClusterSource("t", zookeeper=connect), timeout=5)
        assert view.error is None
        assert view.partitions == [("t", 0, [2, 1]), ("u", 0, [1])]
        zk.create("/kafka-t/brokers/topics/bad", b"not json")
        view = discover(ClusterSource("t", zookeeper=connect), timeout=5)
        assert view.brokers == [] and view.error is not None and "topic bad" in view.error


def test_zookeeper_without_a_cluster_is_recorded_not_fatal(zk: KazooClient, zookeeper: ZooKeeperServer) -> None:
    view = discover(ClusterSource("b", zookeeper=f"{zookeeper.connect_string}/nothing-here"), timeout=5)
    assert view.brokers == [] and view.error is not None and "no /brokers/ids" in view.error


def test_collect_through_zookeeper(zk: KazooClient, zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from mover.audit.snapshot import list_snapshots

    cluster = FakeCluster(KAFKA_2_3, brokers=[5, 6])
    cluster.add_replica(5, "/d1", "t", 0, 10)
    cluster.add_replica(6, "/d2", "t", 0, 10)
    with cluster:
        for i, b in cluster.brokers.items():
            zk.create(f"/kafka-c/brokers/ids/{i}", registration(b.port), makepath=True)
        assert collect("--zookeeper", f"{zookeeper.connect_string}/kafka-c", "--cluster", "zk-east",
                       "--out", str(tmp_path)) == 0
    [snap] = list_snapshots(tmp_path)
    replicas = pq.read_table(snap / "replicas").to_pylist()
    assert sorted((r["cluster"], r["broker"], r["log_dir"]) for r in replicas) == [("zk-east", 5, "/d1"),
                                                                                     ("zk-east", 6, "/d2")]
    assert pq.read_table(snap / "partitions").to_pylist() == [
        {"cluster": "zk-east", "topic": "t", "partition": 0, "replicas": [5, 6], "retention_bytes": None,
         "retention_ms": None}]
