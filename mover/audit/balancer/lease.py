"""One balancer acts on a cluster at a time, wherever each runs: a lease per cluster in the cluster's status log (the
topic the tools keep their requests in, mover/admin/reassign/status_store.py `claim_lease`), held with a heartbeat.

A balancer that finds another's lease alive pauses that cluster (`another_balancer`, one line naming the holder's
host and pid) and asks again at each cycle: when the holder stops (its lease stops) or dies (its heartbeat 3
periods late), it takes the cluster over. So a second balancer on the same cluster is a standby, not a fight.
A holder whose heartbeats were late long enough for another to take its lease (a frozen host) learns it at its next
heartbeat and pauses the cluster at its next check. The lease is the cluster's, so two balancers with different
state dirs, on different machines, agree; the state-dir lock (loop.py `_held`) keeps two off one state dir.
"""

from __future__ import annotations

from collections.abc import Callable

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.status_store import STALE_HEARTBEATS, StatusStore, where

TOOL = "mover-audit balance"
LEASE = "balancer"


class ClusterLeases:
    """The leases this balancer holds, by cluster name."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._held: dict[str, ClusterRequestStore] = {}
        # Clusters whose lease was taken since the balancer last asked (taken(): it then puts back what runs that
        # are over left there, e.g. the balancer it took the cluster from).
        self._fresh: set[str] = set()

    def check(self, name: str, client: Client) -> str | None:
        """None when this balancer holds the lease of cluster `name` (taken now if free), else why it may not act
        there: another balancer holds it, or the status log cannot be read (fail closed: no lease, no moves)."""
        store = self._held.get(name)
        if store is not None and not store.lost:
            return None
        if store is not None:
            self.say(f"the lease of {name} was taken over by another balancer while this one's heartbeats were late")
            store.close()
            del self._held[name]
        try:
            store = ClusterRequestStore.open(client, tool=TOOL)
            holder = store.lease(LEASE)
        except (ClientError, AdminError) as e:
            return f"cannot hold the balancer's lease in the cluster: {e}"
        if holder is not None:
            store.close()
            return (f"another balancer holds this cluster: {where(holder.owner)} (request {holder.id}); this one "
                    f"takes over when it stops, or {STALE_HEARTBEATS} heartbeats after its last")
        self._held[name] = store
        self._fresh.add(name)
        return None

    def taken(self, name: str) -> bool:
        """Whether the lease of `name` was taken since the last call (once per taking)."""
        fresh = name in self._fresh
        self._fresh.discard(name)
        return fresh

    def notes(self, name: str) -> StatusStore | None:
        """Where the holder of cluster `name`'s lease keeps what the next holder must know (StatusStore notes)."""
        store = self._held.get(name)
        return store.store if store is not None else None

    def release(self) -> None:
        """Leave every lease (stopped: another balancer takes the cluster over at its next check)."""
        for store in self._held.values():
            store.close()
        self._held.clear()
