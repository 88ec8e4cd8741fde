"""Shared by tests/api: kafka-python's admin client against a real moverd (the rest is in mover/testing)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kafka.admin import KafkaAdminClient

from mover.testing.moverd import Moverd


@contextmanager
def admin(d: Moverd) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=d.bootstrap, request_timeout_ms=20000)
    try:
        yield client
    finally:
        client.close()
