"""What the cluster's status log says of the log-dir throttles runs hold (mover/audit/executor/throttles.py): each
broker's own value as recorded by the runs still holding it, for tests of execute and the balancer."""

from __future__ import annotations

from mover.admin.client import Client
from mover.admin.reassign.status_store import StatusStore
from mover.audit.executor.throttles import RESOURCE_KIND


def log_dir_holds(bootstrap: str) -> dict[int, dict[str, str]]:
    """broker -> the own throttle recorded by the holds not ended (of any run, alive or not)."""
    client = Client(bootstrap)
    try:
        out: dict[int, dict[str, str]] = {}
        for req in StatusStore(client, tool="test").requests().values():
            for name, hold in req.throttles.items():
                kind, _, broker = name.partition(":")
                if kind == RESOURCE_KIND and hold.ended_at is None:
                    out[int(broker)] = hold.original or {}
        return out
    finally:
        client.close()
