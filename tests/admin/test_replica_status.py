"""mover/admin/replica_status.py on hand-made cluster answers: each status of KIP-179's --progress table."""

from __future__ import annotations

from typing import Any

import pytest

from mover.admin import replica_status
from mover.admin.client import ClientError
from mover.admin.reassign.kip455 import PartitionState
from mover.admin.replica_status import replica_statuses, table


class Broker:
    """One broker's answer to ListOffsets (replica_id -2): its log end offset of each partition, or a failure."""

    def __init__(self, ends: dict[tuple[str, int], int] | None) -> None:
        self.ends = ends
        self.asked: list[dict[str, Any]] = []

    def call(self, api: Any, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        self.asked.append(body)
        if self.ends is None:
            raise ClientError("connection refused")
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
    monkeypatch.setattr(replica_status, "partition_states", lambda client, topics: (states, {"gone"}))
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
