"""JSON the tools read from the cluster, nested past Python's recursion limit: refused as bad input (an AdminError,
or a record skipped), never a RecursionError that ends the tool with a traceback."""

from __future__ import annotations

from typing import Any

import pytest

from mover.admin.common import AdminError
from mover.admin.reassign.status_log import _entry
from mover.admin.reassign.zookeeper_view import ZkReassignments

DEEP = b"[" * 100_000 + b"]" * 100_000


class OneZnode:
    """What ZkReassignments needs of a kazoo client: `get(path)` of one znode's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self, path: str) -> tuple[bytes, Any]:
        return self.data, None


def test_a_partition_state_znode_nested_too_deep_is_an_admin_error() -> None:
    with pytest.raises(AdminError, match="is not JSON"):
        ZkReassignments(OneZnode(DEEP))._json("/brokers/topics/t/partitions/0/state")  # type: ignore[arg-type]


def test_a_status_record_nested_too_deep_is_skipped() -> None:
    assert _entry(0, 0, b"request/0", DEEP) is None
