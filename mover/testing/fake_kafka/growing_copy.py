"""The other kind of fake: a mover.server Server (moverd's own transport) answering Metadata and DescribeLogDirs as
Kafka does for one copy that grows, then is swapped in. Unlike FakeCluster it is not wire-exact per release; it exists
so a test can add handlers of its own beside Kafka's log-dir APIs (mover-log-dirs' progress and reassign tests hook
AlterReplicaLogDirs or IncrementalAlterConfigs into it) without writing a server."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

from mover.api import with_api_defaults
from mover.testing.server import Running, serve
from mover.wire.messages import DESCRIBE_LOG_DIRS, METADATA


class GrowingCopyBroker:
    """A broker with Kafka's log-dir APIs only (no api 32100): a copy that grows, then is swapped in."""

    def __init__(self) -> None:
        self.port = 0
        self.calls = 0
        self.lock = threading.Lock()

    def metadata(self, header: object, request: dict[str, Any]) -> dict[str, Any]:
        topics = [{"error_code": 0, "name": "big", "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}]}]
        return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}], "cluster_id": "c",
                "controller_id": 0, "topics": topics if request["topics"] is None or request["topics"] else []}

    def describe_log_dirs(self, header: object, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
            step = self.calls
        current_dir, future = ("/d1", min(250 * step, 1000)) if step <= 4 else ("/d2", None)

        def part(size: int, future_key: bool) -> dict[str, Any]:
            return {"name": "big", "partitions": [{"partition_index": 0, "partition_size": size, "offset_lag": 0,
                                                    "is_future_key": future_key}]}

        results = []
        for path in ("/d1", "/d2"):
            topics = []
            if path == current_dir:
                topics.append(part(1000, False))
            if path == "/d2" and future is not None:
                topics.append(part(future, True))
            results.append({"error_code": 0, "log_dir": path, "topics": topics, "total_bytes": 10_000,
                            "usable_bytes": 5_000})
        return {"results": results}


def growing_copy_broker(extra: dict[int, Any] | None = None
                        ) -> tuple[GrowingCopyBroker, AbstractContextManager[Running]]:
    """The fake and its server (not yet started): `with server as running: fake.port = running.port`."""
    fake = GrowingCopyBroker()
    handlers = {METADATA.key: fake.metadata, DESCRIBE_LOG_DIRS.key: fake.describe_log_dirs, **(extra or {})}
    return fake, serve(with_api_defaults(handlers))
