"""mover/zk/status.py's per-replica status, from an in-process LogManager: KIP-179's Progress denominator is -1
when unknown, never 0."""

from __future__ import annotations

from collections.abc import Callable

from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.zk.status import replica_status


def test_a_replica_in_place_reports_its_size_and_an_empty_one_an_unknown_total(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager]) -> None:
    m = manager_of(make_config())
    m.create_topic("t", 2)
    empty, full = TopicPartition("t", 0), TopicPartition("t", 1)
    m.append(full, make_batch([b"x" * 100]))
    here = str(m.replicas[empty].log_dir)
    got = replica_status(m, empty, here, None)
    assert (got["state"], got["bytes_copied"], got["bytes_total"]) == ("completed", 0, -1)
    got = replica_status(m, full, "any", None)
    size = m.replicas[full].log.size  # type: ignore[union-attr]
    assert (got["state"], got["bytes_copied"], got["bytes_total"]) == ("completed", size, size) and size > 0
