"""mover-reassign --zookeeper (KIP-179's deprecated flag, for brokers before Kafka 2.4) against a moverd fleet
registered in a real ZooKeeper: the warning, a reassignment between brokers written to /admin/reassign_partitions
all at once (no steps without KIP-455), --list from the znode, and what the flag refuses."""

from __future__ import annotations

import json
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


def test_execute_between_brokers_and_list_through_zookeeper(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    connect = new_chroot(zookeeper)
    write_partition(tmp_path / "broker0" / "d1", TopicPartition("t", 0), 5)
    with moverd_cluster(tmp_path, connect, 2) as _, zk_client(connect) as zk:
        wait_for(lambda: read_json(zk, "/brokers/topics/t") == {"version": 1, "partitions": {"0": [0]}},
                 message="topic registered")
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}))
        r = mover_reassign("--zookeeper", connect, "--execute", "--reassignment-json-file", str(plan))
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stderr.startswith("Warning: --zookeeper is deprecated") and "without steps" in r.stderr
        assert '"replicas":[0]' in r.stdout  # the rollback block: where it was
        assert "Successfully started reassignment of partitions." in r.stdout
        listed = mover_reassign("--zookeeper", connect, "--list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.startswith(("Current partition reassignments:", "No partition reassignments found."))


def test_zookeeper_refuses_what_needs_the_brokers(zookeeper: ZooKeeperServer) -> None:
    for action in ("--progress", "--cancel", "--generate"):
        r = mover_reassign("--zookeeper", zookeeper.connect_string, action)
        assert r.returncode == 2 and "needs --bootstrap-server" in r.stderr, r.stderr
    # The step engine's options: not silently dropped when ZooKeeper starts everything at once.
    for option in (["--throttle", "1000"], ["--max-partition-movements", "2"], ["--limits", "l.json"]):
        r = mover_reassign("--zookeeper", zookeeper.connect_string, "--execute", "--reassignment-json-file", "f.json",
                           *option)
        assert r.returncode == 2 and f"{option[0]} needs --bootstrap-server" in r.stderr, r.stderr
