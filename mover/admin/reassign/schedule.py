"""What a reassignment will do before it does it (issue 34, `--dry-run`): each partition's KIP-435 steps, the batches
the limits let start together, the bytes each step copies, and an estimate of when each step starts and ends.

Pure: partitions, limits and a rate in, a Schedule out; mover-reassign's `--dry-run` prints it and `--execute` prints
its estimate first. The estimate replays the step engine's rules (step_engine.py beside it): a batch is collected with
`steps.collect_batch` whenever a step ends, a partition's next step starts once its previous one ended, and a
step ends when every replica it adds has copied the partition. The copies share the replication throttle as Kafka
applies it, per broker: each broker's leader rate is shared by the copies it serves and its follower rate by the
copies it receives, and a copy goes at the smaller of its two shares (the rates are re-shared whenever a copy starts
or ends). Without a throttle there is no rate to replay: `rate_bytes_per_s=None` gives the steps and batches and no
times. What it cannot know: leader elections, a broker down, appends made during the move (a partition is copied at
the size it has now) and disks slower than the throttle; `--execute` measures the rate as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.steps import Candidate, Limits, Step, collect_batch, plan_steps

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionPlan:
    """One partition of the reassignment: where it is, where it goes, how big the leader's copy is."""

    tp: TopicPartition
    current: tuple[int, ...]
    final: tuple[int, ...]
    min_insync: int
    size_bytes: int
    leader: int = -1  # -1: the first replica

    @property
    def source(self) -> int:
        return self.leader if self.leader >= 0 else self.current[0]


@dataclass(frozen=True)
class ScheduledStep:
    tp: TopicPartition
    index: int  # 1-based, per partition
    step: Step
    batch: int  # 1-based: the batches start in this order
    bytes: int  # what the replicas it adds copy
    start_s: float | None  # seconds from the start; None without a rate
    end_s: float | None


@dataclass
class Schedule:
    steps: list[ScheduledStep] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    @property
    def batches(self) -> int:
        return max((s.batch for s in self.steps), default=0)

    @property
    def eta_s(self) -> float | None:
        ends = [s.end_s for s in self.steps]
        if not ends:
            return 0.0
        return None if any(e is None for e in ends) else max(e for e in ends if e is not None)


@dataclass
class _Copy:
    leader: int
    follower: int
    left: float


def schedule(partitions: Sequence[PartitionPlan], limits: Limits, rate_bytes_per_s: float | None,
             step_gap_s: float = 0.0) -> Schedule:
    """The steps of every partition in the order and batches the step engine starts them, with start and end times
    at `rate_bytes_per_s` per broker (the replication throttle, leader and follower alike), or None.

    `step_gap_s`: what a step takes after its copies are done before its slot is free (the engine sees it done at
    its next poll; the controller then completes it and the next step is sent). The run passes its poll interval:
    on a real Kafka 3.7 the measured gap was 1.1-1.5 s per batch at a 1 s poll (bench/reassign_eta.py)."""
    plans = {p.tp: p for p in partitions}
    pending = {p.tp: plan_steps(p.current, p.final, p.min_insync, limits.max_replica_movements)
               for p in partitions}
    pending = {tp: steps for tp, steps in pending.items() if steps}
    out = Schedule()
    now = 0.0
    batch = 0
    # A running step: its copies, and when its slot frees once they are done (None while they are not).
    running: dict[TopicPartition, tuple[ScheduledStep, list[_Copy], list[float]]] = {}
    done_index: dict[TopicPartition, int] = {tp: 0 for tp in pending}
    while pending or running:
        candidates = [Candidate(tp, steps[0]) for tp, steps in pending.items() if tp not in running]
        started = collect_batch(candidates, limits, len(running),
                                sum(1 for s, _, _ in running.values() if s.step.leader_movement))
        if started:
            batch += 1
        for c in started:
            tp = c.key  # type: ignore[assignment]
            step = pending[tp].pop(0)
            if not pending[tp]:
                del pending[tp]
            plan = plans[tp]
            done_index[tp] += 1
            scheduled = ScheduledStep(tp, done_index[tp], step, batch, plan.size_bytes * len(step.adding), now, None)
            leader = plan.source if plan.source in step.current else step.current[0]
            copies = [_Copy(leader, b, float(plan.size_bytes)) for b in step.adding]
            running[tp] = (scheduled, copies, [])
        if not running:
            break  # nothing could start: the limits allow nothing (not reached with limits >= 1)
        if rate_bytes_per_s is None:
            # No time to replay: steps end in the order they started, one batch after another.
            for tp, (s, _, _) in list(running.items()):
                out.steps.append(ScheduledStep(s.tp, s.index, s.step, s.batch, s.bytes, None, None))
                del running[tp]
            continue
        for _, copies, frees in running.values():
            if not frees and all(c.left <= 1e-6 for c in copies):  # every copy done (or none to make)
                frees.append(now + step_gap_s)
        ended = [tp for tp, (_, _, frees) in running.items() if frees and frees[0] <= now + 1e-9]
        for tp in ended:
            s = running.pop(tp)[0]
            out.steps.append(ScheduledStep(s.tp, s.index, s.step, s.batch, s.bytes, s.start_s, now))
        if ended:
            continue  # slots freed: the next batch starts now
        copying = [c for _, cs, _ in running.values() for c in cs if c.left > 1e-6]
        rates = _shares(copying, rate_bytes_per_s)
        # Replay to the next event: a copy that ends (the shares change there) or a slot that frees.
        dt = min([c.left / rates[id(c)] for c in copying]
                 + [frees[0] - now for _, _, frees in running.values() if frees])
        now += dt
        for c in copying:
            c.left = max(0.0, c.left - rates[id(c)] * dt)
    out.steps.sort(key=lambda s: (s.batch, s.tp, s.index))
    return out


def _shares(copies: list[_Copy], rate: float) -> dict[int, float]:
    """Each copy's rate: the smaller of its leader's rate shared by the copies it serves and its follower's shared by
    the copies it receives (Kafka throttles each broker's replication traffic in and out separately)."""
    serving: dict[int, int] = {}
    receiving: dict[int, int] = {}
    for c in copies:
        if c.left > 0:
            serving[c.leader] = serving.get(c.leader, 0) + 1
            receiving[c.follower] = receiving.get(c.follower, 0) + 1
    return {id(c): min(rate / serving.get(c.leader, 1), rate / receiving.get(c.follower, 1)) for c in copies}


def format_duration(seconds: float) -> str:
    """`1 h 02 min`, `3 min 20 s`, `45 s`: an estimate, to the second below an hour."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def leader_sizes(client: Client, leaders: dict[TopicPartition, int]) -> tuple[dict[TopicPartition, int], list[str]]:
    """Each partition's size on its leader (DescribeLogDirs, one request per leader), and a line per broker that
    could not say (its partitions are then left out of the bytes: an estimate, never a refusal)."""
    wanted: dict[int, dict[str, list[int]]] = {}
    for (topic, partition), leader in leaders.items():
        if leader >= 0:
            wanted.setdefault(leader, {}).setdefault(topic, []).append(partition)
    sizes: dict[TopicPartition, int] = {}
    problems: list[str] = []
    for broker, topics in sorted(wanted.items()):
        try:
            for d in describe_broker(client, broker, topics):
                for p in d.partitions:
                    if not p.is_future and leaders.get((p.topic, p.partition)) == broker:
                        sizes[(p.topic, p.partition)] = max(sizes.get((p.topic, p.partition), 0), p.size)
        except (ClientError, AdminError) as e:
            problems.append(f"broker {broker} did not give its partitions' sizes: {e}")
    return sizes, problems
