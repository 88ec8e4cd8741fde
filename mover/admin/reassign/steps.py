"""KIP-435's reassignment steps, pure: from a partition's current replicas (CR), its in-sync replicas and its final
target replicas (FTR), the next target replicas (TR) to hand to the cluster; and which partitions' steps make up the
next batch under the partition and leader movement limits.

The specification's algorithm (KIP-435, "Calculating a Reassignment Step"), and where its text leaves a choice, the
choice made here so that its worked example (0,1,2,3,4) -> (5,6,7,8,9) comes out step by step
(docs/cli.md#kip-435-steps):

1. Only FTR and CR are used (plus the in-sync replicas and the topic's `min.insync.replicas`).
2. Dropped replicas DR: `n = max(R, size(FTR) - size(CR))`; the excess replicas ER = CR - FTR (CR's order); DR = the
   first n of ER. Chosen: replicas out of the ISR go first (dropping them costs no availability), and an in-sync
   replica is only dropped while TR keeps at least min(min.insync.replicas, in-sync replicas of CR) in-sync replicas.
3. New replicas NR:
   a/c. if the partition has fewer in-sync replicas than `min.insync.replicas`, add as many as make it up, even over
        R (the specification's one exception to the limit);
   b. if FTR's preferred leader is not in CR yet it is added first, in a step of its own that drops nothing (the
      example's first step: "+5, new leader (5) is elected"), so that it can be elected before any old replica goes;
   d. otherwise as many as R allows: one new replica per dropped one, plus what FTR's size grows by (so a step keeps
      TR at FTR's size once it is there: the example's step 2 drops [0,1] and adds only 6, 5 being in already),
      never more than R.
4. TR = CR + NR - DR, ordered FTR's members first in FTR's order, then the old replicas still kept in CR's order (so
   the new preferred leader is first as soon as it is in; the example's (5, 0, 1, 2, 3, 4)).
5. The last step is FTR itself, in FTR's order (also a step that only reorders the replicas).

A step "involves a leader movement" when TR's preferred leader differs from CR's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Defaults of mover-reassign's limits (docs/cli.md#kip-435-steps). KIP-435 defaults to Int.MAX ("everything at once",
# Kafka's behaviour); this tool exists to be calm, so: five partitions in flight, one replica each, two leaders.
DEFAULT_MAX_PARTITION_MOVEMENTS = 5
DEFAULT_MAX_REPLICA_MOVEMENTS = 1
DEFAULT_MAX_LEADER_MOVEMENTS = 2


class StepError(ValueError):
    """A reassignment the steps cannot carry out (for example a target smaller than min.insync.replicas)."""


@dataclass(frozen=True)
class Limits:
    """KIP-435's three limits: P partitions in flight, R replicas per partition per step, L leader movements in
    flight."""

    max_partition_movements: int = DEFAULT_MAX_PARTITION_MOVEMENTS
    max_replica_movements: int = DEFAULT_MAX_REPLICA_MOVEMENTS
    max_leader_movements: int = DEFAULT_MAX_LEADER_MOVEMENTS

    def __post_init__(self) -> None:
        for name in ("max_partition_movements", "max_replica_movements", "max_leader_movements"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise StepError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Step:
    """One reassignment step of one partition: current replicas -> target replicas."""

    current: tuple[int, ...]
    target: tuple[int, ...]
    adding: tuple[int, ...]  # NR
    removing: tuple[int, ...]  # DR
    final: bool  # target == FTR

    @property
    def leader_movement(self) -> bool:
        return bool(self.current) and self.target[0] != self.current[0]

    @property
    def replica_movements(self) -> int:
        return len(self.adding)

    @property
    def identical(self) -> bool:
        """Nothing can change now (in-sync replicas too few to drop any, nothing to add): KIP-435's "wait until
        this step is not identical to the current assignment"."""
        return self.target == self.current


def check_target(final_target: Sequence[int], min_insync: int) -> None:
    """What makes a final target impossible to reach in steps: duplicates, emptiness, fewer replicas than
    `min.insync.replicas` (no step could keep it)."""
    if not final_target:
        raise StepError("the target replica list is empty")
    if len(set(final_target)) != len(final_target):
        raise StepError(f"the target replica list {list(final_target)} names a broker twice")
    if len(final_target) < min_insync:
        raise StepError(f"the target replica list {list(final_target)} has {len(final_target)} replicas, fewer than "
                        f"min.insync.replicas={min_insync}: no step can keep it")


