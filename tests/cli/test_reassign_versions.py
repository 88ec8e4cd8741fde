"""mover-reassign --bootstrap-server against brokers that answer as Apache Kafka 2.4, 3.9 and 4.1 do (the fakes of
mover/testing/fake_kafka/; the real Kafka 3.7, KRaft and ZooKeeper mode: tests/kafka/).

Kafka 2.4's fake runs in ZooKeeper mode with broker 3 as its controller: brokers 1 and 2 answer KIP-455's requests
and ElectLeaders with NOT_CONTROLLER, so the run passes only by sending them where Metadata's controller_id says.
The KRaft fakes answer them on any broker, and Metadata names a random live one. Each run moves two partitions from
[1, 2] to [2, 3] in steps under a throttle, verifies, and leaves no throttle behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.admin.reassign.replication_throttle import BROKER_KEYS, TOPIC_KEYS
from mover.testing.fake_kafka import VERSIONS, FakeCluster

TARGET = [2, 3]


@pytest.mark.parametrize("version_name", ["2.4", "3.9", "4.1"])
def test_steps_and_verify_against_each_kafka_version(version_name: str, tmp_path: Path,
                                                     reassign_cli: Callable[..., Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    cluster = FakeCluster(VERSIONS[version_name], brokers=[1, 2, 3], dirs=["/d1", "/d2"])
    cluster.controller = 3
    for p in range(2):
        for b in (1, 2):
            cluster.add_replica(b, "/d1", "t", p, 1000)
    plan = tmp_path / "r.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": p, "replicas": TARGET} for p in range(2)]}))
    with cluster:
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file",
                                     str(plan), "--throttle", "1000000", "--poll-interval", "0.05"])
        assert rc == 0, out + err
        assert "Successfully reassigned partitions" in out, out
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file",
                                     str(plan)])
        assert rc == 0, out + err
        assert [line for line in out.splitlines() if line.startswith("Reassignment of partition")] == [
            f"Reassignment of partition t-{p} is completed." for p in range(2)], out
    assert {tp: replicas for tp, replicas in cluster.assignment.items()} == {("t", 0): TARGET, ("t", 1): TARGET}
    assert {cluster.leaders.get(("t", p)) for p in range(2)} == {2}  # the new preferred leader, elected
    assert not cluster.reassigning
    for b in cluster.brokers.values():
        assert not set(b.configs) & set(BROKER_KEYS), b.configs
    assert not set(cluster.topic_configs.get("t", {})) & set(TOPIC_KEYS), cluster.topic_configs


def test_cancel_names_where_each_partition_is_left(tmp_path: Path, reassign_cli: Callable[..., Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing running, --cancel says so (as Kafka's does, exit 0) and where each of the file's partitions
    is: on its replicas, or that it does not exist (a topic deleted since, a partition the topic never had)."""
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    cluster = FakeCluster(VERSIONS["3.9"], brokers=[1, 2, 3], dirs=["/d1"])
    for b in (1, 2):
        cluster.add_replica(b, "/d1", "t", 0, 1000)
    plan = tmp_path / "r.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": TARGET}, {"topic": "t", "partition": 7, "replicas": TARGET},
        {"topic": "gone", "partition": 0, "replicas": TARGET}]}))
    with cluster:
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--cancel", "--reassignment-json-file",
                                     str(plan)])
    assert rc == 0, out + err
    assert out.splitlines() == ["None of the specified partition reassignments are active.",
                                "Partition t-0 is left on replicas 1,2", "Partition t-7 does not exist",
                                "Partition gone-0 does not exist"], out


def test_verify_while_a_move_between_brokers_brings_a_replica_with_a_log_dir(tmp_path: Path,
                                                                           reassign_cli: Callable[..., Any],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The file gives the new replica a log dir; while the reassignment still brings it, Kafka's tool says the
    partition is in progress and the replica is not found on its broker (its lines, kept), and nothing failed yet:
    exit 3, throttles kept."""
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    cluster = FakeCluster(VERSIONS["3.9"], brokers=[1, 2, 3], dirs=["/d1", "/d2"])
    for b in (1, 2):
        cluster.add_replica(b, "/d1", "t", 0, 1000)
    cluster.reassign_polls = 1000
    cluster.reassigning[("t", 0)] = ([1, 2], TARGET, 0)
    plan = tmp_path / "r.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": TARGET, "log_dirs": ["any", "/d2"]}]}))
    with cluster:
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file",
                                     str(plan)])
    assert rc == 3, out + err
    assert out.splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition t-0 is still in progress.",
        "Partition t-0 is not found in any live log dir on broker 3. There is likely an offline log directory on "
        "the broker."], out


def test_dry_run_prints_the_steps_and_an_estimate_and_changes_nothing(tmp_path: Path,
                                                                      reassign_cli: Callable[..., Any]) -> None:
    """--execute --dry-run: each partition's KIP-435 steps in the batches the limits allow, the bytes each copies and,
    at the throttle, when each ends (mover/admin/reassign/schedule.py), with nothing started, throttled or recorded;
    --execute then prints the same estimate before it starts."""
    cluster = FakeCluster(VERSIONS["3.9"], brokers=[1, 2, 3], dirs=["/d1"])
    cluster.controller = 3
    for p in range(3):
        for b in (1, 2):
            cluster.add_replica(b, "/d1", "t", p, 2_000_000)
    plan = tmp_path / "r.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": p, "replicas": [2, 3]} for p in range(3)]}))
    args = ["--bootstrap-server", "", "--execute", "--reassignment-json-file", str(plan), "--throttle", "1000000",
            "--max-partition-movements", "2", "--poll-interval", "0.05"]
    with cluster:
        args[1] = cluster.bootstrap
        rc, out, err = reassign_cli([*args, "--dry-run"])
        assert rc == 0, out + err
        lines = out.splitlines()
        assert lines[0] == "Dry run: nothing is changed in the cluster.", out
        # Two partitions at once (--max-partition-movements 2), each copied to broker 3 from its leader 1, which
        # shares its 1 MB/s between them: 4 s for 2 MB each; the third starts when they end and has it alone: 2 s.
        assert lines[2:7] == [
            "Batch 1, starting at 0 s:",
            "  t-0 step 1: [1, 2] -> [2, 3] (+3 -1, new leader), 1.9 MiB, ends at 4 s",
            "  t-1 step 1: [1, 2] -> [2, 3] (+3 -1, new leader), 1.9 MiB, ends at 4 s",
            "Batch 2, starting at 4 s:",
            "  t-2 step 1: [1, 2] -> [2, 3] (+3 -1, new leader), 1.9 MiB, ends at 6 s"], out
        assert lines[-1] == ("Estimate: 3 steps in 2 batches, 5.7 MiB to copy, about 6 s at the throttle of "
                             "1000000 B/s per broker"), out
        assert cluster.assignment == {("t", p): [1, 2] for p in range(3)}
        assert not cluster.reassigning and not cluster.logs.logs  # no request recorded: no status topic made
        for b in cluster.brokers.values():
            assert not set(b.configs) & set(BROKER_KEYS), b.configs
        rc, out, err = reassign_cli(args)
        assert rc == 0, out + err
        assert lines[-1] in out.splitlines(), out
    assert cluster.assignment == {("t", p): [2, 3] for p in range(3)}
