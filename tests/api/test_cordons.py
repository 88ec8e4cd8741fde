"""Cordoned log dirs (KIP-1066, Kafka 4.3) on a real moverd, seen by kafka-python 3.0.12 (DescribeLogDirs v5):
cordoned.log.dirs in server.properties and through IncrementalAlterConfigs (SET, APPEND, SUBTRACT; persisted over a
restart), no new partition and no move into a cordoned dir (39, Kafka's message), a cordoned dir keeps serving what
it holds, every dir cordoned refuses a create as Kafka does, the per-dir metric, and the live server.properties edit."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import kafka.errors as Errors
import pytest
from kafka.admin import NewTopic
from kafka.structs import TopicPartitionReplica as TPR
from prometheus_client.parser import text_string_to_metric_families

from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.ports import free_port
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce, raw_call
from mover.testing.wait import wait_for
from mover.wire.messages import CREATE_TOPICS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS, INCREMENTAL_ALTER_CONFIGS, METADATA
from tests.api.helpers import admin

KEY = "cordoned.log.dirs"
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
ALL_CORDONED = ("Unable to replicate the partition 1 time(s): The target replication factor of 1 cannot be reached "
                "because only 0 broker(s) are registered or some brokers have all their log directories cordoned.")


def cordons(d: Moverd) -> dict[str, bool]:
    """log dir -> is_cordoned, as kafka-python's describe_log_dirs() decodes the broker's answer (v5 here)."""
    with admin(d) as a:
        return {r["log_dir"]: r["is_cordoned"] for r in a.describe_log_dirs()[0]["log_dirs"]}


def placed(d: Moverd, topic: str) -> dict[int, str]:
    with admin(d) as a:
        return {p["partition_index"]: r["log_dir"] for r in a.describe_log_dirs()[0]["log_dirs"]
                for t in r["topics"] if t["name"] == topic for p in t["partitions"]}


def alter(d: Moverd, op: int, value: str | None, resource: str = "0") -> tuple[int, str | None]:
    body = raw_call(d.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": resource, "configs": [
            {"name": KEY, "config_operation": op, "value": value}]}], "validate_only": False})
    (r,) = body["responses"]
    return r["error_code"], r["error_message"]


def described(d: Moverd) -> dict:
    body = raw_call(d.port, DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": [KEY]}], "include_synonyms": True})
    (config,) = body["results"][0]["configs"]
    return config


def create(d: Moverd, name: str, partitions: int) -> tuple[int, str | None]:
    body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 10000, "validate_only": False})
    (t,) = body["topics"]
    return t["error_code"], t["error_message"]


def test_static_cordon_with_kafka_python(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    with Moverd(tmp_path, props={KEY: str(d2)}) as d:
        with admin(d) as a:
            # kafka-python picks v5 (its highest, and ours) and decodes IsCordoned.
            assert cordons(d) == {str(d1): False, str(d2): True}
            a.create_topics([NewTopic("t", 6, 1)])
            assert set(placed(d, "t").values()) == {str(d1)}
            # Kafka 4.3's answer to a move into a cordoned dir; the static source in DescribeConfigs.
            assert a.alter_replica_log_dirs({TPR("t", 0, 0): str(d2)}) == {
                TPR("t", 0, 0): Errors.InvalidReplicationAssignmentError}
        assert f"Log directory {d2} is cordoned" in d.log()
        config = described(d)
        assert (config["value"], config["config_source"], config["read_only"]) == (str(d2), 4, False)
        # DescribeLogDirs before v5 has no such field: the answer decodes as it always did.
        v4 = raw_call(d.port, DESCRIBE_LOG_DIRS, 4, {"topics": None})
        assert [r["is_cordoned"] for r in v4["results"]] == [False, False]  # the decoder's default, not sent


def test_dynamic_cordon_persists_refuses_and_keeps_serving(tmp_path: Path) -> None:
    port = free_port()
    d = Moverd(tmp_path, props={"metrics.listener": f"http://127.0.0.1:{port}"})
    d1, d2 = map(str, d.dirs)
    with d:
        with admin(d) as a:
            a.create_topics([NewTopic("live", 4, 1)])
        before = placed(d, "live")
        assert set(before.values()) == {d1, d2}
        on_d2 = next(p for p, where in before.items() if where == d2)
        assert alter(d, APPEND, d2) == (0, None)
        assert cordons(d) == {d1: False, d2: True}
        assert metric(port, "mover_log_dir_cordoned") == {d1: 0, d2: 1}
        assert described(d)["config_source"] == 2  # DYNAMIC_BROKER_CONFIG
        # New partitions avoid it; what it holds stays and keeps taking appends and fetches.
        assert create(d, "after", 4) == (0, None)
        assert set(placed(d, "after").values()) == {d1}
        tp = TopicPartition("live", on_d2)
        with RawClient(d.port) as c:
            r = produce(c, tp.topic, tp.partition, make_batch([b"still-served"]))
            assert r["error_code"] == 0, r
            got = fetch_partitions(fetch(c, [(tp.topic, tp.partition, 0)]))
            assert got[(tp.topic, tp.partition)]["error_code"] == 0
        assert placed(d, "live")[on_d2] == d2
        # A move into it: 39. Staying where it is (how a move is cancelled) stays allowed.
        on_d1 = next(p for p, where in before.items() if where == d1)
        with admin(d) as a:
            assert a.alter_replica_log_dirs({TPR("live", on_d1, 0): d2, TPR("live", on_d2, 0): d2}) == {
                TPR("live", on_d1, 0): Errors.InvalidReplicationAssignmentError, TPR("live", on_d2, 0): Errors.NoError}
        # A cordon names this broker's dirs, and only this broker's.
        code, message = alter(d, APPEND, "/not/a/log/dir")
        assert code == 40 and "/not/a/log/dir" in (message or "")
        code, message = alter(d, SET, d1, resource="")
        assert code == 42 and "broker id must be specified" in (message or "")
    # A dynamic value survives a restart (persisted in every log dir).
    with d:
        assert cordons(d) == {d1: False, d2: True}
        # Every dir cordoned: a create fails as Kafka 4.3 fails it, and auto-creation with it.
        assert alter(d, APPEND, d1) == (0, None)
        assert described(d)["value"] in (f"{d2},{d1}", "*")
        assert create(d, "nowhere", 1) == (38, ALL_CORDONED)
        # Auto-creation takes the same path: Metadata answers the topic with 38, and nothing is made.
        auto = raw_call(d.port, METADATA, 4, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        assert [(t["name"], t["error_code"]) for t in auto["topics"]] == [("auto", 38)]
        with admin(d) as a:
            with pytest.raises(Errors.InvalidReplicationFactorError):
                a.create_topics([NewTopic("nowhere", 1, 1)])
        assert not [t for t in os.listdir(d1) + os.listdir(d2) if t.startswith(("nowhere", "auto"))]
        # SUBTRACT one, DELETE the rest.
        assert alter(d, SUBTRACT, d2) == (0, None)
        assert cordons(d) == {d1: True, d2: False}
        assert alter(d, DELETE, None) == (0, None)
        assert cordons(d) == {d1: False, d2: False}
        assert create(d, "nowhere", 1) == (0, None)


def test_server_properties_edit_cordons_live(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        d1, d2 = map(str, d.dirs)
        d.config.write_text(d.config.read_text() + f"{KEY}=*\n")
        wait_for(lambda: cordons(d) == {d1: True, d2: True}, message="both dirs cordoned after the edit")
        assert create(d, "t", 1)[0] == 38


def metric(port: int, name: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.labels["log_dir"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name}
