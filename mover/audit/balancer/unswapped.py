"""Copies the balancer started that their broker never swapped in: Kafka 3.7.0's KAFKA-16365 (docs/kafka-compat.md).

Once a broker has lost the controller's acknowledgement of a copy's dir it swaps no move in until it restarts, so
the executor ends such a move as not swapped in (executor/loop.py, _check_unswapped). The balancer runs unattended
and must neither pause on those copies (the gates would take them for someone else's moves: the cycle started
them) nor plan more moves on that broker (each would end the same way, a full copy more on its disk). So it keeps
them here, per cluster, says which brokers it leaves out, and asks the brokers at each cycle whether the copies are
still copies: once their broker has restarted and swapped them in (or they are gone), it takes the broker back.

Kept in the cluster, as a note in its status log (`balancer-unswapped`, written by the balancer holding the cluster's
lease, lease.py; `{"version": 1, "copies": [["<topic>", <partition>, <broker>, "<to_dir>"], ...]}`), so whichever
balancer holds the cluster next (started again after a kill or a reboot, a standby on another machine, another
state dir) knows them too. A note that does not read is said and ignored: the copies are then a move the balancer
cannot account for, and it pauses until the broker's restart swaps them in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, some
from mover.admin.reassign.progress import broker_replicas
from mover.audit.balancer import gates
from mover.audit.executor.moves import Move, State

if TYPE_CHECKING:
    import pandas as pd


NOTE = "balancer-unswapped"
VERSION = 1


class Notes(Protocol):
    """Where a cluster's record is kept: its status log (mover/admin/reassign/status_store.py StatusStore)."""

    def read_note(self, name: str) -> Any: ...

    def write_note(self, name: str, doc: Any) -> None: ...


class UnswappedCopies:
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._copies: dict[str, set[gates.OwnMove]] = defaultdict(set)
        self._notes: dict[str, Notes] = {}

    def attach(self, cluster: str, notes: Notes | None) -> None:
        """The cluster's record, read when this balancer takes the cluster (its lease's store: read again when
        the lease was taken anew) and written at each change after."""
        if notes is None or self._notes.get(cluster) is notes:
            return
        self._notes[cluster] = notes
        try:
            doc = notes.read_note(NOTE)
        except (ClientError, AdminError) as e:
            self.say(f"cannot read the copies not swapped in recorded in {cluster}: {e}")
            return
        if doc is None:
            return
        try:
            if doc["version"] != VERSION:
                raise ValueError(f"version {doc['version']!r}, this balancer reads {VERSION}")
            found = {(TopicPartitionReplica(str(t), int(p), int(b)), str(d)) for t, p, b, d in doc["copies"]}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.say(f"ignoring the record of copies not swapped in of {cluster}: {e}")
            return
        self._copies[cluster] |= found

    def _save(self, cluster: str) -> None:
        notes = self._notes.get(cluster)
        if notes is None:
            return
        rows = sorted([r.topic, r.partition, r.broker, d] for r, d in self._copies.get(cluster, ()))
        try:
            notes.write_note(NOTE, {"version": VERSION, "copies": rows})
        except (ClientError, AdminError) as e:  # the cycle goes on: the next holder would pause on the copies
            self.say(f"cannot record the copies not swapped in of {cluster} in the cluster: {e}")

    def record(self, moves: list[Move]) -> None:
        """The moves a cycle ended as not swapped in."""
        changed = set()
        for m in moves:
            copy = (TopicPartitionReplica(m.topic, m.partition, m.broker), m.to_dir)
            if m.state is State.UNSWAPPED and copy not in self._copies[m.cluster]:
                self._copies[m.cluster].add(copy)
                changed.add(m.cluster)
        for cluster in sorted(changed):
            self._save(cluster)

    def own(self, cluster: str) -> set[gates.OwnMove]:
        """The copies the gates must count as the balancer's own."""
        return set(self._copies.get(cluster, ()))

    def brokers(self, cluster: str) -> set[int]:
        return {replica.broker for replica, _ in self._copies.get(cluster, ())}

    def left(self) -> list[str]:
        """What the operator is left to do, said when the balancer stops."""
        out = []
        for cluster, copies in sorted(self._copies.items()):
            if copies:
                brokers = ",".join(map(str, sorted(self.brokers(cluster))))
                out.append(f"{len(copies)} copy(ies) of {cluster} complete but not swapped in (Kafka 3.7.0, "
                           f"KAFKA-16365) until broker(s) {brokers} restart: "
                           f"{some(f'{r.topic}-{r.partition} on broker {r.broker}' for r, _ in sorted(copies))}")
        return out

    def refresh(self, cluster: str, client: Client) -> None:
        """Drops the copies that are no longer copies into their dir (their broker swapped them in after a restart,
        or they were cancelled); a broker that does not answer keeps its copies (asked again next cycle)."""
        copies = self._copies.get(cluster)
        if not copies:
            return
        for broker in sorted({replica.broker for replica, _ in copies}):
            mine = [(replica, d) for replica, d in copies if replica.broker == broker]
            wanted: dict[str, list[int]] = defaultdict(list)
            for replica, _ in mine:
                wanted[replica.topic].append(replica.partition)
            try:
                where, _ = broker_replicas(client, broker, dict(wanted))
            except (ClientError, AdminError):
                continue
            left = {(replica, d) for replica, d in mine
                    if (state := where.get(replica)) is not None and state.future_dir == d}
            if left == set(mine):
                continue
            copies -= set(mine) - left
            self._save(cluster)
            if not left:
                self.say(f"broker {broker} of {cluster} has no copy left unswapped: it takes moves again")

    def leave_out(self, moves: pd.DataFrame) -> pd.DataFrame:
        """The plan's moves less the log-dir moves on a broker holding a copy not swapped in, each such broker said
        once per cycle. Moves between brokers stay: the new replica is created in its dir, not swapped in."""
        if not len(moves):
            return moves
        keep = np.ones(len(moves), dtype=bool)
        within = (moves["to_broker"].isna() | (moves["to_broker"] == moves["broker"])).to_numpy(bool) \
            if "to_broker" in moves else np.ones(len(moves), dtype=bool)
        for cluster in sorted(self._copies):
            brokers = self.brokers(cluster)
            dropped = ((moves["cluster"] == cluster) & moves["broker"].isin(brokers)).to_numpy(bool) & within
            if dropped.any():
                named = some(f"{r.topic}-{r.partition} on broker {r.broker}" for r, _ in sorted(
                    self._copies[cluster], key=lambda c: (c[0].broker, c[0].topic, c[0].partition)))
                self.say(f"leaving broker(s) {','.join(map(str, sorted(brokers)))} of {cluster} out "
                         f"({int(dropped.sum())} log-dir move(s)): Kafka 3.7.0 swaps no move in there until the "
                         f"broker restarts (KAFKA-16365), and copies wait: {named}")
            keep &= ~dropped
        return moves[keep].reset_index(drop=True)
