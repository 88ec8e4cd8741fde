"""mover-reassign without a real Kafka: usage errors, a broker without KIP-455's APIs (a fake Kafka 2.3, which has
none), the limits file, and the request store's ids and throttle originals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.admin.common import AdminError
from mover.admin.limits import LimitsFile, RunLimits, read_limits
from mover.admin.reassign.steps import Limits
from mover.testing.fake_kafka import KAFKA_2_3, FakeCluster
from mover.testing.file_request_store import RequestStore


@pytest.mark.parametrize(("argv", "message"), [
    (["--bootstrap-server", "h:1", "--zookeeper", "z:2", "--list"], "cannot be used together"),
    (["--zookeeper", "z:2", "--progress"], "--progress needs --bootstrap-server"),
    (["--bootstrap-server", "h:1"], "one of --generate"),
    (["--bootstrap-server", "h:1", "--execute"], "--execute needs --reassignment-json-file"),
    (["--bootstrap-server", "h:1", "--list", "--throttle", "5"], "--throttle cannot be used with --list"),
    (["--bootstrap-server", "h:1", "--execute", "--reassignment-json-file", "f", "--max-partition-movements", "0"],
     "expected a positive integer"),
])
def test_usage_errors_are_one_line(argv: list[str], message: str, reassign_cli: Callable[..., Any]) -> None:
    rc, out, err = reassign_cli(argv)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_broker_without_kip455_is_refused_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            reassign_cli: Callable[..., Any]) -> None:
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    cluster = FakeCluster(KAFKA_2_3, brokers=3, dirs=["/d1"])
    cluster.add_replica(broker=0, log_dir="/d1", topic="t", partition=0, size=1000)
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}))
    with cluster:
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file",
                                     str(f)])
    assert rc == 1 and out == "", out
    assert "does not support AlterPartitionReassignments (api key 45)" in err and "Kafka 2.4" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()  # no request was made


def test_limits_file(tmp_path: Path) -> None:
    base = RunLimits(Limits(5, 1, 2), throttle=1000)
    path = tmp_path / "limits.toml"
    path.write_text("max_partition_movements = 3\nthrottle = -1\n")
    assert read_limits(path, base) == RunLimits(Limits(3, 1, 2), None)
    path.write_text('{"max-leader-movements": 4}')
    assert read_limits(path, base) == RunLimits(Limits(5, 1, 4), 1000)
    for bad in ('{"max_partition_movements": 0}', '{"nope": 1}', "not = [toml", '{"throttle": "fast"}'):
        path.write_text(bad)
        with pytest.raises(AdminError):
            read_limits(path, base)
    # Nested past what either parser recurses through, and bytes that are not text: one error each.
    for bad, says in (("{\"a\": " + "[" * 100_000, "nested deeper than 512 levels"), ("a = " + "[" * 100_000,
                      "nested too deeply"), ("a = '\xff'", "not UTF-8")):
        path.write_bytes(bad.encode("latin-1"))
        with pytest.raises(AdminError, match=says):
            read_limits(path, base)
    watch = LimitsFile(path)
    assert not watch.changed()
    path.write_text('{"max_partition_movements": 7, "max_replica_movements": 2}')
    assert watch.changed() and not watch.changed()


def test_request_ids_grow_and_originals_are_kept_once(tmp_path: Path) -> None:
    store = RequestStore("c1", tmp_path)
    one = store.new_request([{"topic": "t", "partition": 0, "replicas": [1]}])
    two = store.new_request([{"topic": "t", "partition": 1, "replicas": [1]}])
    assert (one, two) == (1, 2) and store.latest() == 2
    store.record("broker:1", {"leader.replication.throttled.rate": "5"})
    store.record("broker:1", {"leader.replication.throttled.rate": "999"})  # the run's own value: not taken
    again = RequestStore("c1", tmp_path)  # another process reads what is durable
    assert again.original("broker:1") == {"leader.replication.throttled.rate": "5"}
    assert again.running_for({("t", 0)}) == 1
    again.finish(1, "cancelled")
    assert store.reloaded_state(1) == "cancelled"
    again.forget("broker:1")
    assert RequestStore("c1", tmp_path).originals() == {}
    with pytest.raises(AdminError, match="unknown request id 9"):
        again.request(9)
    assert RequestStore("c2", tmp_path).latest() is None


def test_topics_to_move_file_errors_are_one_line(tmp_path: Path) -> None:
    from mover.cli.common import CliError
    from mover.cli.reassign_brokers import load_topics_to_move

    path = tmp_path / "topics.json"
    for bad, says in ((b"[" * 100_000, "nested deeper than 512 levels"), (b'{"topics": "\xff"}', "not UTF-8"),
                      (b"{", "Expecting property name"), (b'{"topics": [1]}', "expected")):
        path.write_bytes(bad)
        with pytest.raises(CliError, match=says):
            load_topics_to_move(str(path))


def test_a_broker_without_kip455_verifies_a_file_that_only_moves_log_dirs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          reassign_cli: Callable[..., Any]) -> None:
    """Every replica already on its broker, only `log_dirs` named: --verify and --progress need no KIP-455 request,
    so a Kafka 2.3 broker (which has none) answers them as well as a later one."""
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    cluster = FakeCluster(KAFKA_2_3, brokers=2, dirs=["/d1", "/d2"])
    cluster.add_replica(broker=0, log_dir="/d2", topic="t", partition=0, size=1000)
    cluster.add_replica(broker=1, log_dir="/d1", topic="t", partition=0, size=1000)
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [0, 1], "log_dirs": ["/d2", "/d2"]}]}))
    with cluster:
        rc, out, err = reassign_cli(["--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file",
                                     str(f), "--preserve-throttles"])
    assert rc == 1, out + err
    assert out.splitlines() == ["Status of partition reassignment:", "Reassignment of partition t-0 is completed.",
                                "Reassignment of replica t-0-0 completed successfully.",
                                "Partition t-0 on broker 1 is not being moved from log dir /d1 to /d2."], out
