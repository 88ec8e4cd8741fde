"""Metadata against a real moverd: kafka-python, kcat, and raw requests at every version."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from kafka.admin import NewTopic

from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.raw import raw_call
from mover.testing.wait import wait_for
from mover.wire.messages import METADATA
from tests.api.helpers import admin

ZERO_UUID = uuid.UUID(int=0)


def _topics(body: dict) -> dict[str, dict]:
    return {t["name"]: t for t in body["topics"]}


def test_kafka_python_lists_and_describes_topics(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a:
        a.create_topics([NewTopic("alpha", 3, 1), NewTopic("beta", 1, 1)])
        assert sorted(a.list_topics()) == ["alpha", "beta"]
        (alpha,) = a.describe_topics(["alpha"])
        assert alpha["error_code"] == 0
        assert [p["partition_index"] for p in alpha["partitions"]] == [0, 1, 2]
        for p in alpha["partitions"]:
            assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]) == (0, [0], [0], [])
        cluster = a.describe_cluster()
        assert cluster["controller_id"] == 0
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(0, d.host, d.port)]


def test_kcat_lists_broker_and_topics(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"broker.id": 7}) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("kc", 2, 1)])
        out = subprocess.run(["kcat", "-L", "-b", d.bootstrap], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, check=True).stdout
        assert f"broker 7 at {d.bootstrap} (controller)" in out
        assert 'topic "kc" with 2 partitions:' in out
        assert "partition 1, leader 7, replicas: 7, isrs: 7" in out


@pytest.mark.parametrize("version", range(METADATA.valid.lo, METADATA.valid.hi + 1))
def test_every_version_describes_the_single_node_cluster(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path, props={"broker.id": 3}) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("t", 2, 1)])
        # v0 cannot send null: its empty list means "all topics".
        body = raw_call(d.port, METADATA, version, {"topics": [] if version == 0 else None})
        assert [(b["node_id"], b["host"], b["port"]) for b in body["brokers"]] == [(3, d.host, d.port)]
        if version >= 1:
            assert body["controller_id"] == 3
        if version >= 2:
            assert body["cluster_id"]
        (t,) = body["topics"]
        assert (t["name"], t["error_code"], t["topic_id"]) == ("t", 0, ZERO_UUID)
        assert [(p["partition_index"], p["leader_id"], p["error_code"]) for p in t["partitions"]] == [(0, 3, 0),
                                                                                                        (1, 3, 0)]
        if version >= 1:
            assert raw_call(d.port, METADATA, version, {"topics": []})["topics"] == []


def test_unknown_invalid_and_auto_created_topics(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"num.partitions": 3}) as d:
        req = {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False}
        assert _topics(raw_call(d.port, METADATA, 4, req))["nope"]["error_code"] == 3
        assert _topics(raw_call(d.port, METADATA, 12, req))["nope"]["error_code"] == 3
        bad = raw_call(d.port, METADATA, 9, {"topics": [{"name": "bad/name"}, {"name": "."}]})
        assert [t["error_code"] for t in bad["topics"]] == [17, 17]
        # First answer: LEADER_NOT_AVAILABLE while it is being created (as Kafka answers); then it is there.
        first = raw_call(d.port, METADATA, 4, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        assert _topics(first)["auto"]["error_code"] == 5
        again = _topics(raw_call(d.port, METADATA, 4, {"topics": [{"name": "auto"}]}))["auto"]
        assert again["error_code"] == 0 and len(again["partitions"]) == 3
        # v0-3 have no flag: they always ask for creation.
        assert _topics(raw_call(d.port, METADATA, 1, {"topics": [{"name": "auto1"}]}))["auto1"]["error_code"] == 5
        # Lookup by id: v12+ only (Kafka refuses it before), and no topic here has an id.
        by_id = raw_call(d.port, METADATA, 12, {"topics": [{"name": None, "topic_id": uuid.uuid4()}]})
        assert (by_id["topics"][0]["name"], by_id["topics"][0]["error_code"]) == (None, 100)
        assert raw_call(d.port, METADATA, 10, {"topics": [{"name": None}]})["topics"][0]["error_code"] == 42


def test_auto_creation_disabled_by_config(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"auto.create.topics.enable": "false"}) as d:
        body = raw_call(d.port, METADATA, 1, {"topics": [{"name": "x"}]})
        assert _topics(body)["x"]["error_code"] == 3
        assert raw_call(d.port, METADATA, 1, {"topics": None})["topics"] == []


def test_partition_in_an_offline_dir_has_no_leader(tmp_path: Path) -> None:
    d = Moverd(tmp_path, prefix=SETPRIV, props={"log.dir.health.check.interval.ms": 50})
    with d:
        with admin(d) as a:
            a.create_topics([NewTopic("t", 4, 1)])
        in_d2 = {int(n.rsplit("-", 1)[1]) for n in os.listdir(d.dirs[1]) if n.startswith("t-")}
        assert in_d2, "placement put nothing in d2"
        os.chmod(d.dirs[1], 0)
        try:
            def offline() -> dict | None:
                t = _topics(raw_call(d.port, METADATA, 12, {"topics": [{"name": "t"}]}))["t"]
                return t if any(p["error_code"] for p in t["partitions"]) else None

            t = wait_for(offline, message="the partitions of the failed dir to go offline")
            for p in t["partitions"]:
                if p["partition_index"] in in_d2:
                    assert (p["error_code"], p["leader_id"], p["offline_replicas"], p["isr_nodes"]) == (5, -1, [0], [])
                else:
                    assert (p["error_code"], p["leader_id"], p["offline_replicas"]) == (0, 0, [])
        finally:
            os.chmod(d.dirs[1], 0o755)
