"""mover-reassign --zookeeper (KIP-179's deprecated flag, for brokers before Kafka 2.4) against a moverd fleet
registered in a real ZooKeeper: the warning, --list from the znode, Kafka 2.3's --verify lines, and what the flag
refuses (steps between brokers through ZooKeeper: tests/kafka/test_reassign_zookeeper.py, on Kafka 3.7 in ZooKeeper
mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mover.admin.client import Client
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.storage.names import TopicPartition
from mover.testing import prefork
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer


def mover_reassign(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_list_through_zookeeper(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    # --execute between brokers through ZooKeeper runs KIP-435 steps that need brokers which replicate (moverd
    # does not): tests/kafka/test_reassign_zookeeper.py runs it on Kafka 3.7 in ZooKeeper mode.
    connect = new_chroot(zookeeper)
    write_partition(tmp_path / "broker0" / "d1", TopicPartition("t", 0), 5)
    with moverd_cluster(tmp_path, connect, 2) as _, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t") == {"version": 1, "partitions": {"0": [0]}},
                 message="topic registered")
        listed = mover_reassign("--zookeeper", connect, "--list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stderr.startswith("Warning: --zookeeper is deprecated")
        assert listed.stdout == "No partition reassignments found.\n"


def test_zookeeper_refuses_what_needs_the_brokers(zookeeper: ZooKeeperServer) -> None:
    for action in ("--progress", "--cancel", "--generate"):
        r = mover_reassign("--zookeeper", zookeeper.connect_string, action)
        assert r.returncode == 2 and "needs --bootstrap-server" in r.stderr, r.stderr


def test_verify_through_zookeeper_prints_kafka_2_3s_lines(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Kafka 2.3's --verify (its verifyAssignment): replicas compared in order (the first is the preferred leader),
    a partition the cluster lacks read as no replicas, every reason printed while the statuses are found (partitions
    first), then the statuses; a replica its broker does not hold is blamed on an offline dir, as Kafka 2.3's
    AdminClient reports it."""
    connect = new_chroot(zookeeper)
    for b in (0, 1):
        write_partition(tmp_path / f"broker{b}" / "d1", TopicPartition("t", 0), 5)
    write_partition(tmp_path / "broker0" / "d1", TopicPartition("u", 0), 5)
    env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(tmp_path / "state")}
    with moverd_cluster(tmp_path, connect, 2) as brokers, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t") == {"version": 1, "partitions": {"0": [0, 1]}}
                 and read_json(zk, "/brokers/topics/u") == {"version": 1, "partitions": {"0": [0]}},
                 message="topics registered")
        d1 = str(brokers[1].dirs[0])

        def verify(partitions: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
            f = tmp_path / "r.json"
            f.write_text(json.dumps({"version": 1, "partitions": partitions}))
            return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", "--zookeeper", connect,
                                "--verify", "--reassignment-json-file", str(f)], capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL, env=env)

        done = verify([{"topic": "t", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", d1]}])
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines() == ["Status of partition reassignment: ",
                                            "Reassignment of partition t-0 completed successfully",
                                            "Reassignment of replica t-0-1 completed successfully"]

        wrong = verify([{"topic": "t", "partition": 0, "replicas": [1, 0], "log_dirs": [d1, "any"]},
                        {"topic": "u", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", d1]},
                        {"topic": "t", "partition": 5, "replicas": [0]}])
        assert wrong.returncode == 1, wrong.stdout + wrong.stderr
        lines = wrong.stdout.splitlines()
        assert lines[:8] == [
            "Status of partition reassignment: ",
            "ERROR: Assigned replicas (0,1) don't match the list of replicas for reassignment (1,0) for partition t-0",
            "ERROR: Assigned replicas (0) don't match the list of replicas for reassignment (0,1) for partition u-0",
            "ERROR: Assigned replicas () don't match the list of replicas for reassignment (0) for partition t-5",
            "Partition u-0 is not found in any live log dir on broker 1. There is likely offline log directory on "
            "the broker.",
            "Reassignment of partition t-0 failed",
            "Reassignment of partition u-0 failed",
            "Reassignment of partition t-5 failed"], wrong.stdout
        # Kafka's replicas come from a hash map: their order is its own.
        assert sorted(lines[8:]) == ["Reassignment of replica t-0-1 completed successfully",
                                     "Reassignment of replica u-0-1 failed"], wrong.stdout

        # A running mover-reassign request still moves u-0 to [0, 1]: Kafka's lines (its "failed" for the replica
        # not there yet), but in progress, not failed.
        # The request lives in the cluster (docs/cli.md, "Where the requests live"), alive while its heartbeat runs.
        with Client(brokers[0].bootstrap, timeout=10) as client, \
                ClusterRequestStore.open(client, tool="test") as running:
            running.claim([{"topic": "u", "partition": 0, "replicas": [0, 1]}])
            moving = verify([{"topic": "u", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", d1]}])
        assert moving.returncode == 3, moving.stdout + moving.stderr
        assert moving.stdout.splitlines() == [
            "Status of partition reassignment: ",
            "Partition u-0 is not found in any live log dir on broker 1. There is likely offline log directory on "
            "the broker.",
            "Reassignment of partition u-0 is still in progress",
            "Reassignment of replica u-0-1 failed"], moving.stdout
