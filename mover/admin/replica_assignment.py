"""Where a topic's replicas would go on a set of brokers: Kafka's `AdminUtils.assignReplicasToBrokers`, the
proposal kafka-reassign-partitions.sh --generate prints (docs/cli.md, mover-reassign, "--generate" says what it does and
why).

Rack-unaware (no broker has a rack): the first replica of partition p is broker (p + start) of the list, round
robin; the others follow it at an increasing shift, which grows by one each time the partitions have gone once
round the brokers, so a broker's followers are spread over the other brokers. Rack-aware (every broker has a rack):
the same round robin over a list that alternates racks, a follower skipped while it would put a second replica on
a rack (or broker) and some rack (or broker) has none yet. `start` and the shift are random in Kafka, as here: the
caller passes the `random.Random`, so a test can seed it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from mover.admin.common import AdminError


class AssignmentError(AdminError):
    """The brokers cannot hold the replicas (Kafka's InvalidReplicationFactor / AdminOperationException)."""


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers taken one from each rack in turn (racks by name, brokers by id within a rack), until all are taken:
    rack1: 0,1,2; rack2: 3,4,5 -> 0,3,1,4,2,5."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    order: list[int] = []
    depth = 0
    while len(order) < len(racks):
        order.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return order


def _follower(first: int, shift: int, k: int, n: int) -> int:
    """Index of the k-th follower candidate of a partition whose first replica is at `first`: never `first`
    itself (the step is 1..n-1)."""
    return (first + 1 + (shift + k) % (n - 1)) % n


def assign_replicas(brokers: Sequence[int], racks: Mapping[int, str | None], partitions: int,
                    replication_factor: int, rng: random.Random | None = None,
                    start: int | None = None, shift: int | None = None) -> dict[int, list[int]]:
    """{partition: replicas} for partitions 0..`partitions`-1 on `brokers` (in the order given: Kafka takes the
    cluster's). `racks`: each broker's rack or None; either all brokers have one or none does. `start` (the index of
    partition 0's first replica) and `shift` (of the first round's followers) are drawn from `rng` unless given
    (Kafka's fixedStartIndex gives both the same value)."""
    if partitions <= 0:
        raise AssignmentError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise AssignmentError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise AssignmentError(f"Replication factor: {replication_factor} larger than available brokers: "
                              f"{len(brokers)}.")
    with_rack = {b: r for b in brokers if (r := racks.get(b)) is not None}
    if with_rack and len(with_rack) != len(brokers):
        raise AssignmentError("Not all brokers have rack information for replica rack aware assignment.")
    order = rack_alternated(with_rack) if with_rack else list(brokers)
    n = len(order)
    rng = rng or random.Random()
    # Kafka draws the start first, then the shift.
    if start is None:
        start = rng.randrange(n)
    if shift is None:
        shift = rng.randrange(n)
    n_racks = len(set(with_rack.values()))
    result: dict[int, list[int]] = {}
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1  # once round the brokers: the followers move on, so the same sequences do not repeat
        first = (p + start) % n
        replicas = [order[first]]
        if not with_rack:
            replicas += [order[_follower(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            used_racks = {with_rack[order[first]]}
            k = 0
            while len(replicas) < replication_factor:
                broker = order[_follower(first, shift * n_racks, k, n)]
                k += 1
                rack = with_rack[broker]
                # A rack gets a second replica only once every rack has one; a broker a second only once every
                # broker has one (never, as replication_factor <= n, but kept as Kafka keeps it).
                if (rack in used_racks and len(used_racks) < n_racks) or (broker in replicas
                                                                          and len(replicas) < n):
                    continue
                replicas.append(broker)
                used_racks.add(rack)
        result[p] = replicas
    return result
