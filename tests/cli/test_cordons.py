"""`mover-log-dirs --cordon / --uncordon` and the Cordoned column, against a real moverd and against brokers that
answer as Kafka 4.3 does (KIP-1066) and as 3.9 / 4.1 do (no cordons: refused in one line, nothing sent). The fake
4.3 is checked with kafka-python 3.0.12 as an independent client (DescribeLogDirs v5, the 39 for a move into a
cordoned dir, DescribeLogDirs v0 / AlterReplicaLogDirs v0 gone since 4.0)."""

from __future__ import annotations

from pathlib import Path

import kafka.errors as Errors
import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartitionReplica as TPR

from mover.testing.fake_kafka import KAFKA_4_3, VERSIONS, FakeCluster, KafkaVersion
from mover.testing.log_dirs_tool import cli, describe_json
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, METADATA

# kafka-python bootstraps with Metadata v13, which the fake cannot decode (our codec declares Metadata up to v12):
# for kafka-python the fake 4.3 offers v12, which kafka-python then uses. Every log-dir API stays 4.3's.
KAFKA_4_3_FOR_KAFKA_PYTHON = KafkaVersion("4.3", {**KAFKA_4_3.apis, METADATA.key: (0, 12)}, False)


def cluster_of(version: str | KafkaVersion) -> FakeCluster:
    cluster = FakeCluster(VERSIONS[version] if isinstance(version, str) else version, brokers=2, dirs=["/d1", "/d2"])
    cluster.add_replica(0, "/d1", "t", 0, 1000)
    cluster.add_replica(1, "/d2", "t", 0, 1000)
    cluster.add_replica(1, "/d1", "t", 1, 300)
    return cluster


def table_rows(bootstrap: str) -> dict[tuple[str, str], str]:
    """(broker, log dir) -> the Cordoned column of --describe --output table."""
    r = cli("--bootstrap-server", bootstrap, "--describe", "--output", "table")
    assert r.returncode == 0, r.stderr
    rows: list[list[str]] = []
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) > 3 and cells[0].isdigit():
            rows.append(cells)
        elif len(cells) > 3 and rows and not cells[0] and cells[1]:
            rows[-1][1] += cells[1]  # the table folds a long log dir path onto the next line
    return {(cells[0], cells[1]): cells[3] for cells in rows}


def test_cordon_a_moverd_dir_and_lift_it(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        d1, d2 = map(str, d.dirs)
        assert table_rows(d.bootstrap) == {("0", d1): "no", ("0", d2): "no"}
        r = cli("--bootstrap-server", d.bootstrap, "--cordon", d2, "--broker-list", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"Cordoned {d2} on broker 0; its cordoned log dirs: {d2}\n"
        assert table_rows(d.bootstrap) == {("0", d1): "no", ("0", d2): "yes"}
        # The JSON stays kafka-log-dirs.sh's: Kafka 4.3's tool prints no cordon field.
        (broker,) = describe_json(d.bootstrap)["brokers"]
        assert all(set(x) == {"logDir", "error", "partitions"} for x in broker["logDirs"])
        r = cli("--bootstrap-server", d.bootstrap, "--cordon", "*", "--broker-list", "0")
        assert r.stdout == f"Cordoned * on broker 0; its cordoned log dirs: {d1},{d2}\n", r.stderr
        r = cli("--bootstrap-server", d.bootstrap, "--uncordon", d1, "--broker-list", "0")
        assert r.stdout == f"Uncordoned {d1} on broker 0; its cordoned log dirs: {d2}\n", r.stderr
        # Bad input: one line, non-zero, nothing changed.
        r = cli("--bootstrap-server", d.bootstrap, "--cordon", "/not/here", "--broker-list", "0")
        assert r.returncode != 0 and r.stdout == ""
        assert r.stderr.strip().count("\n") == 0 and "/not/here is not a log dir of broker 0" in r.stderr
        r = cli("--bootstrap-server", d.bootstrap, "--cordon", d1)
        assert r.returncode == 2 and "--cordon needs --broker-list" in r.stderr
        assert table_rows(d.bootstrap) == {("0", d1): "no", ("0", d2): "yes"}


def test_cordon_against_kafka_4_3() -> None:
    with cluster_of(KAFKA_4_3_FOR_KAFKA_PYTHON) as cluster:
        r = cli("--bootstrap-server", cluster.bootstrap, "--cordon", "/d2", "--broker-list", "0,1")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["Cordoned /d2 on broker 0; its cordoned log dirs: /d2",
                                         "Cordoned /d2 on broker 1; its cordoned log dirs: /d2"]
        assert [b.configs for b in cluster.brokers.values()] == [{"cordoned.log.dirs": "/d2"}] * 2
        assert table_rows(cluster.bootstrap) == {("0", "/d1"): "no", ("0", "/d2"): "yes",
                                                 ("1", "/d1"): "no", ("1", "/d2"): "yes"}
        # kafka-python (DescribeLogDirs up to v5, AlterReplicaLogDirs up to v2) reads the fake as a 4.3 broker.
        a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
        try:
            flags = {(b["broker"], r["log_dir"]): r["is_cordoned"] for b in a.describe_log_dirs()
                     for r in b["log_dirs"]}
            assert flags == {(0, "/d1"): False, (0, "/d2"): True, (1, "/d1"): False, (1, "/d2"): True}
            # 39 into a cordoned dir: t-1 on broker 1 into /d2, and (Kafka's way) t-0 "into" the /d2 it is in.
            assert a.alter_replica_log_dirs({TPR("t", 1, 1): "/d2", TPR("t", 0, 1): "/d2"}) == {
                TPR("t", 1, 1): Errors.InvalidReplicationAssignmentError,
                TPR("t", 0, 1): Errors.InvalidReplicationAssignmentError}
        finally:
            a.close()
        r = cli("--bootstrap-server", cluster.bootstrap, "--uncordon", "/d2", "--broker-list", "1")
        assert r.stdout == "Uncordoned /d2 on broker 1; its cordoned log dirs: none\n", r.stderr
        # KIP-896 (4.0): v0 of both log-dir APIs is gone; the broker hangs up as for any version it does not offer.
        for api in (DESCRIBE_LOG_DIRS, ALTER_REPLICA_LOG_DIRS):
            assert not KAFKA_4_3.offers(api.key, 0)
            with RawClient(cluster.brokers[0].port) as raw:
                raw.send(raw.request_bytes(api, 0, {"topics": None} if api is DESCRIBE_LOG_DIRS else {"dirs": []}))
                assert raw.recv_frame() is None


@pytest.mark.parametrize("version", ["3.9", "4.1"])
def test_cordon_refused_in_one_line_without_kip_1066(version: str) -> None:
    with cluster_of(version) as cluster:
        r = cli("--bootstrap-server", cluster.bootstrap, "--cordon", "/d2", "--broker-list", "0,1")
        assert r.returncode != 0 and r.stdout == ""
        assert r.stderr.strip() == ("mover-log-dirs: error: broker 0 does not support cordoned log dirs (KIP-1066 "
                                    "needs Kafka 4.3+ or moverd; its DescribeLogDirs stops at v4)")
        assert all(not b.config_history for b in cluster.brokers.values())  # nothing was sent
        assert set(table_rows(cluster.bootstrap).values()) == {"-"}
