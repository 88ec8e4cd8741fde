"""Shared by tests/api: a real moverd, kafka-python's admin client against it, raw requests, test data."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kafka.admin import KafkaAdminClient

from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.wire import Api
from tests.moverd_process import Moverd
from tests.server.harness import RawClient
from tests.storage.batches import make_batch

T = TypeVar("T")

# Generous bound for a condition to become true; reaching it means the test failed.
WAIT_S = 30.0


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def admin(d: Moverd) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=d.bootstrap, request_timeout_ms=20000)
    try:
        yield client
    finally:
        client.close()


def raw_call(d: Moverd, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
    with RawClient(d.port) as c:
        return c.call(api, version, body)[1]


def write_records(partition_dir: Path, tp: TopicPartition, batches: int, record_bytes: int,
                  per_batch: int = 16) -> int:
    """Append kafka-python-built batches to a partition dir of a stopped moverd; returns the bytes written."""
    lg = Log.open(partition_dir, tp, LogConfig())
    try:
        value = b"v" * record_bytes
        for _ in range(batches):
            lg.append(bytearray(make_batch([value] * per_batch)))
        lg.flush()
        return lg.size
    finally:
        lg.close()


def find_partition_dir(d: Moverd, tp: TopicPartition) -> Path:
    for log_dir in d.dirs:
        p = log_dir / f"{tp.topic}-{tp.partition}"
        if p.is_dir():
            return p
    raise AssertionError(f"{tp} is in no log dir of {d.dirs}")
