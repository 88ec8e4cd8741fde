"""CreateTopics, CreatePartitions and DeleteTopics racing on the same topics from many connections, against a real
moverd on real files: Kafka's error codes, every dir online, no stray partition dirs, nothing deleted comes back
after kill -9, and an unrelated topic serving throughout. A real disk error during the race still takes only its dir
offline. (bench/admin_race.py runs the same race for longer.)"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from mover.storage.names import DirKind, parse_partition_dir
from mover.testing.admin_race import race_topic_admin
from mover.testing.batches import make_batch
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce, raw_call, records_of
from mover.testing.wait import wait_for
from mover.wire import ErrorCode
from mover.wire.messages import CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_LOG_DIRS, METADATA

RACED = ["race", "race-b", "race-c"]


def _dir_codes(d: Moverd) -> dict[str, int]:
    body = raw_call(d.port, DESCRIBE_LOG_DIRS, 1, {"topics": None})
    return {r["log_dir"]: r["error_code"] for r in body["results"]}


def _counts(d: Moverd) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in raw_call(d.port, METADATA, 1, {"topics": None})["topics"]}


def _live_partition_dirs(d: Moverd) -> dict[str, set[int]]:
    """topic -> partitions that have a current (not retired) dir on some log dir."""
    out: dict[str, set[int]] = {}
    for p in d.dirs:
        for name in os.listdir(p):
            parsed = parse_partition_dir(name)
            if parsed is not None and parsed.kind == DirKind.CURRENT:
                out.setdefault(parsed.tp.topic, set()).add(parsed.tp.partition)
    return out


class SteadyProducer:
    """Produces to topic `steady` (partition 0) on its own connection while the race runs; every acknowledged
    record must read back."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.acked: list[bytes] = []
        self.errors: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer")

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with RawClient(self.port) as c:
            n = 0
            while not self._stop.is_set():
                value = b"steady-%d" % n
                code = produce(c, "steady", 0, make_batch([value]))["error_code"]
                (self.acked if code == 0 else self.errors).append(value if code == 0 else code)
                n += 1

    def read_back(self) -> list[bytes]:
        with RawClient(self.port) as c:
            got: list[bytes] = []
            while len(got) < len(self.acked):
                part = fetch_partitions(fetch(c, [("steady", 0, len(got))]))[("steady", 0)]
                assert part["error_code"] == 0, part
                got += [v for _, v in records_of(part["records"])]
            return got


def _create_steady(d: Moverd) -> None:
    body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "steady", "num_partitions": 1,
                                                           "replication_factor": 1, "assignments": [],
                                                           "configs": []}], "timeout_ms": 30000})
    assert body["topics"][0]["error_code"] == 0, body


@pytest.mark.parametrize("topics", [["race"], RACED], ids=["one-topic", "three-topics"])
def test_racing_admin_requests_keep_every_dir_online(tmp_path: Path, topics: list[str]) -> None:
    with Moverd(tmp_path) as d:
        _create_steady(d)
        with SteadyProducer(d.port) as steady:
            outcome = race_topic_admin(d.port, topics, threads=4, seconds=3.0)
        assert outcome.unexpected == [], outcome.unexpected[:5]
        # The race happened: each kind of request succeeded at least once.
        for kind in ("create", "grow", "delete"):
            assert outcome.answers[(kind, ErrorCode.NONE)] > 0, outcome.answers
        assert set(_dir_codes(d).values()) == {0}
        assert steady.errors == []
        assert steady.acked and steady.read_back() == steady.acked
        counts = _counts(d)
        # Every published partition has its dir, and no partition dir exists that is not published.
        assert _live_partition_dirs(d) == {t: set(range(n)) for t, n in counts.items()}
        before = counts

        d.kill()
        d.start()
        assert _counts(d) == before, "a deleted topic came back, or partitions went missing, after kill -9"
        assert _live_partition_dirs(d) == {t: set(range(n)) for t, n in before.items()}
        for t in set(before) - {"steady"}:
            assert raw_call(d.port, DELETE_TOPICS, 4, {"topic_names": [t], "timeout_ms": 30000}
                            )["responses"][0]["error_code"] == 0
        wait_for(lambda: not any(n.startswith("race") for p in d.dirs for n in os.listdir(p)),
                 message="the raced topics' dirs to be deleted")
        assert steady.read_back() == steady.acked


