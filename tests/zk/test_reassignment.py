"""Moves asked through /admin/reassign_partitions and over the wire on a fleet of moverd brokers: KIP-179 request
ids and status, finished entries removed by the elected broker, status trimmed, errors visible in the status,
and kafka-reassign-partitions.sh's ZooKeeper-era sequence written byte for byte as Kafka 2.x writes it."""

from __future__ import annotations

from pathlib import Path

from mover.storage.names import TopicPartition
from mover.testing.log_dirs_tool import cli, replica_dirs
from mover.testing.raw import raw_call
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import (
    REASSIGN,
    alter_dir_reply,
    moverd_cluster,
    new_chroot,
    read_json,
    reassignment_entry,
    replica_state,
    statuses,
    write_reassignment,
    zk_client,
)
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.messages import DESCRIBE_CONFIGS

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
DEEP = b'{"version":1,"partitions":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


def _seed(tmp_path: Path, n: int, topic: str = "t", batches: int = 20) -> None:
    for i in range(n):
        write_partition(tmp_path / f"broker{i}" / "d1", TopicPartition(topic, i), batches)


def test_moves_through_the_znode_on_three_brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    _seed(tmp_path, 3)
    with moverd_cluster(tmp_path, connect, 3) as brokers, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t"), message="topic registered")
        write_reassignment(zk, [reassignment_entry("t", i, [i], [str(brokers[i].dirs[1])]) for i in range(3)])
        wait_for(lambda: not zk.exists(REASSIGN), message="the elected broker to delete the emptied znode")
        for i, b in enumerate(brokers):
            assert replica_dirs(b.bootstrap, "t", i) == {str(b.dirs[1]): False}
            state = replica_state(zk, i, "t", i)
            assert state is not None and state["state"] == "completed", state
            assert state["bytes_copied"] == state["bytes_total"] > 0
        (request,) = statuses(zk).values()
        assert request["request"]["origin"] == "reassign_partitions"
        assert sorted(request["brokers"]) == [0, 1, 2]


