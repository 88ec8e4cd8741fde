"""Copies the balancer started that their broker never swapped in: Kafka 3.7.0's KAFKA-16365 (docs/kafka-compat.md).

Once a broker has lost the controller's acknowledgement of a copy's dir it swaps no move in until it restarts, so
the executor ends such a move as not swapped in (executor/loop.py, _check_unswapped). The balancer runs unattended
and must neither pause on those copies (the gates would take them for someone else's moves: the cycle started
them) nor plan more moves on that broker (each would end the same way, a full copy more on its disk). So it keeps
them here, per cluster, says which brokers it leaves out, and asks the brokers at each cycle whether the copies are
still copies: once their broker has restarted and swapped them in (or they are gone), it takes the broker back.

Held in memory only: a balancer started afresh finds such a copy as a move it did not start and pauses, as it does
for any copy it cannot account for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, some
from mover.admin.reassign.progress import broker_replicas
from mover.audit.balancer import gates
from mover.audit.executor.moves import Move, State

if TYPE_CHECKING:
    import pandas as pd


class UnswappedCopies:
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._copies: dict[str, set[gates.OwnMove]] = defaultdict(set)

    def record(self, moves: list[Move]) -> None:
        """The moves a cycle ended as not swapped in."""
        for m in moves:
            if m.state is State.UNSWAPPED:
                self._copies[m.cluster].add((TopicPartitionReplica(m.topic, m.partition, m.broker), m.to_dir))

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
            copies -= set(mine) - left
            if not left:
                self.say(f"broker {broker} of {cluster} has no copy left unswapped: its disks are balanced again")

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
