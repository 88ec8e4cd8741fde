"""Produce's run path (`produce_run_now`, the server's Route.fast_many) against one-by-one appends (`produce_one_now`).

The same requests go to two brokers' LogManagers: one takes them one at a time, the other as the connection does
with runs (a run from each position; what it does not answer goes one at a time). The answers and the bytes of
the segment files must be the same: the run path may only save work, never change an offset, an error or a byte.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mover.api.produce import NOT_NOW, QuickAppends, produce_one_now, produce_run_now
from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.wire import RequestHeader


def broker(root: Path) -> Any:
    cfg = BrokerConfig.from_properties({"log.dirs": str(root), "log.segment.delete.delay.ms": "0",
                                        "message.max.bytes": "4000"})
    m = LogManager(cfg)
    m.startup()
    m.create_topic("t", 2)
    for p in (0, 1):  # the first append of a replica checks its snapshots (file I/O): never on the quick paths
        m.append(TopicPartition("t", p), make_batch([b"warm"], timestamp_ms=1))
    return SimpleNamespace(manager=m, config=cfg)


def request(records: bytes | None, *, partition: int = 0, acks: int = -1, topic: str = "t") -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def mixed_requests(rng: random.Random) -> list[tuple[RequestHeader, dict[str, Any]]]:
    good = make_batch([b"g"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    out = []
    for i in range(300):
        kind = rng.choices(["one", "many", "other", "corrupt", "big", "idem", "acks0", "none"],
                           [60, 10, 6, 3, 2, 3, 2, 2])[0]
        if kind == "one":
            body = request(make_batch([bytes([65 + i % 26]) * rng.randint(1, 600)]))
        elif kind == "many":
            body = request(make_batch([b"m%d" % j for j in range(rng.randint(2, 9))]))
        elif kind == "other":
            body = request(make_batch([b"o"]), partition=1)
        elif kind == "corrupt":
            body = request(bytes(corrupt))
        elif kind == "big":
            body = request(make_batch([b"x" * 5000]))  # over message.max.bytes: 10
        elif kind == "idem":
            body = request(make_batch([b"i"], producer_id=7, producer_epoch=0, base_sequence=i))
        elif kind == "acks0":
            body = request(make_batch([b"z"]), acks=0)
        else:
            body = request(None)
        out.append((RequestHeader(0, rng.choice([3, 7, 9]), i, "c"), body))
    return out


def one_by_one(b: Any, quick: QuickAppends, header: RequestHeader, body: dict[str, Any]) -> Any:
    got = produce_one_now(b, header.api_version, body, quick)
    if got is NOT_NOW:  # acks=0 and idempotent first appends go to the handler; here: the same append, blocking
        from mover.api.produce import _produce_partition

        p = body["topic_data"][0]["partition_data"][0]
        code, resp = _produce_partition(b, header.api_version, "t", p["index"], p["records"])
        return ("handler", code, resp)
    return got


def segment_bytes(root: Path) -> dict[str, bytes]:
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in sorted(root.glob("t-*/*.log"))}


def test_runs_answer_and_write_exactly_as_one_by_one(tmp_path: Path) -> None:
    reqs = mixed_requests(random.Random(16))
    single, runs = broker(tmp_path / "single"), broker(tmp_path / "runs")
    try:
        expected = [one_by_one(single, QuickAppends(), h, b) for h, b in reqs]
        quick = QuickAppends()
        got: list[Any] = []
        ran = 0
        i = 0
        while i < len(reqs):
            answers = produce_run_now(runs, reqs[i:i + 64], quick)
            if answers:
                assert 2 <= len(answers)
                got += answers
                ran += len(answers)
                i += len(answers)
            else:
                got.append(one_by_one(runs, quick, *reqs[i]))
                i += 1
        assert got == expected
        assert ran > 150, ran  # most requests did go through runs: the comparison is not vacuous
        assert segment_bytes(tmp_path / "runs") == segment_bytes(tmp_path / "single")
        assert single.manager.replicas[TopicPartition("t", 0)].log.log_end_offset > 300
    finally:
        single.manager.shutdown()
        runs.manager.shutdown()


def test_a_run_stops_before_what_it_cannot_append_alike() -> None:
    """What ends a run, checked without storage: the first request that is not an appendable one-partition batch of
    the same partition, or the byte limit. Nothing is appended (the manager would raise if asked)."""

    class NoManager:
        topics: dict[str, int] = {}

    b = SimpleNamespace(manager=NoManager(), config=SimpleNamespace(message_max_bytes=1 << 20))
    h = RequestHeader(0, 9, 1, "c")
    one = request(make_batch([b"a"]))
    assert produce_run_now(b, [(h, one)], QuickAppends()) == []  # a run needs two
    for stopper in (request(make_batch([b"a"]), partition=1), request(make_batch([b"a"]), acks=0),
                    request(make_batch([b"a"], producer_id=1, producer_epoch=0, base_sequence=0)),
                    request(None)):
        # The first request and the stopper: fewer than two appendable, so nothing.
        assert produce_run_now(b, [(h, one), (h, stopper)], QuickAppends()) == []
    # Two of them, but the topic is unknown here: nothing either (the usual way answers it).
    assert produce_run_now(b, [(h, one), (h, one)], QuickAppends()) == []
