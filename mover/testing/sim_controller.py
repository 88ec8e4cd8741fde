"""`SimController`: a KIP-455 controller simulated in memory, for the step engine's loop (the functions the engine
calls, `partition_states`, `list_reassignments`, `alter_reassignments`, `elect_preferred`, which a test puts in
place of mover.admin.reassign.step_engine's): a step's new replicas join the ISR `sync_polls` polls after it starts,
then the controller drops the old ones; a cancelled step (target None) is kept in `cancelled`, every assignment a
partition went through in `history`."""

from __future__ import annotations

from typing import Any

from mover.admin.reassign.kip455 import Ongoing, PartitionState
from mover.testing.history import TP


class SimController:
    def __init__(self, assignment: dict[TP, tuple[int, ...]], sync_polls: int = 2) -> None:
        self.replicas = dict(assignment)
        self.isr = {tp: set(r) for tp, r in assignment.items()}
        self.leader = {tp: r[0] for tp, r in assignment.items()}
        self.ongoing: dict[TP, tuple[tuple[int, ...], tuple[int, ...], int]] = {}  # target, adding, polls left
        self.sync_polls = sync_polls
        self.history: dict[TP, list[tuple[int, ...]]] = {tp: [r] for tp, r in assignment.items()}
        self.cancelled: set[TP] = set()

    def _complete(self, tp: TP, target: tuple[int, ...], adding: tuple[int, ...]) -> None:
        self.replicas[tp] = target
        self.isr[tp] = (self.isr[tp] | set(adding)) & set(target)
        if self.leader[tp] not in target:
            self.leader[tp] = next(b for b in target if b in self.isr[tp])
        self.history[tp].append(target)

    # the functions the engine calls
    def partition_states(self, client: Any, topics: Any) -> tuple[dict[TP, PartitionState], set[str]]:
        for tp, (target, adding, left) in list(self.ongoing.items()):
            if left <= 1:
                del self.ongoing[tp]
                self._complete(tp, target, adding)
            else:
                self.ongoing[tp] = (target, adding, left - 1)
        return ({tp: PartitionState(self._listed(tp), tuple(sorted(self.isr[tp])), self.leader[tp])
                 for tp in self.replicas}, set())

    def _listed(self, tp: TP) -> tuple[int, ...]:
        if tp not in self.ongoing:
            return self.replicas[tp]
        target, _, _ = self.ongoing[tp]
        return target + tuple(b for b in self.replicas[tp] if b not in target)

    def list_reassignments(self, client: Any, partitions: Any = None) -> dict[TP, Ongoing]:
        out = {}
        for tp, (target, adding, _) in self.ongoing.items():
            removing = tuple(b for b in self.replicas[tp] if b not in target)
            out[tp] = Ongoing(self._listed(tp), adding, removing)
        return out

    def alter_reassignments(self, client: Any, targets: dict[TP, Any]) -> dict[TP, Any]:
        for tp, target in targets.items():
            if target is None:
                self.ongoing.pop(tp, None)
                self.cancelled.add(tp)
                continue
            adding = tuple(b for b in target if b not in self.replicas[tp])
            if adding:
                self.ongoing[tp] = (tuple(target), adding, self.sync_polls)
            else:
                self._complete(tp, tuple(target), ())
        return {}

    def elect_preferred(self, client: Any, partitions: Any) -> dict[TP, int]:
        for tp in partitions:
            if self.replicas[tp][0] in self.isr[tp]:
                self.leader[tp] = self.replicas[tp][0]
        return {}