def test_create_of_a_topic_being_deleted_is_refused_as_kafka_does(tmp_path: Path) -> None:
    """While a DeleteTopics still renames the old partition dirs, a CreateTopics of the name answers
    TOPIC_ALREADY_EXISTS, "marked for deletion" (Kafka's ZooKeeper-era words); once the delete answered, the name is
    free again."""
    with Moverd(tmp_path, env={"MOVERD_PAUSE_AT": "delete.rename:1.5"}) as d:
        raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1,
                                                        "assignments": [], "configs": []}]})
        answers: list[int] = []
        deleting = threading.Thread(target=lambda: answers.append(raw_call(
            d.port, DELETE_TOPICS, 4, {"topic_names": ["t"], "timeout_ms": 30000})["responses"][0]["error_code"]))
        deleting.start()
        wait_for(lambda: "t" not in _counts(d), message="the delete to unpublish the topic")
        body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 1,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}]})
        deleting.join()
        assert answers == [0]
        (t,) = body["topics"]
        assert (t["error_code"], t["error_message"]) == (ErrorCode.TOPIC_ALREADY_EXISTS,
                                                         'Topic "t" is marked for deletion.')
        body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "t", "num_partitions": 1,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}]})
        assert body["topics"][0]["error_code"] == 0
        assert set(_dir_codes(d).values()) == {0}


def test_a_real_disk_error_during_the_race_takes_only_its_dir_offline(tmp_path: Path) -> None:
    """EIO injected at the 40th partition made: that partition's dir goes offline (a real I/O error), the other
    stays online, serves `steady` (placed there first) and takes the raced creates."""
    with Moverd(tmp_path, env={"MOVERD_FAIL_AT": "create.partition:40:EIO"}) as d:
        _create_steady(d)
        steady_dir = next(str(p) for p in d.dirs if (p / "steady-0").exists())
        with SteadyProducer(d.port) as steady:
            outcome = race_topic_admin(d.port, ["race"], threads=4, seconds=3.0)
        codes = _dir_codes(d)
        assert sorted(codes.values()) == [0, ErrorCode.KAFKA_STORAGE_ERROR], codes
        online = [p for p, c in codes.items() if c == 0]
        # Only the failing create answered 56; everything else is a race code.
        storage_errors = [u for u in outcome.unexpected if " 56 " in u]
        assert len(storage_errors) >= 1 and len(storage_errors) == len(outcome.unexpected), outcome.unexpected[:5]
        if steady_dir in online:
            assert steady.errors == [] and steady.read_back() == steady.acked
        # The remaining dir still takes new topics.
        body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "after", "num_partitions": 2,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}]})
        assert body["topics"][0]["error_code"] == 0


def test_chmod_000_on_one_dir_during_the_race_takes_only_that_dir_offline(tmp_path: Path) -> None:
    """A log dir made unreadable mid-race (moverd without the root capabilities that ignore modes): that dir goes
    offline at its next I/O or probe, the other keeps serving and taking creates."""
    with Moverd(tmp_path, prefix=SETPRIV, props={"log.dir.health.check.interval.ms": 200}) as d:
        _create_steady(d)
        steady_dir = next(p for p in d.dirs if (p / "steady-0").exists())
        victim = next(p for p in d.dirs if p != steady_dir)
        with SteadyProducer(d.port) as steady:
            race = threading.Thread(target=lambda: race_topic_admin(d.port, ["race"], threads=3, seconds=3.0))
            race.start()
            victim.chmod(0)
            try:
                wait_for(lambda: _dir_codes(d)[str(victim)] == ErrorCode.KAFKA_STORAGE_ERROR,
                         message="the unreadable dir to go offline")
                race.join()
            finally:
                victim.chmod(0o755)
        assert _dir_codes(d) == {str(steady_dir): 0, str(victim): ErrorCode.KAFKA_STORAGE_ERROR}
        assert steady.errors == [] and steady.read_back() == steady.acked
        body = raw_call(d.port, CREATE_TOPICS, 5, {"topics": [{"name": "after", "num_partitions": 2,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}]})
        assert body["topics"][0]["error_code"] == 0
        assert (steady_dir / "after-0").exists() and (steady_dir / "after-1").exists()
