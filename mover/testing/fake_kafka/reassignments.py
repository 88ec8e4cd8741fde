"""KIP-455's reassignments and ElectLeaders as a fake Kafka 2.4+ carries them out. Both sides are here because they are
one protocol: the controller's, on the cluster (a reassignment completes after `reassign_polls` answers of
ListPartitionReassignments, a leader stays until ElectLeaders or until it leaves the ISR), and each broker's, which in
ZooKeeper mode refuses them with NOT_CONTROLLER unless it is the controller. Metadata takes its replicas, ISR and
leaders from here, since a reassignment in progress changes all three."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from mover.testing.fake_kafka.broker_state import BrokerState
from mover.wire.errors import ErrorCode

if TYPE_CHECKING:
    from mover.testing.fake_kafka.broker import FakeBroker

_NOT_CONTROLLER = "This is not the correct controller for this cluster."


class ControllerRequests(BrokerState):
    """A FakeBroker's side of KIP-455 and ElectLeaders: refuse them, or hand them to the cluster's controller."""

    def _refused_here(self) -> bool:
        """ZooKeeper mode: a broker that is not the controller carries out none of KIP-455's requests."""
        return self.cluster.version.zookeeper and self.node_id != self.cluster.controller

    def list_partition_reassignments(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        if self._refused_here():
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER, "topics": []}
        return {"error_code": 0, "error_message": None, "topics": self.cluster.list_reassignments(request["topics"])}

    def alter_partition_reassignments(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        if self._refused_here():
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER, "responses": []}
        return {"error_code": 0, "error_message": None,
                "responses": self.cluster.alter_reassignments(request["topics"])}

    def elect_leaders(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        wanted = request["topic_partitions"]
        if self._refused_here():  # Kafka's ZooKeeper-mode controller code puts it on every partition asked
            results = [{"topic": t["topic"], "partition_result": [
                {"partition_id": p, "error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER}
                for p in t["partitions"]]} for t in wanted or []]
        else:
            results = self.cluster.elect_preferred(wanted)
        return {"error_code": 0, "replica_election_results": results}


class Reassignments:
    """FakeCluster's controller: the reassignments in progress, the leaders elected and the replicas and ISR they
    make."""

    lock: threading.RLock
    brokers: dict[int, FakeBroker]
    assignment: dict[tuple[str, int], list[int]]
    reassign_polls: int
    reassigning: dict[tuple[str, int], tuple[list[int], list[int], int]]
    leaders: dict[tuple[str, int], int]

    def replicas(self, tp: tuple[str, int]) -> list[int]:
        """All replicas of `tp`: during a reassignment the target's, then the original's that leave (Kafka's
        order)."""
        if tp in self.reassigning:
            original, target, _ = self.reassigning[tp]
            return target + [b for b in original if b not in target]
        return list(self.assignment[tp])

    def isr_and_leader(self, tp: tuple[str, int], fenced: set[int]) -> tuple[list[int], int]:
        # A reassignment's new replicas join the ISR when it completes (the original ones are in sync).
        original = self.reassigning[tp][0] if tp in self.reassigning else self.assignment[tp]
        isr = [b for b in self.replicas(tp) if b in original and b not in fenced]
        # The leader stays while it is in sync (a new preferred one waits for ElectLeaders); else the first in sync.
        leader = self.leaders.get(tp, -1)
        if leader not in isr:
            leader = isr[0] if isr else -1
            if leader != -1:
                self.leaders[tp] = leader
        return isr, leader

    def list_reassignments(self, wanted: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The reassignments in progress (of `wanted`), after one more poll of each: one that had its polls is
        completed first, its replicas moved to the target's brokers."""
        with self.lock:
            for tp, (original, target, polls) in list(self.reassigning.items()):
                if polls + 1 >= self.reassign_polls:
                    del self.reassigning[tp]
                    self._place(tp, original, target)
                else:
                    self.reassigning[tp] = (original, target, polls + 1)
            names = None if wanted is None else {(t["name"], p) for t in wanted for p in t["partition_indexes"]}
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, (original, target, _) in sorted(self.reassigning.items()):
                if names is None or tp in names:
                    topics.setdefault(tp[0], []).append({
                        "partition_index": tp[1], "replicas": self.replicas(tp),
                        "adding_replicas": [b for b in target if b not in original],
                        "removing_replicas": [b for b in original if b not in target]})
            return [{"name": t, "partitions": ps} for t, ps in topics.items()]

    def _place(self, tp: tuple[str, int], original: list[int], target: list[int]) -> None:
        """A completed reassignment: the target's brokers hold the partition (in their first dir), the others not."""
        size = next((held[tp] for b in self.brokers.values() for held in b.replicas.values() if tp in held), 0)
        for b in self.brokers.values():
            has = any(tp in held for held in b.replicas.values())
            if b.node_id in target and not has:
                b.replicas[b.dirs[0]][tp] = size
            elif b.node_id not in target:
                for held in b.replicas.values():
                    held.pop(tp, None)
        self.assignment[tp] = list(target)

    def alter_reassignments(self, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        responses = []
        with self.lock:
            for t in topics:
                results = []
                for p in t["partitions"]:
                    tp, target = (t["name"], p["partition_index"]), p["replicas"]
                    code, message = ErrorCode.NONE, None
                    if tp not in self.assignment:
                        code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
                    elif target is None:
                        if self.reassigning.pop(tp, None) is None:
                            code, message = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
                    elif unknown := [b for b in target if b not in self.brokers]:
                        code, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker id {unknown[0]}"
                    else:
                        original = self.reassigning[tp][0] if tp in self.reassigning else self.assignment[tp]
                        if list(target) == original:
                            self.reassigning.pop(tp, None)
                        else:
                            self.reassigning[tp] = (list(original), list(target), 0)
                    results.append({"partition_index": tp[1], "error_code": int(code), "error_message": message})
                responses.append({"name": t["name"], "partitions": results})
        return responses

    def elect_preferred(self, wanted: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        with self.lock:
            asked = [(t["topic"], p) for t in wanted for p in t["partitions"]] if wanted is not None else sorted(
                self.assignment)
            fenced = {b.node_id for b in self.brokers.values() if b.fenced}
            results: dict[str, list[dict[str, Any]]] = {}
            for tp in asked:
                if tp not in self.assignment:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    preferred = self.replicas(tp)[0]
                    isr, leader = self.isr_and_leader(tp, fenced)
                    if leader == preferred:
                        code = ErrorCode.ELECTION_NOT_NEEDED
                    elif preferred in isr:
                        self.leaders[tp], code = preferred, ErrorCode.NONE
                    else:
                        code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                results.setdefault(tp[0], []).append({"partition_id": tp[1], "error_code": int(code),
                                                      "error_message": None})
            return [{"topic": t, "partition_result": ps} for t, ps in results.items()]
