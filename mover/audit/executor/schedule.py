"""Which log-dir moves may start now: pure, a function of the moves' states and the limits (what the tests and
--dry-run exercise). KIP-435's idea applied to disks: a few at a time, the next as earlier ones end."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from mover.admin.limits import DiskLimits
from mover.audit.executor.moves import OPEN, Move, State


def running_between_brokers(moves: list[Move]) -> dict[str, int]:
    """Partitions moving between brokers now, per cluster (a partition of several moved replicas counts once)."""
    partitions: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for m in moves:
        if m.between_brokers and m.state is State.RUNNING:
            partitions[m.cluster].add((m.topic, m.partition))
    return {cluster: len(ps) for cluster, ps in partitions.items()}


def startable(moves: list[Move], limits: DiskLimits) -> list[Move]:
    """The pending log-dir moves that may start now, in plan order, without exceeding any limit once started. The
    partitions moving between brokers take their share of the cluster's limit (`--max-moves` bounds both kinds).
    A move not swapped in holds no slot (it copies nothing more) but holds every other move of its broker: Kafka
    3.7.0 swaps no move in there until the broker restarts (KAFKA-16365), so each would end the same way, one full
    copy more on its destination.
    A log-dir move of a partition the plan also moves between brokers waits until that move has ended: the
    reassignment changes the partition while Kafka 3.7.0 waits for its controller to acknowledge the copy's new dir,
    and a copy whose acknowledgement is lost sits complete and is never swapped in (docs/audit.md, "Steps")."""
    per_cluster: dict[str, int] = defaultdict(int, running_between_brokers(moves))
    reassigned = {(m.cluster, m.topic, m.partition) for m in moves if m.between_brokers and m.state in OPEN}
    per_broker: dict[tuple[str, int], int] = defaultdict(int)
    per_disk: dict[tuple[str, int, str], int] = defaultdict(int)
    # A broker's step s waits for its earlier steps: the plan may free space on a disk before filling it.
    first_open_step: dict[tuple[str, int], int] = {}
    moves = [m for m in moves if not m.between_brokers]  # those run in the step engine's lane
    for m in moves:
        if m.state in OPEN:
            key = (m.cluster, m.broker)
            first_open_step[key] = min(first_open_step.get(key, m.step), m.step)
        if m.state is State.RUNNING:
            per_cluster[m.cluster] += 1
            per_broker[(m.cluster, m.broker)] += 1
            for d in set(m.disks):
                per_disk[d] += 1
    stuck = {(m.cluster, m.broker) for m in moves if m.state is State.UNSWAPPED}
    chosen = []
    for m in moves:
        if (m.state is not State.PENDING or m.step > first_open_step[(m.cluster, m.broker)]
                or (m.cluster, m.broker) in stuck):
            continue
        if (m.cluster, m.topic, m.partition) in reassigned:
            continue
        disks = set(m.disks)
        if (per_cluster[m.cluster] < limits.per_cluster and per_broker[(m.cluster, m.broker)] < limits.per_broker
                and all(per_disk[d] < limits.per_disk for d in disks)):
            chosen.append(m)
            per_cluster[m.cluster] += 1
            per_broker[(m.cluster, m.broker)] += 1
            for d in disks:
                per_disk[d] += 1
    return chosen


def held_by_unswapped(moves: list[Move]) -> list[tuple[Move, Move]]:
    """The pending log-dir moves of a broker with a move not swapped in (State.UNSWAPPED: only a restart of the
    broker ends it), each with that broker's first such move."""
    holders: dict[tuple[str, int], Move] = {}
    for m in moves:
        if m.state is State.UNSWAPPED and not m.between_brokers:
            holders.setdefault((m.cluster, m.broker), m)
    return [(m, holders[(m.cluster, m.broker)]) for m in moves
            if m.state is State.PENDING and not m.between_brokers and (m.cluster, m.broker) in holders]


def wave_seconds(wave: list[Move], rate_bytes_per_s: float) -> float:
    """How long a wave takes if its moves share each broker's move throttle (moverd's and Kafka's intra-broker rate
    is per broker): its busiest broker's bytes at that rate."""
    per_broker: dict[tuple[str, int], int] = defaultdict(int)
    for m in wave:
        per_broker[(m.cluster, m.broker)] += m.size_bytes
    return max(per_broker.values(), default=0) / rate_bytes_per_s


def waves(moves: list[Move], limits: DiskLimits) -> list[list[Move]]:
    """--dry-run: the steps if each wave of started moves ended together. The moves between brokers are the step
    engine's (their estimate is its own): taken as ended, so the log-dir moves of their partitions are counted."""
    sim = [replace(m, state=State.DONE) if m.between_brokers and m.state in OPEN else replace(m) for m in moves]
    out = []
    while True:
        wave = startable(sim, limits)
        if not wave:
            return out
        out.append(wave)
        for m in sim:
            if m in wave or m.state is State.RUNNING:
                m.state = State.DONE
