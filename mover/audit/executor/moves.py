"""The plan's moves as execute follows them: one replica from one log dir to another of its broker, or, with the
plan's `to_broker`, to another broker (KIP-435 steps on the step engine)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from mover.admin.common import TopicPartitionReplica
from mover.audit import plan_layout
from mover.audit.errors import AuditError


class State(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"  # by this run
    ALREADY_DONE = "already done"
    GONE = "skipped"  # the partition (or this replica of it) no longer exists
    MISMATCH = "not moved"  # the replica is where the plan did not expect it
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    # Its copy complete but never swapped in (Kafka 3.7.0's KAFKA-16365): only its broker's restart ends it, so
    # the run stops waiting for it (executor/loop.py, _check_unswapped).
    UNSWAPPED = "not swapped in"


# What a run that ends with moves in these states has not done (the command line exits 1).
UNFINISHED = frozenset({State.MISMATCH, State.FAILED, State.UNREACHABLE, State.PENDING, State.UNSWAPPED})
# Moves the run still carries out.
OPEN = frozenset({State.PENDING, State.RUNNING})


@dataclass
class Move:
    cluster: str
    broker: int
    topic: str
    partition: int
    from_dir: str
    to_dir: str
    size_bytes: int
    step: int
    state: State = State.PENDING
    copied: int = 0
    note: str = ""
    started_at: float = 0.0
    progress_at: float = 0.0  # last time the copy grew
    stalled: bool = False
    complete_at: float | None = None  # when a look first found its copy level with the replica (offset lag 0)
    restarts: int = 0  # times the copy vanished on the broker and the move was sent again
    # Its AlterReplicaLogDirs went out but no answer came back (the broker died or the connection broke): the broker
    # may have started the copy, and Kafka resumes such a copy when it is back. A copy found there is this move's.
    unanswered: bool = False
    to_broker: int | None = None  # the plan's optional `to_broker`: the replica moves to that broker (its to_dir)
    # A move between brokers, as classify found its partition: the replicas it starts from and heads to.
    replicas_from: tuple[int, ...] = ()
    replicas_to: tuple[int, ...] = ()

    @property
    def between_brokers(self) -> bool:
        return self.to_broker is not None and self.to_broker != self.broker

    @property
    def replica(self) -> TopicPartitionReplica:
        return TopicPartitionReplica(self.topic, self.partition, self.broker)

    @property
    def disks(self) -> tuple[tuple[str, int, str], tuple[str, int, str]]:
        return (self.cluster, self.broker, self.from_dir), (self.cluster, self.broker, self.to_dir)

    def __str__(self) -> str:
        if self.between_brokers:
            return f"{self.topic}-{self.partition} from broker {self.broker} to {self.to_broker} of {self.cluster}"
        return f"{self.topic}-{self.partition} on broker {self.broker} of {self.cluster}"


def read_moves(plan: Path) -> list[Move]:
    """The plan's moves (plan_layout.MOVES), in step order; a replica moved twice is a broken plan."""
    moves = [Move(r["cluster"], int(r["broker"]), r["topic"], int(r["partition"]), r["from_dir"], r["to_dir"],
                  int(r["size_bytes"]), int(r["step"]),
                  to_broker=int(r["to_broker"]) if r["to_broker"] is not None else None)
             for r in plan_layout.read_moves(plan)]
    seen: set[tuple[str, TopicPartitionReplica]] = set()
    for m in moves:
        key = (m.cluster, m.replica)
        if key in seen:
            raise AuditError(f"plan {plan}: replica {m.replica} of {m.cluster} is moved twice")
        seen.add(key)
    return sorted(moves, key=lambda m: (m.cluster, m.step, m.broker, m.topic, m.partition))
