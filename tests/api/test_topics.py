"""CreateTopics and DeleteTopics against a real moverd, through kafka-python and raw requests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.admin import NewTopic

from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.wait import wait_for
from mover.wire.messages import CREATE_TOPICS, DELETE_TOPICS, METADATA
from tests.api.helpers import admin


def _codes(body: dict, key: str = "topics") -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in body[key]}


def _topic(name: str, partitions: int = 1, rf: int = 1, **extra: object) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [], "configs": [],
            **extra}


def test_kafka_python_creates_and_deletes(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a:
        res = a.create_topics([NewTopic("one", 4, 1), NewTopic("two", 1, 1)])
        assert _codes(res) == {"one": 0, "two": 0}
        assert sorted(a.list_topics()) == ["one", "two"]
        parts = sorted(n for p in d.dirs for n in os.listdir(p) if n.startswith(("one-", "two-")))
        assert parts == ["one-0", "one-1", "one-2", "one-3", "two-0"]
        res = a.create_topics([NewTopic("one", 1, 1)], raise_errors=False)
        assert _codes(res) == {"one": 36}
        res = a.delete_topics(["one", "ghost"], raise_errors=False)
        assert _codes(res) == {"one": 0, "ghost": 3}
        assert a.list_topics() == ["two"]
        wait_for(lambda: not any(n.startswith("one-") for p in d.dirs for n in os.listdir(p)),
                 message="the deleted partitions to be removed from disk")


@pytest.mark.parametrize("version", range(CREATE_TOPICS.valid.lo, CREATE_TOPICS.valid.hi + 1))
def test_create_validation_every_version(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path) as d:
        body = raw_call(d.port, CREATE_TOPICS, version, {"topics": [
            _topic("ok", 2),
            _topic("bad/name"),
            _topic(".."),
            _topic("x" * 250),
            _topic("zero", 0),
            _topic("rf3", 1, 3),
            _topic("rf0", 1, 0),
            _topic("dup"),
            _topic("dup"),
            _topic("conf", configs=[{"name": "cleanup.policy", "value": "compact"}]),
        ], "timeout_ms": 1000})
        assert _codes(body) == {"ok": 0, "bad/name": 17, "..": 17, "x" * 250: 17, "zero": 37, "rf3": 38,
                                "rf0": 38, "dup": 42, "conf": 40}
        if version >= 5:
            ok = next(t for t in body["topics"] if t["name"] == "ok")
            assert (ok["num_partitions"], ok["replication_factor"]) == (2, 1)
        listed = raw_call(d.port, METADATA, 1, {"topics": None})["topics"]
        assert [(t["name"], len(t["partitions"])) for t in listed] == [("ok", 2)]


def test_validate_only_defaults_and_assignments(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"num.partitions": 2}) as d:
        body = raw_call(d.port, CREATE_TOPICS, 4, {"topics": [_topic("dry", 3)], "validate_only": True})
        assert _codes(body) == {"dry": 0}
        assert raw_call(d.port, METADATA, 1, {"topics": None})["topics"] == []
        # -1 / -1: the broker's defaults (num.partitions, replication factor 1), v4+ (KIP-464).
        body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [_topic("dflt", -1, -1)]})
        (dflt,) = body["topics"]
        assert (dflt["error_code"], dflt["num_partitions"], dflt["replication_factor"]) == (0, 2, 1)
        raw_call(d.port, DELETE_TOPICS, 4, {"topic_names": ["dflt"]})
        assigned = {"name": "asg", "num_partitions": -1, "replication_factor": -1, "configs": [],
                    "assignments": [{"partition_index": 1, "broker_ids": [0]}, {"partition_index": 0,
                                                                                "broker_ids": [0]}]}
        wrong_broker = {**assigned, "name": "wrong",
                        "assignments": [{"partition_index": 0, "broker_ids": [0, 1]}]}
        gap = {**assigned, "name": "gap", "assignments": [{"partition_index": 1, "broker_ids": [0]}]}
        both = {**assigned, "name": "both", "num_partitions": 2}
        body = raw_call(d.port, CREATE_TOPICS, 4, {"topics": [assigned, wrong_broker, gap, both]})
        assert _codes(body) == {"asg": 0, "wrong": 39, "gap": 39, "both": 42}
        listed = raw_call(d.port, METADATA, 1, {"topics": None})["topics"]
        assert [(t["name"], len(t["partitions"])) for t in listed] == [("asg", 2)]
        # More than Kafka's 10,000 partitions in one request: refused whole (a corrupt count cannot hang us).
        body = raw_call(d.port, CREATE_TOPICS, 4, {"topics": [_topic("huge", 2**31 - 1), _topic("small", 1)]})
        assert _codes(body) == {"huge": 44, "small": 44}


@pytest.mark.parametrize("version", range(DELETE_TOPICS.valid.lo, DELETE_TOPICS.valid.hi + 1))
def test_delete_every_version(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path) as d:
        raw_call(d.port, CREATE_TOPICS, 0, {"topics": [_topic("a"), _topic("b")], "timeout_ms": 1000})
        if version >= 6:
            req = {"topics": [{"name": "a"}, {"name": "nope"}, {"name": None, "topic_id": uuid.uuid4()}],
                   "timeout_ms": 1000}
        else:
            req = {"topic_names": ["a", "nope", "a"], "timeout_ms": 1000}
        body = raw_call(d.port, DELETE_TOPICS, version, req)
        got = [(r["name"], r["error_code"]) for r in body["responses"]]
        expected = [("a", 0), ("nope", 3)] + ([(None, 100)] if version >= 6 else [])
        assert got == expected
        listed = raw_call(d.port, METADATA, 1, {"topics": None})["topics"]
        assert [t["name"] for t in listed] == ["b"]


def test_new_partitions_go_to_the_dir_with_most_usable_bytes(tmp_path: Path, tmpfs: Callable[[str, str], Path]) -> None:
    small = tmpfs("small", "64m")
    large = tmpfs("large", "256m")
    with Moverd(tmp_path, dirs=[small / "d", large / "d"]) as d, admin(d) as a:
        a.create_topics([NewTopic("t", 6, 1)])
        # Kafka would alternate (fewest partitions first); by free space, every partition lands on the large disk
        # until it is within 1% of the other, which 6 empty partitions never change.
        assert sorted(n for n in os.listdir(large / "d") if n.startswith("t-")) == [f"t-{i}" for i in range(6)]
        assert not [n for n in os.listdir(small / "d") if n.startswith("t-")]
