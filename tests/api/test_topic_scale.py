"""CreateTopics/DeleteTopics at scale on a real moverd: all or nothing, crash-safe without a checkpoint per partition,
bounded, and never stalling the other APIs."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from mover.storage.checkpoint import read_checkpoint
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce_many, records_of
from mover.testing.wait import wait_for
from mover.wire.messages import CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_LOG_DIRS, DESCRIBE_REPLICA_MOVES, METADATA

RECOVERY_POINTS = "recovery-point-offset-checkpoint"


def _topic(name: str, partitions: int) -> dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}


def _create(c: RawClient, *topics: tuple[str, int]) -> dict[str, dict[str, Any]]:
    body = c.call(CREATE_TOPICS, 4, {"topics": [_topic(n, p) for n, p in topics], "timeout_ms": 600000,
                                     "validate_only": False})[1]
    return {t["name"]: t for t in body["topics"]}


def _topics(c: RawClient) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in c.call(METADATA, 1, {"topics": None})[1]["topics"]}


def _partition_dirs(d: Moverd, topic: str) -> list[str]:
    return sorted(n for p in d.dirs for n in os.listdir(p) if n.startswith(f"{topic}-"))


def test_a_create_that_fails_half_way_leaves_no_half_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The 150th partition's creation fails as if the process were out of descriptors.
    monkeypatch.setenv("MOVERD_FAIL_AT", "create.partition:150:EMFILE")
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        got = _create(c, ("half", 300))["half"]
        assert got["error_code"] == 56, got
        assert "EMFILE" in got["error_message"]
        assert "half" not in _topics(c)
        assert _partition_dirs(d, "half") == []  # neither the partitions nor their retired `.delete` copies
        assert [r["error_code"] for r in c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})[1]["results"]] == [0, 0]
        # The name is free again, and the same create now works.
        assert _create(c, ("half", 300))["half"]["error_code"] == 0
        assert _topics(c)["half"] == 300
        # Deleted, the name is free: no leftover of the failed attempt comes back after a restart either.
        c.call(DELETE_TOPICS, 4, {"topic_names": ["half"], "timeout_ms": 60000})
    monkeypatch.delenv("MOVERD_FAIL_AT")
    d.start()
    try:
        with RawClient(d.port) as c:
            assert "half" not in _topics(c)
    finally:
        d.stop()


def test_kill_9_right_after_a_large_create_keeps_every_partition_and_record(tmp_path: Path) -> None:
    n = 1000
    with Moverd(tmp_path) as d:  # the checkpoint timer (60 s) does not fire during the test
        with RawClient(d.port) as c:
            assert _create(c, ("big", n))["big"]["error_code"] == 0
            written = [("big", p, make_batch([f"rec-{p}".encode()])) for p in range(0, n, 7)]
            acks = produce_many(c, written)
            assert {r["error_code"] for r in acks.values()} == {0}
        # The checkpoints are older than the dirs: they do not name the new partitions.
        listed = set().union(*(read_checkpoint(p / RECOVERY_POINTS) for p in d.dirs))
        assert TopicPartition("big", 0) not in listed
        d.kill()
        d.start()
        with RawClient(d.port) as c:
            assert _topics(c)["big"] == n
            resp = fetch_partitions(fetch(c, [(t, p, 0) for t, p, _ in written], max_bytes=1 << 30))
            for t, p, _ in written:
                assert [v for _, v in records_of(resp[(t, p)]["records"])] == [f"rec-{p}".encode()]


def test_checkpoints_follow_the_timer_not_each_partition(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"log.flush.offset.checkpoint.interval.ms": 200}) as d, RawClient(d.port) as c:
        assert _create(c, ("timed", 6))["timed"]["error_code"] == 0

        def listed() -> bool:
            names = set().union(*(read_checkpoint(p / RECOVERY_POINTS) for p in d.dirs))
            return all(TopicPartition("timed", p) in names for p in range(6))

        wait_for(listed, message="the checkpoint timer to write the new partitions")


def test_partition_bounds_per_request_and_per_broker(tmp_path: Path) -> None:
    props = {"create.topics.max.partitions.per.request": 50, "max.broker.partitions": 80}
    with Moverd(tmp_path, props=props) as d, RawClient(d.port) as c:
        got = _create(c, ("a", 30), ("b", 21))
        assert {n: t["error_code"] for n, t in got.items()} == {"a": 44, "b": 44}
        assert "create.topics.max.partitions.per.request" in got["a"]["error_message"]
        assert _create(c, ("a", 50))["a"]["error_code"] == 0
        over = _create(c, ("b", 31))["b"]
        assert over["error_code"] == 44 and "max.broker.partitions" in over["error_message"]
        assert _create(c, ("b", 30))["b"]["error_code"] == 0
        assert _topics(c) == {"a": 50, "b": 30}


def test_a_large_create_does_not_stall_the_other_apis(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        done: dict[str, Any] = {}

        def create_big() -> None:
            with RawClient(d.port) as c:
                c.sock.settimeout(600)
                done["big"] = _create(c, ("big", 4000))["big"]["error_code"]

        def create_small(i: int) -> None:
            with RawClient(d.port) as c:
                c.sock.settimeout(600)
                done[f"small{i}"] = _create(c, (f"small{i}", 2))[f"small{i}"]["error_code"]

        big = threading.Thread(target=create_big)
        big.start()
        wait_for(lambda: _partition_dirs(d, "big"), message="the large create to begin")
        smalls = [threading.Thread(target=create_small, args=(i,)) for i in range(8)]
        for t in smalls:
            t.start()
        with RawClient(d.port) as c:
            topics = c.call(METADATA, 1, {"topics": None})[1]["topics"]
            dirs = c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})[1]["results"]
            moves = c.call(DESCRIBE_REPLICA_MOVES, 0, {"request_id": -1})[1]
            # Answered while the create runs: the topic is not published half-made, and nothing waited for it.
            assert "big" not in done
            assert "big" not in [t["name"] for t in topics]
            assert [r["error_code"] for r in dirs] == [0, 0]
            assert "error_code" in moves
        big.join(600)
        for t in smalls:
            t.join(600)
        assert done == {"big": 0, **{f"small{i}": 0 for i in range(8)}}
        with RawClient(d.port) as c:
            assert _topics(c)["big"] == 4000
