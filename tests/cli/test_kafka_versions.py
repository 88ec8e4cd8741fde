"""mover-log-dirs against brokers that answer as Apache Kafka 2.3, 2.4, 3.9 and 4.1 do (docs/cli.md).

Kafka 2.3 answers an ApiVersions request at a version it does not know with UNSUPPORTED_VERSION and an EMPTY
api_keys list; the client must retry in v0. It offers DescribeLogDirs v0-1 only (no total/usable bytes) and hangs up
on any other API at a version it does not offer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mover.admin.client import BrokerConnection, Client
from mover.config.broker import THROTTLE_KAFKA_KEY, THROTTLE_KEY
from mover.testing.broker_configs import another_brokers_id_refusals
from mover.testing.fake_kafka import KAFKA_2_3, VERSIONS, FakeCluster
from mover.testing.log_dirs_tool import cli, execute, reassignment_file, wait_verified
from mover.testing.raw import RawClient
from mover.wire import decode_response
from mover.wire.errors import ErrorCode
from mover.wire.messages import API_VERSIONS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS, INCREMENTAL_ALTER_CONFIGS


def two_broker_cluster(version_name: str) -> FakeCluster:
    cluster = FakeCluster(VERSIONS[version_name], brokers=2, dirs=["/d1", "/d2"])
    cluster.add_replica(0, "/d1", "t", 0, 1000)
    cluster.add_replica(1, "/d2", "t", 0, 1000)
    cluster.add_replica(1, "/d1", "t", 1, 300)
    return cluster


def test_kafka_2_3_answers_an_unknown_api_versions_version_with_an_empty_list() -> None:
    with two_broker_cluster("2.3") as cluster, RawClient(cluster.brokers[0].port) as raw:
        # Our codec decodes the v0 error body whatever version was asked; the 2.3 broker only knows 0-2.
        raw.send(raw.request_bytes(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}))
        frame = raw.recv_frame()
        assert frame is not None
        _, reply = decode_response(API_VERSIONS, 0, frame)
        assert (reply["error_code"], reply["api_keys"]) == (ErrorCode.UNSUPPORTED_VERSION, [])
        # Any other API at a version it does not offer: the connection is closed, no answer.
        raw.send(raw.request_bytes(DESCRIBE_LOG_DIRS, 2, {"topics": None}))
        assert raw.recv_frame() is None


def test_kafka_2_4_lists_its_own_api_versions_range() -> None:
    with two_broker_cluster("2.4") as cluster, RawClient(cluster.brokers[0].port) as raw:
        raw.send(raw.request_bytes(API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"}))
        frame = raw.recv_frame()
        assert frame is not None
        _, reply = decode_response(API_VERSIONS, 0, frame)
        assert reply["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert reply["api_keys"] == [{"api_key": API_VERSIONS.key, "min_version": 0, "max_version": 3}]


def test_client_retries_api_versions_in_v0_against_kafka_2_3() -> None:
    with FakeCluster(KAFKA_2_3) as cluster:
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port)
        try:
            assert conn.version_for(DESCRIBE_LOG_DIRS) == 1
            assert conn.api_versions[API_VERSIONS.key].hi == 2
        finally:
            conn.close()
        with Client(cluster.bootstrap) as client:
            assert client.brokers == {0: ("127.0.0.1", cluster.brokers[0].port)}


@pytest.mark.parametrize("version_name", sorted(VERSIONS))
def test_describe_against_each_kafka_version(version_name: str) -> None:
    with two_broker_cluster(version_name) as cluster:
        r = cli("--bootstrap-server", cluster.bootstrap, "--describe")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[1] == "Received log directory information from brokers 0,1"
        got = json.loads(lines[2])
        dirs = {(b["broker"], d["logDir"]): sorted((p["partition"], p["size"]) for p in d["partitions"])
                for b in got["brokers"] for d in b["logDirs"]}
        assert dirs == {(0, "/d1"): [("t-0", 1000)], (0, "/d2"): [],
                        (1, "/d1"): [("t-1", 300)], (1, "/d2"): [("t-0", 1000)]}


@pytest.mark.parametrize("version_name", ["2.3", "3.9"])
def test_execute_and_verify_against_old_and_new_kafka(tmp_path: Path, version_name: str) -> None:
    cluster = two_broker_cluster(version_name)
    cluster.move_step = 100  # the copy of t-1 (300 bytes) takes a few DescribeLogDirs
    with cluster:
        path = reassignment_file(tmp_path / "r.json", {("t", 1): "/d2"}, broker=1)
        assert execute(cluster.bootstrap, path) == {("t", 1): "/d1"}
        verified = wait_verified(cluster.bootstrap, path)
        assert verified.in_progress_polls >= 1
        assert cluster.brokers[1].where("t", 1) == "/d2"


@pytest.mark.parametrize("version_name", ["3.9", "4.1"])
def test_throttle_on_kafka_3x_lands_on_kafkas_key_though_unknown_keys_are_accepted(version_name: str) -> None:
    """Kafka 3.x keeps any broker key it is sent (docs/kafka-compat.md), so a refusal cannot be what picks the key.
    The same against a real Kafka 3.7: tests/kafka/test_log_dirs_cli.py."""
    with two_broker_cluster(version_name) as cluster, Client(cluster.bootstrap) as client:
        broker = cluster.brokers[0]
        # The fake answers as 3.7.0 did: KIP-113's key is taken, kept, and described sensitive with no value.
        reply = client.connection(0).call(INCREMENTAL_ALTER_CONFIGS, {"resources": [{
            "resource_type": 4, "resource_name": "0",
            "configs": [{"name": THROTTLE_KEY, "config_operation": 0, "value": "500000"}]}]})
        assert reply["responses"][0]["error_code"] == ErrorCode.NONE
        described = client.connection(0).call(DESCRIBE_CONFIGS, {"resources": [{
            "resource_type": 4, "resource_name": "0", "configuration_keys": [THROTTLE_KEY, THROTTLE_KAFKA_KEY]}]})
        assert [(e["name"], e["value"], e["is_sensitive"], e["config_source"])
                for e in described["results"][0]["configs"]] == [(THROTTLE_KEY, None, True, 2)]

        r = cli("--bootstrap-server", cluster.bootstrap, "--throttle", "4000000", "--broker-list", "0")
        assert r.returncode == 0, r.stderr
        assert broker.configs == {THROTTLE_KAFKA_KEY: "4000000"}  # Kafka's key set, the stray gone
        assert cli("--bootstrap-server", cluster.bootstrap, "--remove-throttle").returncode == 0
        assert broker.configs == {} and cluster.brokers[1].configs == {}


@pytest.mark.parametrize("version_name", sorted(VERSIONS))
def test_a_broker_refuses_another_brokers_config(version_name: str) -> None:
    """A broker answers for its own configs only, on every version: DescribeConfigs and IncrementalAlterConfigs of
    another broker's id are INVALID_REQUEST "Unexpected broker id" (docs/kafka-compat.md), which is why the tools
    send each broker's configs to that broker alone (mover/admin/reassign/kip455.py alter_configs). The real broker:
    tests/kafka/test_log_dirs_cli.py."""
    with two_broker_cluster(version_name) as cluster, Client(cluster.bootstrap) as client:
        got = another_brokers_id_refusals(client, asked=0, other=1)
        assert got == [(ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 1")] * 2
        assert cluster.brokers[0].configs == {} and cluster.brokers[1].configs == {}  # stored nowhere
