"""One balancer acts on a cluster at a time, wherever each runs: a lease per cluster in the cluster's status log (the
topic the tools keep their requests in, mover/admin/reassign/status_store.py `claim_lease`), held with a heartbeat.

A balancer that finds another's lease alive pauses that cluster (`another_balancer`, one line naming the holder's
host and pid) and asks again at each cycle: when the holder stops (its lease stops) or dies (its heartbeat 3
periods late), it takes the cluster over. So a second balancer on the same cluster is a standby, not a fight.
A holder whose heartbeats were late long enough for another to take its lease (a frozen host) learns it at its next
heartbeat and pauses the cluster at its next check. The lease is the cluster's, so two balancers with different
state dirs, on different machines, agree; the state-dir lock (loop.py `_held`) keeps two off one state dir.

`mover-audit execute` holds the same lease shared while it carries out a plan (`PlanLease`): runs of different plans
go on side by side (each holds its own brokers' throttles), but not beside a balancer. An execute that finds a
balancer holding the cluster is refused (one line naming it); a balancer that finds an execute running pauses that
cluster (`plan_executing`) and takes it once the run ends. The claims are ordered by the log, so an execute and a
balancer started at the same moment never both move the cluster's replicas.
"""

from __future__ import annotations

from collections.abc import Callable

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.status_store import STALE_HEARTBEATS, Request, StatusStore, where
from mover.audit.balancer import gates
from mover.audit.errors import AuditError

TOOL = "mover-audit balance"
LEASE = "balancer"


def _in_the_way(holder: Request) -> gates.Pause:
    if holder.shared_claim:
        return gates.Pause(gates.PLAN_EXECUTING,
                           f"a plan is being carried out on this cluster by {where(holder.owner)} (request "
                           f"{holder.id}); this balancer takes it over when it ends")
    return gates.Pause(gates.ANOTHER_BALANCER,
                       f"another balancer holds this cluster: {where(holder.owner)} (request {holder.id}); this one "
                       f"takes over when it stops, or {STALE_HEARTBEATS} heartbeats after its last")


def _balancer_in(name: str, holder: Request, then: str) -> str:
    return f"cluster {name}: a balancer moves its replicas ({where(holder.owner)}, request {holder.id}): {then}"


class ClusterLeases:
    """The leases this balancer holds, by cluster name."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._held: dict[str, ClusterRequestStore] = {}
        # Clusters whose lease was taken since the balancer last asked (taken(): it then puts back what runs that
        # are over left there, e.g. the balancer it took the cluster from).
        self._fresh: set[str] = set()

    def check(self, name: str, client: Client) -> gates.Pause | None:
        """None when this balancer holds the lease of cluster `name` (taken now if free), else why it may not act
        there: another balancer holds it, a plan is being executed there, or the status log cannot be read (fail
        closed: no lease, no moves)."""
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
            return gates.Pause(gates.ANOTHER_BALANCER, f"cannot hold the balancer's lease in the cluster: {e}")
        if holder is not None:
            store.close()
            return _in_the_way(holder)
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


class PlanLease:
    """mover-audit execute's share of each cluster's lease while it runs (the module's docstring)."""

    def __init__(self, tool: str, say: Callable[[str], None]) -> None:
        self.tool = tool
        self.say = say
        self._held: dict[str, ClusterRequestStore] = {}

    def take(self, name: str, client: Client) -> None:
        """Holds cluster `name`'s lease shared; AuditError when a balancer holds it or it cannot be asked (fail
        closed: a run that cannot tell whether a balancer moves the same disks does not start)."""
        try:
            store = ClusterRequestStore.open(client, tool=self.tool, say=self.say)
            holder = store.lease(LEASE, shared=True)
        except (ClientError, AdminError) as e:
            raise AuditError(f"cluster {name}: cannot tell whether a balancer acts on it (its lease in the cluster's "
                             f"status log): {e}") from None
        if holder is not None:
            store.close()
            raise AuditError(_balancer_in(name, holder, "stop it, or let it balance, before executing a plan there"))
        self._held[name] = store

    def balancer_of(self, name: str, client: Client) -> str | None:
        """Read only (--dry-run): why take() would refuse cluster `name` now, or None."""
        try:
            with ClusterRequestStore.open(client, tool=self.tool) as store:
                holders = [r for r in store.store.lease_holders(LEASE) if not r.shared_claim]
        except (ClientError, AdminError) as e:
            return f"cluster {name}: cannot tell whether a balancer acts on it: {e}"
        return _balancer_in(name, holders[0], "execute would be refused until it stops") if holders else None

    def lost(self) -> str | None:
        """Why the run must start no more moves: a balancer took a cluster over while this run's heartbeats were
        late (a frozen host), and the two must not both start moves there; None while every share is held."""
        lost = sorted(name for name, store in self._held.items() if store.lost)
        if not lost:
            return None
        return (f"a balancer took cluster(s) {', '.join(lost)} over while this run's heartbeats were late: starting "
                f"no more moves; the running ones end")

    def release(self) -> None:
        for store in self._held.values():
            store.close()
        self._held.clear()
