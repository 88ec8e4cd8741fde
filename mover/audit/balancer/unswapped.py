"""Copies the balancer started that their broker never swapped in: Kafka 3.7.0's KAFKA-16365 (docs/kafka-compat.md).

Once a broker has lost the controller's acknowledgement of a copy's dir it swaps no move in until it restarts, so
the executor ends such a move as not swapped in (executor/loop.py, _check_unswapped). The balancer runs unattended
and must neither pause on those copies (the gates would take them for someone else's moves: the cycle started
them) nor plan more moves on that broker (each would end the same way, a full copy more on its disk). So it keeps
them here, per cluster, says which brokers it leaves out, and asks the brokers at each cycle whether the copies are
still copies: once their broker has restarted and swapped them in (or they are gone), it takes the broker back.

Kept in the state dir (`unswapped.json`, beside the cycles' plans, whole or not at all: storage's atomic_write), so
a balancer started again on it after a kill or a host reboot knows them too. One started on another state dir (or
another machine) does not: it finds such a copy as a move it did not start and pauses, as for any copy it cannot
account for, until the broker's restart swaps it in.
`{"version": 1, "copies": {"<cluster>": [["<topic>", <partition>, <broker>, "<to_dir>"], ...]}}`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, some
from mover.admin.reassign.progress import broker_replicas
from mover.audit.balancer import gates
from mover.audit.executor.moves import Move, State
from mover.storage.files import atomic_write

if TYPE_CHECKING:
    import pandas as pd


FILE_NAME = "unswapped.json"


class UnswappedCopies:
    def __init__(self, say: Callable[[str], None], path: Path | None = None) -> None:
        self.say = say
        self.path = path
        self._copies: dict[str, set[gates.OwnMove]] = defaultdict(set)

    def load(self) -> None:
        """What an earlier balancer on this state dir kept. A file that does not read is said and ignored: the
        copies are then someone else's moves to the gates, a pause until the broker's restart swaps them in."""
        path = self.path
        if path is None:
            return
        try:
            data = json.loads(path.read_text())
            for cluster, rows in data["copies"].items():
                for topic, partition, broker, to_dir in rows:
                    self._copies[str(cluster)].add((TopicPartitionReplica(str(topic), int(partition), int(broker)),
                                                    str(to_dir)))
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            self._copies.clear()
            self.say(f"ignoring {path}: {e}")

    def _save(self) -> None:
        if self.path is None:
            return
        rows = {cluster: sorted([r.topic, r.partition, r.broker, d] for r, d in copies)
                for cluster, copies in sorted(self._copies.items()) if copies}
        try:
            atomic_write(self.path, (json.dumps({"version": 1, "copies": rows}) + "\n").encode())
        except OSError as e:  # the cycle goes on: a restart would pause on the copies instead of knowing them
            self.say(f"cannot keep {self.path}: {e.strerror or e}")

    def record(self, moves: list[Move]) -> None:
        """The moves a cycle ended as not swapped in."""
        before = {c: set(v) for c, v in self._copies.items()}
        for m in moves:
            if m.state is State.UNSWAPPED:
                self._copies[m.cluster].add((TopicPartitionReplica(m.topic, m.partition, m.broker), m.to_dir))
        if {c: v for c, v in self._copies.items() if v} != {c: v for c, v in before.items() if v}:
            self._save()

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
            self._save()
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
