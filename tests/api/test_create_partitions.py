"""CreatePartitions (kafka-topics.sh --alter --partitions) against a real moverd: Kafka's answers for each kind of bad
request, the new partitions all or none, durable once acknowledged, and usable at once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import NewPartitions, NewTopic

from mover.testing.batches import make_batch
from mover.testing.kafka_home import kafka_home
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce_many, records_of
from mover.wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DESCRIBE_LOG_DIRS, METADATA
from tests.api.helpers import admin


def _create(c: RawClient, **topics: int) -> None:
    body = c.call(CREATE_TOPICS, 4, {"topics": [
        {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
        for n, p in topics.items()], "timeout_ms": 60000, "validate_only": False})[1]
    assert {t["error_code"] for t in body["topics"]} == {0}, body


def _grow(c: RawClient, version: int, *topics: tuple[str, int, Any], validate_only: bool = False) -> list[tuple]:
    body = c.call(CREATE_PARTITIONS, version, {"topics": [
        {"name": n, "count": count,
         "assignments": None if assignments is None else [{"broker_ids": ids} for ids in assignments]}
        for n, count, assignments in topics],
        "timeout_ms": 60000, "validate_only": validate_only})[1]
    return [(r["name"], r["error_code"], r["error_message"]) for r in body["results"]]


def _counts(c: RawClient) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in c.call(METADATA, 1, {"topics": None})[1]["topics"]}


def _partition_dirs(d: Moverd, topic: str) -> list[str]:
    return sorted(n for p in d.dirs for n in os.listdir(p) if n.startswith(f"{topic}-"))


@pytest.mark.parametrize("version", range(CREATE_PARTITIONS.valid.lo, CREATE_PARTITIONS.valid.hi + 1))
def test_every_version_answers_as_kafka(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        _create(c, grow=2, same=2, shrink=3, dup=1, many=1, wrong=1, assigned=1, checked=1)
        # (the count is checked before the assignments, as Kafka does: "shrink" names a broker that is not here)
        got = _grow(c, version, ("grow", 5, None), ("same", 2, None), ("shrink", 2, [[9]]), ("ghost", 2, None),
                    ("dup", 2, None), ("dup", 3, None), ("many", 2, [[0], [0]]), ("wrong", 2, [[7]]),
                    ("assigned", 3, [[0], [0]]))
        codes = {(n, code) for n, code, _ in got}
        assert codes == {("grow", 0), ("same", 37), ("shrink", 37), ("ghost", 3), ("dup", 42), ("many", 39),
                         ("wrong", 39), ("assigned", 0)}, got
        assert len(got) == 9  # both entries of the duplicate name are answered
        messages = {n: m for n, _, m in got}
        assert messages["grow"] is None
        assert messages["same"] == "Topic already has 2 partition(s)."
        assert messages["shrink"] == "The topic shrink currently has 3 partition(s); 2 would not be an increase."
        assert messages["dup"] == "Duplicate topic name."
        assert messages["many"] == ("Attempted to add 1 additional partition(s), but only 2 assignment(s) were "
                                    "specified.")
        # validate_only checks and changes nothing.
        assert _grow(c, version, ("checked", 4, None), ("same", 1, None), validate_only=True) == [
            ("checked", 0, None), ("same", 37, "The topic same currently has 2 partition(s); 1 would not be an "
                                               "increase.")]
        counts = _counts(c)
        assert {t: counts[t] for t in ("grow", "same", "shrink", "dup", "many", "wrong", "assigned", "checked")} == {
            "grow": 5, "same": 2, "shrink": 3, "dup": 1, "many": 1, "wrong": 1, "assigned": 3, "checked": 1}
        assert _partition_dirs(d, "grow") == [f"grow-{p}" for p in range(5)]
        assert _partition_dirs(d, "checked") == ["checked-0"]
        described = {(t["name"], p["partition_index"]) for r in c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})[1][
            "results"] for t in r["topics"] for p in t["partitions"]}
        assert {("grow", p) for p in range(5)} <= described


def test_a_grow_that_fails_half_way_adds_nothing_and_acknowledged_partitions_survive_kill_9(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The topic's 2 partitions are creations 1 and 2; growing to 10 makes 3-10, and the 6th fails as if the process
    # were out of descriptors: the 3 made before it are removed, the count stays 2.
    monkeypatch.setenv("MOVERD_FAIL_AT", "create.partition:6:EMFILE")
    d = Moverd(tmp_path)
    with d, RawClient(d.port) as c:
        _create(c, t=2)
        [(_, code, message)] = _grow(c, 3, ("t", 10, None))
        assert code == 56 and "EMFILE" in message
        assert _counts(c)["t"] == 2
        assert _partition_dirs(d, "t") == ["t-0", "t-1"]  # neither the new partitions nor retired copies of them
        assert _grow(c, 3, ("t", 10, None)) == [("t", 0, None)]
        written = [("t", p, make_batch([f"rec-{p}".encode()])) for p in range(10)]
        assert {r["error_code"] for r in produce_many(c, written).values()} == {0}
    monkeypatch.delenv("MOVERD_FAIL_AT")
    d.start()
    try:
        d.kill()
        d.start()
        with RawClient(d.port) as c:
            assert _counts(c)["t"] == 10
            got = fetch_partitions(fetch(c, [("t", p, 0) for p in range(10)]))
            for p in range(10):
                assert [v for _, v in records_of(got[("t", p)]["records"])] == [f"rec-{p}".encode()]
    finally:
        d.stop()


def test_kafka_python_and_kafka_topics_sh(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, admin(d) as a:
        a.create_topics([NewTopic("t", 1, 1)])
        a.create_partitions({"t": NewPartitions(3)})
        home = kafka_home()
        if home is not None:
            tool = home / "bin" / "kafka-topics.sh"
            env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx128m", "LOG_DIR": str(tmp_path / "tool-logs")}
            done = subprocess.run([str(tool), "--bootstrap-server", d.bootstrap, "--alter", "--topic", "t",
                                   "--partitions", "6"], capture_output=True, text=True, env=env, timeout=120,
                                  stdin=subprocess.DEVNULL)
            assert done.returncode == 0, done.stdout + done.stderr
            refused = subprocess.run([str(tool), "--bootstrap-server", d.bootstrap, "--alter", "--topic", "t",
                                      "--partitions", "2"], capture_output=True, text=True, env=env, timeout=120,
                                     stdin=subprocess.DEVNULL)
            assert refused.returncode != 0
            assert "currently has 6 partition(s); 2 would not be an increase" in refused.stdout + refused.stderr
        want = 6 if home is not None else 3
        assert _partition_dirs(d, "t") == [f"t-{p}" for p in range(want)]
        assert len(a.describe_topics(["t"])[0]["partitions"]) == want
