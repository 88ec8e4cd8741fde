"""mover-reassign --zookeeper (KIP-179's deprecated flag, for brokers before Kafka 2.4) against a moverd fleet
registered in a real ZooKeeper: the warning, --list from the znode, and what the flag refuses (steps between brokers
through ZooKeeper: tests/kafka/test_reassign_zookeeper.py, on Kafka 3.7 in ZooKeeper mode)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mover.storage.names import TopicPartition
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer


def mover_reassign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
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