def test_wire_requests_get_cluster_wide_monotonic_ids(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    _seed(tmp_path, 2)
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        first = alter_dir_reply(brokers[0], "t", 0, str(brokers[0].dirs[1]))
        assert first["results"][0]["partitions"][0]["error_code"] == 0
        second = alter_dir_reply(brokers[1], "t", 1, str(brokers[1].dirs[1]))
        assert second["request_id"] > first["request_id"] > 0
        # The ids are the status tree's: each broker reports under the id its client got.
        for b, reply in ((0, first), (1, second)):
            wait_for(lambda b=b, reply=reply: (replica_state(zk, b, "t", b) or {}).get("state") == "completed",
                     message="completion reported")
            assert replica_state(zk, b, "t", b)["request_id"] == reply["request_id"]
        # --progress (DescribeReplicaMoves) knows the request by the id the client got.
        progress = cli("--bootstrap-server", brokers[1].bootstrap, "--progress", "--request",
                       str(second["request_id"]))
        assert progress.returncode == 0, progress.stdout + progress.stderr
        brokers[0].restart()
        third = alter_dir_reply(brokers[0], "t", 0, str(brokers[0].dirs[0]))
        assert third["request_id"] > second["request_id"], "ids survive restarts"


def test_errors_are_in_the_status(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    _seed(tmp_path, 1)
    with moverd_cluster(tmp_path, connect, 1) as (b,), zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t"), message="topic registered")
        write_reassignment(zk, [
            reassignment_entry("t", 0, [0], ["/no/such/dir"]),
            reassignment_entry("absent", 0, [0], [str(b.dirs[1])]),
            reassignment_entry("t", 1, [0], ["relative/dir"]),
            {"topic": "t", "partition": "zero", "replicas": [0]},
        ])
        wait_for(lambda: not zk.exists(REASSIGN), message="every entry finished or rejected")
        bad_dir = replica_state(zk, 0, "t", 0)
        assert (bad_dir["state"], bad_dir["error"], bad_dir["error_code"]) == ("failed", "LOG_DIR_NOT_FOUND", 57)
        assert "/no/such/dir" in bad_dir["error_message"]
        absent = replica_state(zk, 0, "absent", 0)
        assert (absent["state"], absent["error"]) == ("failed", "UNKNOWN_TOPIC_OR_PARTITION")
        errors = [e for s in statuses(zk).values() for e in s["request"].get("errors", [])]
        assert any("relative/dir" in e["error"] for e in errors), errors
        assert any('"partition" is not a non-negative integer' in e["error"] for e in errors), errors
        # Not JSON at all: recorded, removed, and the daemon carries on.
        zk.create(REASSIGN, b"{not json", makepath=True)
        wait_for(lambda: not zk.exists(REASSIGN), message="the unreadable znode removed")
        errors = [e for s in statuses(zk).values() for e in s["request"].get("errors", [])]
        assert any(e["entry"] == "{not json" and "not JSON" in e["error"] for e in errors), errors
        # Nested 200,000 deep (Python's parser would recurse past its limit): malformed like the rest, recorded,
        # removed, one log line, no traceback.
        zk.create(REASSIGN, DEEP)
        wait_for(lambda: not zk.exists(REASSIGN), message="the deeply nested znode removed")
        errors = [e for s in statuses(zk).values() for e in s["request"].get("errors", [])]
        assert any("nested deeper than" in e["error"] for e in errors), errors
        log = b.log_file.read_text(errors="replace")
        assert "Traceback" not in log and "RecursionError" not in log
        assert len([line for line in log.splitlines() if "nested deeper than" in line]) == 1, log[-3000:]
        assert b.proc is not None and b.proc.poll() is None
        assert replica_dirs(b.bootstrap, "t", 0) == {str(b.dirs[0]): False}


def test_status_trimmed_after_retention(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    _seed(tmp_path, 1)
    with moverd_cluster(tmp_path, connect, 1, **{"reassign.partitions.status.min.retention.ms": 1500}) as (b,), \
            zk_client(connect) as zk:
        reply = alter_dir_reply(b, "t", 0, str(b.dirs[1]))
        path = f"/admin/reassign_partitions_status/{reply['request_id']}"
        wait_for(lambda: (read_json(zk, path) or {}).get("end_ms", -1) != -1, message="the request marked ended")
        wait_for(lambda: not zk.exists(path), message="the status trimmed after the retention")
        assert zk.exists("/admin/reassign_partitions_status"), "the id counter stays"


def test_kafka_reassign_partitions_tool_sequence(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """kafka-reassign-partitions.sh 2.x --zookeeper --bootstrap-server --execute with log_dirs and
    --replica-alter-log-dirs-throttle, then --verify: its znode writes, byte for byte."""
    connect = new_chroot(zookeeper)
    _seed(tmp_path, 2, topic="big")
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/big") == {"version": 1, "partitions": {"0": [0], "1": [1]}},
                 message="topic registered")
        dest = str(brokers[0].dirs[1])
        # 1. maybeThrottle: adminZkClient.changeBrokerConfig for every broker of the reassignment.
        zk.create("/config/brokers/0", b'{"version":1,"config":{"' + THROTTLE.encode() + b'":"52428800"}}',
                  makepath=True)
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/0"}',
                  sequence=True, makepath=True)
        # 2. AlterReplicaLogDirs to the broker (through the AdminClient).
        assert alter_dir_reply(brokers[0], "big", 0, dest)["results"][0]["partitions"][0]["error_code"] == 0
        # 3. zkClient.createPartitionReassignment: the replicas only, no log_dirs.
        zk.create(REASSIGN, b'{"version":1,"partitions":[{"topic":"big","partition":0,"replicas":[0]}]}',
                  makepath=True)

        def throttle() -> str:
            body = raw_call(brokers[0].port, DESCRIBE_CONFIGS, 4, {"resources": [
                {"resource_type": 4, "resource_name": "0", "configuration_keys": [THROTTLE]}],
                "include_synonyms": False})
            return body["results"][0]["configs"][0]["value"]

        wait_for(lambda: throttle() == "52428800", message="the throttle from /config/brokers/0 applied")
        # --verify: the znode gone and /brokers/topics matching means "completed successfully".
        wait_for(lambda: not zk.exists(REASSIGN), message="the reassignment finished and removed")
        assert read_json(zk, "/brokers/topics/big")["partitions"]["0"] == [0]
        assert replica_dirs(brokers[0].bootstrap, "big", 0) == {dest: False}
        # --verify then removes the throttle it set.
        zk.set("/config/brokers/0", b'{"version":1,"config":{}}')
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/0"}', sequence=True)
        wait_for(lambda: throttle() == str(2**63 - 1), message="the throttle removed")
