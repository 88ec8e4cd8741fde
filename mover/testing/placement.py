"""Where a broker keeps its replicas, asked in the test's own process (DescribeLogDirs through
mover.admin.client): no CLI to start, so a test or the MoveWatcher can ask often."""

from __future__ import annotations

from mover.admin.client import Client
from mover.admin.log_dir_state import ReplicaDirs, describe_broker, replica_dirs
from mover.testing.history import TP


def describe_placement(client: Client, broker: int | None = None) -> dict[TP, ReplicaDirs]:
    """Where a broker keeps each replica (its dir, and the future copy's while it moves): DescribeLogDirs in this
    process through mover.admin.client, no CLI to start. `broker` None: the only broker Metadata names (a moverd
    is a single-node cluster, its Metadata names only itself)."""
    if broker is None:
        [broker] = client.brokers
    return {(r.topic, r.partition): info for r, info in replica_dirs(broker, describe_broker(client, broker)).items()}


def replica_placement(bootstrap: str) -> dict[TP, ReplicaDirs]:
    with Client(bootstrap) as client:
        return describe_placement(client)
