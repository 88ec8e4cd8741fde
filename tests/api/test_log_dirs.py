"""DescribeLogDirs, AlterReplicaLogDirs and DescribeReplicaMoves against a real moverd."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import kafka.errors as Errors
import pytest
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.protocol.admin import AlterReplicaLogDirsResponse
from kafka.structs import TopicPartitionReplica as TPR

from mover.storage.log import LogConfig
from mover.storage.names import TopicPartition
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.raw import RawClient, raw_call
from mover.testing.records import dir_of, write_partition
from mover.testing.wait import wait_for
from mover.wire import encode_struct, join_chunks
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, DESCRIBE_REPLICA_MOVES
from tests.api.helpers import admin


def _where(d: Moverd, topic: str, partition: int, *, future: bool = False) -> list[str]:
    """The log dirs DescribeLogDirs lists the partition in (its current copy, or its future copy)."""
    body = raw_call(d.port, DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [partition]}]})
    return [r["log_dir"] for r in body["results"] for t in r["topics"] for p in t["partitions"]
            if t["name"] == topic and p["partition_index"] == partition and p["is_future_key"] == future]


@pytest.mark.parametrize("version", range(DESCRIBE_LOG_DIRS.valid.lo, DESCRIBE_LOG_DIRS.valid.hi + 1))
def test_describe_every_version(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("t", 4, 1), NewTopic("u", 1, 1)])
        body = raw_call(d.port, DESCRIBE_LOG_DIRS, version, {"topics": None})
        assert [r["log_dir"] for r in body["results"]] == [str(p) for p in d.dirs]
        assert all(r["error_code"] == 0 for r in body["results"])
        listed = sorted((t["name"], p["partition_index"]) for r in body["results"] for t in r["topics"]
                        for p in t["partitions"])
        assert listed == [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0)]
        for r in body["results"]:
            for t in r["topics"]:
                for p in t["partitions"]:
                    assert (p["partition_size"], p["offset_lag"], p["is_future_key"]) == (0, 0, False)
            if version >= 4:
                assert 0 < r["usable_bytes"] <= r["total_bytes"]
            else:
                assert r["total_bytes"] == -1  # absent before v4: the decoder's default
        some = raw_call(d.port, DESCRIBE_LOG_DIRS, version, {"topics": [{"topic": "t", "partitions": [1, 3, 9]}]})
        assert sorted(p["partition_index"] for r in some["results"] for t in r["topics"]
                      for p in t["partitions"]) == [1, 3]
        none = raw_call(d.port, DESCRIBE_LOG_DIRS, version, {"topics": []})
        assert [r["topics"] for r in none["results"]] == [[], []]


def test_offline_dir_is_reported_with_storage_error(tmp_path: Path) -> None:
    d = Moverd(tmp_path, prefix=SETPRIV)
    for p in d.dirs:
        p.mkdir()
    os.chmod(d.dirs[1], 0)
    try:
        with d:
            body = raw_call(d.port, DESCRIBE_LOG_DIRS, 4, {"topics": None})
            by_dir = {r["log_dir"]: r for r in body["results"]}
            bad = by_dir[str(d.dirs[1])]
            assert (bad["error_code"], bad["topics"], bad["total_bytes"], bad["usable_bytes"]) == (56, [], -1, -1)
            assert by_dir[str(d.dirs[0])]["error_code"] == 0
            # Moving into it: KAFKA_STORAGE_ERROR.
            with admin(d) as a:
                a.create_topics([NewTopic("t", 1, 1)])
                res = a.alter_replica_log_dirs({TPR("t", 0, 0): str(d.dirs[1])})
                assert res[TPR("t", 0, 0)] is Errors.KafkaStorageError
    finally:
        os.chmod(d.dirs[1], 0o755)


def test_kafka_python_alter_cases(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a:
        a.create_topics([NewTopic("t", 2, 1)])
        src = _where(d, "t", 0)[0]
        other = next(str(p) for p in d.dirs if str(p) != src)
        res = a.alter_replica_log_dirs({
            TPR("t", 0, 0): other,
            TPR("t", 1, 0): "/no/such/dir",
            TPR("ghost", 0, 0): other,
        })
        assert res == {TPR("t", 0, 0): Errors.NoError, TPR("t", 1, 0): Errors.LogDirNotFoundError,
                       TPR("ghost", 0, 0): Errors.UnknownTopicOrPartitionError}
        wait_for(lambda: _where(d, "t", 0) == [other], message="the move of t-0 to complete")
        # Not exactly a configured dir: relative, trailing slash.
        for path in ("d1", other + "/", other + "/."):
            assert a.alter_replica_log_dirs({TPR("t", 1, 0): path})[TPR("t", 1, 0)] is Errors.LogDirNotFoundError
        # Unknown partition of a known topic; the current dir; a bad name.
        assert a.alter_replica_log_dirs({TPR("t", 7, 0): other})[TPR("t", 7, 0)] is Errors.UnknownTopicOrPartitionError
        assert a.alter_replica_log_dirs({TPR("t", 0, 0): other})[TPR("t", 0, 0)] is Errors.NoError
        assert a.alter_replica_log_dirs({TPR("a/b", 0, 0): other})[TPR("a/b", 0, 0)] is Errors.InvalidTopicError
        long_name = "x" * 249
        assert a.alter_replica_log_dirs({TPR(long_name, 0, 0): other})[TPR(long_name, 0, 0)] is Errors.InvalidTopicError


def test_unknown_replica_is_created_in_the_remembered_dir(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a:
        # Both partitions go to the same dir, against the placement's spreading: only memory can explain that.
        target = str(d.dirs[1])
        res = a.alter_replica_log_dirs({TPR("later", 0, 0): target, TPR("later", 1, 0): target})
        assert set(res.values()) == {Errors.UnknownTopicOrPartitionError}
        a.create_topics([NewTopic("later", 2, 1)])
        assert _where(d, "later", 0) == [target] and _where(d, "later", 1) == [target]


def test_duplicates_last_wins_and_request_id_is_carried(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("t", 1, 1)])
        src = _where(d, "t", 0)[0]
        other = next(str(p) for p in d.dirs if str(p) != src)
        body = {"dirs": [{"path": "/bogus", "topics": [{"name": "t", "partitions": [0]}]},
                         {"path": other, "topics": [{"name": "t", "partitions": [0]}]}]}
        with RawClient(d.port) as c:
            _, v2 = c.call(ALTER_REPLICA_LOG_DIRS, 2, body)
            assert v2["results"] == [{"topic_name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]
            assert v2["request_id"] >= 1
            _, moves = c.call(DESCRIBE_REPLICA_MOVES, 0, {"request_id": v2["request_id"]})
            assert moves["error_code"] == 0
            (req,) = moves["requests"]
            assert req["request_id"] == v2["request_id"]
            (rep,) = req["replicas"]
            assert (rep["topic"], rep["partition"], rep["source_dir"], rep["destination_dir"]) == ("t", 0, src, other)
            _, latest = c.call(DESCRIBE_REPLICA_MOVES, 0, {"request_id": -1})
            assert latest["request_id"] == v2["request_id"]
            _, unknown = c.call(DESCRIBE_REPLICA_MOVES, 0, {"request_id": 999999})
            assert (unknown["error_code"], unknown["requests"]) == (42, [])
            wait_for(lambda: _where(d, "t", 0) == [other], message="the move to complete")
            # A request that starts nothing carries no id.
            _, again = c.call(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [{"path": other, "topics": [{"name": "t",
                                                                                                "partitions": [0]}]}]})
            assert again["request_id"] == -1


def test_kafka_python_decodes_a_response_carrying_the_request_id() -> None:
    value = {"throttle_time_ms": 3, "request_id": 123456789,
             "results": [{"topic_name": "t", "partitions": [{"partition_index": 2, "error_code": 9}]}]}
    data = join_chunks(encode_struct(ALTER_REPLICA_LOG_DIRS.response, 2, True, value))
    assert len(data) > len(join_chunks(encode_struct(ALTER_REPLICA_LOG_DIRS.response, 2, True,
                                                     {**value, "request_id": -1})))
    theirs = AlterReplicaLogDirsResponse.decode(data, version=2)
    assert theirs.throttle_time_ms == 3
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in theirs.results] == [
        ("t", [(2, 9)])]


def test_throttled_move_shows_future_copy_then_completes_when_throttle_is_raised(tmp_path: Path) -> None:
    tp = TopicPartition("big", 0)
    d = Moverd(tmp_path, props={"intra.broker.throttled.rate": 100_000})
    with d, admin(d) as a:
        a.create_topics([NewTopic("big", 1, 1)])
    size = write_partition(dir_of(d.dirs, tp.topic, tp.partition), tp, 48, records_per_batch=16,
                           record_bytes=4096, segment_bytes=LogConfig().segment_bytes).size
    assert size > 3_000_000  # 30 s of copying at the throttle: it cannot finish by accident
    with d, admin(d) as a:
        src = _where(d, "big", 0)[0]
        dst = next(str(p) for p in d.dirs if str(p) != src)
        assert a.alter_replica_log_dirs({TPR("big", 0, 0): dst}) == {TPR("big", 0, 0): Errors.NoError}

        def future_in_dst() -> dict | None:
            for r in a.describe_log_dirs()[0]["log_dirs"]:
                for t in r["topics"]:
                    for p in t["partitions"]:
                        if r["log_dir"] == dst and p["is_future_key"] and p["partition_size"] > 0:
                            return p
            return None

        fut = wait_for(future_in_dst, message="a future copy with bytes in the destination")
        assert fut["offset_lag"] > 0 and fut["partition_size"] < size
        (moves,) = [raw_call(d.port, DESCRIBE_REPLICA_MOVES, 0, {"request_id": -1})["requests"][0]["replicas"]]
        assert moves[0]["state"] == "copying" and 0 < moves[0]["bytes_copied"] < size
        t0 = time.monotonic()
        res = a.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                              configs={"intra.broker.throttled.rate": "1000000000"})])
        assert res == {"broker": {"0": "OK"}}
        wait_for(lambda: _where(d, "big", 0) == [dst] and not _where(d, "big", 0, future=True),
                 message="the move to complete after the throttle was raised", timeout=20)
        assert time.monotonic() - t0 < 20
        (done,) = raw_call(d.port, DESCRIBE_REPLICA_MOVES, 0, {"request_id": -1})["requests"]
        assert done["end_ms"] > 0 and done["replicas"][0]["state"] == "completed"
        sizes = [p["partition_size"] for r in a.describe_log_dirs()[0]["log_dirs"] for t in r["topics"]
                 for p in t["partitions"]]
        assert sizes == [size]


def test_kafka_python_command_line_describes_log_dirs(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("cli", 2, 1)])
        out = subprocess.run([sys.executable, "-m", "kafka.admin", "-b", d.bootstrap, "cluster", "describe-log-dirs"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=True).stdout
        for p in d.dirs:
            assert f"'log_dir': '{p}'" in out
        assert out.count("'name': 'cli'") == 2 and "'error_code': 56" not in out
