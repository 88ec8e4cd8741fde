"""mover/admin/reassign/progress.py on hand-made cluster answers: each status of KIP-179's --progress table, and the
per-replica status (log dir, bytes, lag, Progress) the one call returns."""

from __future__ import annotations

from typing import Any

import pytest

from mover.admin.client import ClientError
from mover.admin.reassign import progress
from mover.admin.reassign.kip455 import PartitionState
from mover.admin.reassign.progress import Progress, replica_statuses, table
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_LOG_DIRS


class Broker:
    """One broker's answers to ListOffsets (replica_id -2: its log end offset of each partition) and DescribeLogDirs
    (each partition in /d1, `size` bytes; a future copy in /d2 of `future` bytes), or a failure."""

    def __init__(self, ends: dict[tuple[str, int], int] | None, sizes: dict[tuple[str, int], int] | None = None,
                 future: dict[tuple[str, int], int] | None = None) -> None:
        self.ends = ends
        self.sizes = sizes or {}
        self.future = future or {}
        self.asked: list[dict[str, Any]] = []

    def version_for(self, api: Any) -> int:
        return 1

    def call(self, api: Any, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        if self.ends is None:
            raise ClientError("connection refused")
        if api is DESCRIBE_LOG_DIRS:
            def rows(copies: dict[tuple[str, int], int], future: bool) -> list[dict[str, Any]]:
                return [{"name": t, "partitions": [{"partition_index": p, "partition_size": n, "offset_lag": 0,
                                                    "is_future_key": future}]} for (t, p), n in copies.items()]
            return {"error_code": 0, "results": [
                {"log_dir": "/d1", "error_code": 0, "total_bytes": -1, "usable_bytes": -1,
                 "topics": rows(self.sizes, False)},
                {"log_dir": "/d2", "error_code": 0, "total_bytes": -1, "usable_bytes": -1,
                 "topics": rows(self.future, True)}]}
        self.asked.append(body)
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0 if (t["name"], p["partition_index"]) in self.ends
             else 3, "offset": self.ends.get((t["name"], p["partition_index"]), -1)}
            for p in t["partitions"]]} for t in body["topics"]]}


class Cluster:
    def __init__(self, brokers: dict[int, Broker]) -> None:
        self.brokers = {b: ("127.0.0.1", 9000 + b) for b in brokers}
        self._brokers = brokers

    def connection(self, broker: int) -> Broker:
        return self._brokers[broker]


def test_every_status_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    states = {("t", 0): PartitionState((1, 2, 3), (1, 2), 1), ("t", 1): PartitionState((4, 1), (4, 1), 4)}
    monkeypatch.setattr(progress, "partition_states", lambda client, topics: (states, {"gone"}))
    brokers = {1: Broker({("t", 0): 500, ("t", 1): 70}), 2: Broker({("t", 0): 500}), 3: Broker({("t", 0): 120}),
               4: Broker(None)}
    got = replica_statuses(Cluster(brokers), [("t", 0, 1), ("t", 0, 2), ("t", 0, 3), ("gone", 0, 1), ("t", 9, 1),
                                              ("t", 0, 42), ("t", 1, 2), ("t", 1, 1)])  # type: ignore[arg-type]
    assert [(s.broker, s.status, s.lag) for s in got] == [
        (1, "In sync", 0), (2, "In sync", 0), (3, "Behind: 380 messages behind", 380), (1, "Unknown topic", None),
        (1, "Unknown partition", None), (42, "Unknown broker", None), (2, "Broker does not host this partition", None),
        (1, "Unknown: broker 4 did not answer (connection refused)", None)]
    # The offsets are asked as a debugging replica, which Kafka answers from any replica's own log.
    assert {b["replica_id"] for b in brokers[3].asked} == {-2}
    assert table(got[:2]) == ["Topic  Partition  Broker  Status",
                              "-" * 33,
                              "t      0          1       In sync",
                              "t      0          2       In sync"]


def test_per_replica_status_from_the_one_call() -> None:
    """Log dir, bytes, the leader's bytes as the denominator, the lag and a future copy, from one call given the
    partitions' states; an empty leader's total is unknown (None), never 0; a broker down is an error code."""
    states = {("t", 0): PartitionState((1, 2), (1,), 1), ("e", 0): PartitionState((1, 2), (1, 2), 1)}
    brokers = {1: Broker({("t", 0): 900, ("e", 0): 0}, sizes={("t", 0): 4000, ("e", 0): 0}),
               2: Broker({("t", 0): 300, ("e", 0): 0}, sizes={("t", 0): 1000, ("e", 0): 0}, future={("t", 0): 250})}
    got = replica_statuses(Cluster(brokers), [("t", 0, 2), ("e", 0, 2)], states=states)  # type: ignore[arg-type]
    t0, e0 = got
    assert (t0.log_dir, t0.bytes, t0.lag, t0.future_dir, t0.future_bytes) == ("/d1", 1000, 600, "/d2", 250)
    assert (t0.progress.numerator, t0.progress.denominator, t0.progress.complete) == (1000, 4000, False)
    assert t0.status_ms > 0 and t0.status == "Behind: 600 messages behind"
    assert (e0.progress.denominator, e0.progress.complete, e0.status) == (None, True, "In sync")
    brokers[2].ends = None
    down = replica_statuses(Cluster(brokers), [("t", 0, 2)], states=states, lag=False)[0]  # type: ignore[arg-type]
    assert down.progress.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    assert str(down.progress.error) == "broker unreachable"


def test_progress_denominator_is_never_zero() -> None:
    p = Progress(0, 0)
    assert p.denominator is None and p.amount() == "0 bytes of unknown total"
    p.denominator = 200
    p.numerator = 50
    assert p.amount() == "50 of 200 bytes (25.0%)"
    p.denominator = -1
    assert p.denominator is None