def next_step(current: Sequence[int], final_target: Sequence[int], isr: Iterable[int], min_insync: int,
              max_replica_movements: int) -> Step | None:
    """The next KIP-435 step of one partition, or None when `current` already is `final_target` (in its order).

    `isr`: the partition's in-sync replicas now; `min_insync`: its topic's `min.insync.replicas`."""
    cr, ftr = tuple(current), tuple(final_target)
    check_target(ftr, min_insync)
    if len(set(cr)) != len(cr):
        raise StepError(f"the current replica list {list(cr)} names a broker twice")
    if max_replica_movements < 1:
        raise StepError(f"max-replica-movements must be a positive integer, got {max_replica_movements}")
    if cr == ftr:
        return None
    r = max_replica_movements
    in_sync = set(isr) & set(cr)
    ftr_set, cr_set = set(ftr), set(cr)
    excess = [b for b in cr if b not in ftr_set]  # ER, CR's order
    missing = [b for b in ftr if b not in cr_set]  # FTR - CR, FTR's order
    # 3a: how many new replicas the partition needs to get back to min.insync.replicas.
    short = max(0, min_insync - len(in_sync))

    leader = ftr[0]
    if leader not in cr_set:
        # 3b: the new preferred leader first, alone but for what min.insync.replicas needs (3c); nothing dropped.
        added = [leader] + [b for b in missing if b != leader][:max(0, short - 1)]
        return _make(cr, ftr, added, [])

    # 2: DR.
    n = max(r, len(ftr) - len(cr))
    floor = min(min_insync, len(in_sync))
    dropped: list[int] = []
    kept_in_sync = len(in_sync)
    for b in [b for b in excess if b not in in_sync] + [b for b in excess if b in in_sync]:
        if len(dropped) == n:
            break
        if b in in_sync:
            if kept_in_sync - 1 < floor:
                continue
            kept_in_sync -= 1
        dropped.append(b)
    # 3c/3d: NR.
    blocked = min(n, len(excess)) - len(dropped)
    wanted = max(0, len(dropped) + len(ftr) - len(cr)) + blocked
    count = min(len(missing), max(min(wanted, r), short))
    return _make(cr, ftr, missing[:count], dropped)


def _make(cr: tuple[int, ...], ftr: tuple[int, ...], added: list[int], dropped: list[int]) -> Step:
    members = (set(cr) | set(added)) - set(dropped)
    target = tuple([b for b in ftr if b in members] + [b for b in cr if b in members and b not in set(ftr)])
    return Step(cr, target, tuple(added), tuple(dropped), final=target == ftr)


def plan_steps(current: Sequence[int], final_target: Sequence[int], min_insync: int, max_replica_movements: int,
               isr: Iterable[int] | None = None, max_steps: int = 1000) -> list[Step]:
    """Every step from `current` to `final_target`, assuming each step's new replicas join the ISR before the next
    (what the step engine waits for), and that a step identical to the current assignment is waited out until the
    partition's replicas are back in sync (KIP-435's "wait until this step is not identical"). `isr` defaults to all
    of `current`."""
    steps: list[Step] = []
    cr = tuple(current)
    in_sync = set(cr if isr is None else isr)
    while True:
        step = next_step(cr, final_target, in_sync, min_insync, max_replica_movements)
        if step is None:
            return steps
        if step.identical:
            if in_sync >= set(cr):
                raise StepError(f"stuck at {list(cr)} on the way to {list(final_target)} with every replica in sync")
            in_sync = set(cr)
            continue
        steps.append(step)
        if len(steps) > max_steps:
            raise StepError(f"no end after {max_steps} steps from {list(current)} to {list(final_target)}")
        in_sync = (in_sync | set(step.adding)) & set(step.target)
        cr = step.target


@dataclass(frozen=True)
class Candidate:
    """A partition whose next step may start: its key (any hashable, e.g. (topic, partition)) and that step."""

    key: object
    step: Step


def collect_batch(candidates: Sequence[Candidate], limits: Limits, partitions_in_flight: int = 0,
                  leaders_in_flight: int = 0) -> list[Candidate]:
    """KIP-435's "Collecting a reassignment batch": fill the free partition slots with leader movements first (as
    many as the leader limit leaves), then with steps that move no leader. Steps already running count against the
    limits (`partitions_in_flight`, `leaders_in_flight`), so a limit changed while running applies to what starts
    next and nothing running is touched."""
    free = max(0, limits.max_partition_movements - partitions_in_flight)
    free_leaders = max(0, limits.max_leader_movements - leaders_in_flight)
    leader_moves = [c for c in candidates if c.step.leader_movement]
    others = [c for c in candidates if not c.step.leader_movement]
    batch = leader_moves[:min(free, free_leaders)]
    return batch + others[:free - len(batch)]
