"""The step engine: carries a reassignment between brokers out in KIP-435 steps on a live cluster (KIP-455 APIs).

Each poll it asks the cluster where every partition stands (Metadata: replicas, ISR, leader;
ListPartitionReassignments: what is moving), then
* a running step is over when the cluster no longer lists it and the partition's replicas are its target, i.e. all
  its new replicas joined the ISR and the controller dropped the old ones; a step that moves the preferred leader is
  over once ElectLeaders (preferred) made its first replica the leader;
* for the partitions with no step running it computes the next step (mover/admin/reassign/steps.py) from the current
  replicas and ISR; a step identical to the current assignment, or a partition without an in-sync replica, waits;
* the batch that may start is chosen by `collect_batch` under the limits as they are now (a limits file, re-read
  when it changes, applies to what starts next; running steps are never touched), throttles are set for it, and
  it is started with AlterPartitionReassignments;
* the log dirs the file asks for (`log_dirs`) are placed as KIP-113 says (new_replica_dirs.py beside it): each
  replica a step adds gets its AlterReplicaLogDirs before the step starts and re-sent after, so the broker creates it
  in that dir; once a partition is at its final replicas, the ones that stayed on their broker are moved between its
  dirs. A dir a broker refuses fails that partition;
* KIP-179 progress of every new replica: bytes it holds (DescribeLogDirs on its broker) of the bytes the leader
  holds (null when the leader cannot be asked); a replica that does not grow for `stall_s` is reported stalled.

Where things stand is always read from the cluster, so a run that was stopped resumes where the cluster is. It
raises AdminError for what the user must fix and never exits: the command lines own exit codes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mover.admin.client import Client, ClientError
from mover.admin.common import ClusterUnavailable, TopicPartitionReplica, error_name
from mover.admin.limits import LimitsFile, RunLimits
from mover.admin.reassign.kip455 import (
    Ongoing,
    PartitionState,
    TopicPartition,
    alter_reassignments,
    elect_preferred,
    list_reassignments,
    partition_states,
)
from mover.admin.reassign.new_replica_dirs import NewReplicaDirs
from mover.admin.reassign.progress import (
    IN_PROGRESS,
    UNREACHABLE,
    Failure,
    ReplicaStatus,
    progress_line,
    replica_statuses,
)
from mover.admin.reassign.replication_throttle import ReplicationThrottle
from mover.admin.reassign.steps import Candidate, Limits, Step, StepError, collect_batch, next_step
from mover.wire.errors import RETRIABLE, ErrorCode

DEFAULT_POLL_S = 1.0
DEFAULT_STALL_S = 120.0
# How long a new replica's broker is given to create it, its log dir re-sent every 100 ms (Kafka's tool: --timeout).
DEFAULT_LOG_DIR_TIMEOUT_S = 10.0
# How often a preferred-leader election that did not take is asked again.
ELECT_RETRY_S = 5.0
# A broker's metadata may lag the controller a moment: a step just started that shows neither in
# ListPartitionReassignments nor in the replicas is given this long before it counts as cancelled.
METADATA_LAG_S = 10.0


@dataclass
class PartitionRun:
    tp: TopicPartition
    final: tuple[int, ...]
    min_insync: int
    step: Step | None = None
    step_started: float = 0.0
    steps_done: int = 0
    electing_since: float | None = None
    done: bool = False
    error: Failure | None = None
    # KIP-179 status of each replica the running step adds (by broker), and when each last grew (the stall watch).
    progress: dict[int, ReplicaStatus] = field(default_factory=dict)
    grew_at: dict[int, float] = field(default_factory=dict)
    stalled: set[int] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"{self.tp[0]}-{self.tp[1]}"

    def follow(self, adding: Iterable[int]) -> None:
        """A step adding `adding` runs: each new replica's status starts at nothing copied."""
        now = time.monotonic()
        self.progress = {b: ReplicaStatus(self.tp[0], self.tp[1], b, IN_PROGRESS) for b in adding}
        self.grew_at = dict.fromkeys(self.progress, now)
        self.stalled = set()

    def fail(self, code: int, message: str) -> None:
        self.done, self.error = True, Failure(code, message)


@dataclass
class Sample:
    """What was running at one moment (for the tests' "never more than the limits")."""

    partitions: int
    leaders: int
    max_replicas_added: int
    limits: Limits


@dataclass
class EngineResult:
    done: list[str]
    failed: dict[str, Failure]
    remaining: list[str]
    stopped: bool
    samples: list[Sample]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.remaining


class ClusterView(Protocol):
    """Where the engine reads and starts steps: KIP-455's APIs (KafkaApis below, over kip455.py) or, for
    brokers before Kafka 2.4, ZooKeeper (zookeeper_view.py)."""

    one_batch_at_a_time: bool  # a new batch only once nothing of ours runs (ZooKeeper's one znode)

    def partition_states(self, topics: Iterable[str]) -> tuple[dict[TopicPartition, PartitionState], set[str]]: ...

    def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                           ) -> dict[TopicPartition, Ongoing]: ...

    def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]
                            ) -> dict[TopicPartition, tuple[int, str | None]]: ...

    def elect_preferred(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]: ...


class KafkaApis:
    """The engine's view through KIP-455's APIs (Kafka 2.4+, any live broker)."""

    one_batch_at_a_time = False  # steps start whenever the limits allow

    def __init__(self, client: Client) -> None:
        self.client = client

    def partition_states(self, topics: Iterable[str]) -> tuple[dict[TopicPartition, PartitionState], set[str]]:
        return partition_states(self.client, topics)

    def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, Ongoing]:
        return list_reassignments(self.client, partitions)

    def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        return alter_reassignments(self.client, targets)

    def elect_preferred(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return elect_preferred(self.client, partitions)


class Lane(Protocol):
    """One kind of step the loop drives, under its own limits: replicas moving between brokers (StepEngine,
    AlterPartitionReassignments) or between the log dirs of a broker (mover-audit execute, AlterReplicaLogDirs)."""

    def observe(self, first: bool) -> None:
        """Ask the cluster how the running steps stand and end those that are over (`first`: the first poll)."""

    def advance(self, start: bool) -> None:
        """Start the steps its limits allow now (only when `start`: not stopped), and keep its progress."""

    def busy(self) -> bool:
        """Steps are running."""

    def pending(self) -> bool:
        """Steps are still to start."""


def drive(lanes: Sequence[Lane], *, stopped: Callable[[], bool], sleep: Callable[[float], None], poll_s: float,
          before_start: Callable[[], None] | None = None, on_tick: Callable[[], None] | None = None,
          before_sleep: Callable[[], None] | None = None) -> None:
    """The one step loop of both tools: each poll every lane observes, then (unless stopped) starts what its limits
    allow; it ends when nothing runs and nothing is left to start, or once stopped, when nothing runs any more (a
    stop never touches the running steps)."""
    first = True
    while True:
        for lane in lanes:
            lane.observe(first)
        first = False
        if before_start is not None:
            before_start()
        start = not stopped()
        for lane in lanes:
            lane.advance(start)
        if on_tick is not None:
            on_tick()
        if not any(lane.busy() for lane in lanes) and (stopped() or not any(lane.pending() for lane in lanes)):
            return
        if before_sleep is not None:
            before_sleep()
        sleep(poll_s)


def adopt(ongoing: Ongoing, final: tuple[int, ...]) -> Step | None:
    """A reassignment already running on a partition is ours to follow when it heads to `final`: it adds only
    replicas of the final target and removes only replicas that are not. Otherwise None (someone else's)."""
    if not set(ongoing.adding) <= set(final) or set(ongoing.removing) & set(final):
        return None
    target = ongoing.target
    return Step(ongoing.original, target, ongoing.adding, ongoing.removing, final=target == final)


class StepEngine:
    def __init__(self, client: Client, runs: list[PartitionRun], limits: RunLimits, throttle: ReplicationThrottle,
                 *, say: Callable[[str], None], limits_path: Path | None = None, poll_s: float = DEFAULT_POLL_S,
                 stall_s: float = DEFAULT_STALL_S, stop: threading.Event | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_tick: Callable[[StepEngine], None] | None = None, cluster: ClusterView | None = None,
                 log_dirs: Mapping[TopicPartitionReplica, str] | None = None,
                 log_dir_timeout_s: float = DEFAULT_LOG_DIR_TIMEOUT_S) -> None:
        self.client = client
        self.cluster: ClusterView = cluster or KafkaApis(client)
        self.runs = {r.tp: r for r in runs}
        self.limits = limits
        self.throttle = throttle
        # Where its event lines go, one at a time (the run's caller prints them, or shows them above its bars).
        self.say = say
        self.limits_file = LimitsFile(limits_path) if limits_path is not None else None
        self.poll_s = poll_s
        self.stall_s = stall_s
        self.stop = stop or threading.Event()
        self.on_tick = on_tick
        # Asked every poll: True when the run must start nothing more (its request was cancelled elsewhere).
        self.should_stop = should_stop
        self.external_stop = False
        self.samples: list[Sample] = []
        self.topics = sorted({tp[0] for tp in self.runs})
        self._leader_sizes: dict[TopicPartition, int | None] = {}
        self._states: tuple[dict[TopicPartition, PartitionState], dict[TopicPartition, Ongoing]] | None = None
        # The warning of the outage in progress (said once, not every poll), or None while the cluster answers.
        self._outage: str | None = None
        # Where the file wants each replica (log_dirs other than "any"), placed step by step.
        self.dirs = NewReplicaDirs(client, log_dirs, timeout_s=log_dir_timeout_s) if log_dirs else None

    # ------------------------------------------------------------------------------------------------ the loop

    def run(self) -> EngineResult:
        def sleep(seconds: float) -> None:
            if self.stop.is_set():
                time.sleep(seconds)  # the event is set: wait() would return at once
            else:
                self.stop.wait(seconds)

        drive([self], stopped=self.stop.is_set, sleep=sleep, poll_s=self.poll_s,
              on_tick=(lambda: self.on_tick(self)) if self.on_tick is not None else None)
        return self.result()

    # ------------------------------------------------------------------------------------------------ as a Lane

    def observe(self, first: bool) -> None:
        """Where the cluster is: running steps followed to their end (limits file and cancellation checked first)."""
        self._states = None
        if self.limits_file is not None:
            self._reload_limits()
        if self.should_stop is not None and not self.external_stop and self.should_stop():
            self.external_stop = True
            self.stop.set()
            self.say("The request was cancelled: starting no more steps")
        try:
            states, _ = self.cluster.partition_states(self.topics)
            ongoing = self.cluster.list_reassignments(list(self.runs))
            for run in self.running():
                self._follow(run, states.get(run.tp), ongoing.get(run.tp))
        except (ClientError, ClusterUnavailable) as e:
            # A broker went away mid-call (the next poll asks another one), no broker answers, or the answer is a
            # retriable code (a KRaft controller restarting or failing over): the steps go on in the cluster
            # meanwhile, so the run waits for it rather than leave them unfollowed.
            self._unavailable(e)
            return
        self._answered()
        self._states = (states, ongoing)

    def _unavailable(self, e: Exception) -> None:
        if str(e) != self._outage:
            self.say(f"warning: {e}; retrying")
            self._outage = str(e)

    def _answered(self) -> None:
        if self._outage is not None:
            self.say("The cluster answers again")
            self._outage = None

    def advance(self, start: bool) -> None:
        """The next steps the limits allow (unless stopped), then progress, samples and the replicas' throttle."""
        if self._states is None:
            return  # the cluster did not answer this poll
        states, ongoing = self._states
        try:
            if start and not self.stop.is_set():
                self._start(states, ongoing)
            if self.dirs is not None:
                self._dir_errors(self.dirs.poll())
            self._progress(states)
            running = self.running()
            self.samples.append(Sample(len(running), sum(r.step.leader_movement for r in running if r.step),
                                       max((len(r.step.adding) for r in running if r.step), default=0),
                                       self.limits.steps))
            self.throttle.set_replicas({r.tp: (r.step.current, r.step.adding) for r in running if r.step})
        except (ClientError, ClusterUnavailable) as e:
            self._unavailable(e)

    def busy(self) -> bool:
        return bool(self.running())

    def pending(self) -> bool:
        return any(not r.done and r.step is None for r in self.runs.values())

    def running(self) -> list[PartitionRun]:
        return [r for r in self.runs.values() if r.step is not None]

    def result(self) -> EngineResult:
        return EngineResult(
            done=[r.name for r in self.runs.values() if r.done and r.error is None],
            failed={r.name: r.error for r in self.runs.values() if r.error is not None},
            remaining=[r.name for r in self.runs.values() if not r.done],
            stopped=self.stop.is_set(), samples=self.samples)

    def tick(self, start: bool = True) -> bool:
        """One poll; True when every partition is done (or failed)."""
        self.observe(False)
        self.advance(start)
        return all(r.done for r in self.runs.values())

    def _reload_limits(self) -> None:
        assert self.limits_file is not None
        new = self.limits_file.read_if_changed(self.limits, self.say)
        if new is not None:
            self.limits = new
            self.say(f"Limits changed: {new.describe()} (from the next step)")
            if new.throttle is not None:
                self.throttle.set_rate([], new.throttle)

    # ------------------------------------------------------------------------------------------------ steps

    def _follow(self, run: PartitionRun, state: PartitionState | None, ongoing: Ongoing | None) -> None:
        step = run.step
        assert step is not None
        if state is None:
            run.step = None
            run.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the partition no longer exists")
            self.say(f"Partition {run.name}: {run.error}")
            return
        if ongoing is not None:
            return
        if state.replicas != step.target:
            in_flight = set(step.current) | set(step.target)
            if not self.external_stop and (set(state.replicas) == in_flight or (
                    state.replicas == step.current and time.monotonic() - run.step_started < METADATA_LAG_S)):
                return  # this broker's metadata has not caught up with the controller yet
            # Not listed and not at the target: cancelled (by --cancel or someone else); the next step starts from
            # wherever the partition is now.
            self.say(f"Partition {run.name}: step to {list(step.target)} ended at {list(state.replicas)} "
                     f"(cancelled?); continuing from there")
            run.step = None
            run.progress.clear()
            return
        if step.leader_movement and state.leader != step.target[0]:
            now = time.monotonic()
            if run.electing_since is None or now - run.electing_since >= ELECT_RETRY_S:
                if run.electing_since is None:
                    self.say(f"Partition {run.name}: electing preferred leader {step.target[0]}")
                failed = self.cluster.elect_preferred([run.tp])
                run.electing_since = now
                if failed and run.tp in failed:
                    self.say(f"Partition {run.name}: preferred leader election: {error_name(failed[run.tp])}; "
                             f"retrying")
            return
        run.steps_done += 1
        run.step = None
        run.electing_since = None
        if self.dirs is not None:
            self._dir_errors(self.dirs.step_over(run.tp))
            if step.final:
                self._dir_errors(self.dirs.settle(run.tp, state.replicas))
        for p in run.progress.values():
            p.progress.complete = True
        self.say(f"Partition {run.name}: step {run.steps_done} done, replicas {list(state.replicas)}"
                 + (" (final)" if step.final else ""))
        if step.final:
            run.done = True

    def _start(self, states: dict[TopicPartition, PartitionState], ongoing: dict[TopicPartition, Ongoing]) -> None:
        candidates: list[Candidate] = []
        for run in self.runs.values():
            if run.done or run.step is not None:
                continue
            state = states.get(run.tp)
            if state is None:
                run.fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the partition no longer exists")
                continue
            if run.tp in ongoing:
                adopted = adopt(ongoing[run.tp], run.final)
                if adopted is None:
                    run.fail(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"being reassigned by someone else to {list(ongoing[run.tp].target)}")
                    self.say(f"Partition {run.name}: {run.error}; left alone")
                else:
                    # A step left running (a run that was left at once, a broker's metadata late) copies under this
                    # run's throttle, not whatever rate the run that started it set.
                    self.throttle.set_rate({*adopted.current, *adopted.target}, self.limits.throttle)
                    run.step = adopted
                    run.step_started = time.monotonic()
                    run.follow(adopted.adding)
                    self.say(f"Partition {run.name}: following the running step {list(adopted.current)}"
                             f" -> {list(adopted.target)}")
                    if self.dirs is not None:
                        self._dir_errors(self.dirs.after_step({run.tp: adopted.adding}))
                continue
            try:
                step = next_step(state.replicas, run.final, state.isr, run.min_insync,
                                 self.limits.steps.max_replica_movements)
            except StepError as e:
                run.fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e))
                continue
            if step is None:
                if state.leader != run.final[0] and run.final[0] in state.isr:
                    self.cluster.elect_preferred([run.tp])
                run.done = True
                self.say(f"Partition {run.name}: at its target {list(run.final)}")
                if self.dirs is not None:
                    self._dir_errors(self.dirs.settle(run.tp, state.replicas))
                continue
            if step.identical or not state.isr:
                continue  # KIP-435: wait until the step differs from the assignment and some replica is in sync
            candidates.append(Candidate(run.tp, step))
        running = self.running()
        if running and self.cluster.one_batch_at_a_time:
            return
        leaders = sum(1 for r in running if r.step is not None and r.step.leader_movement)
        batch = collect_batch(candidates, self.limits.steps, len(running), leaders)
        if not batch:
            return
        involved = {b for c in batch for b in (*c.step.current, *c.step.target)}
        self.throttle.set_rate(involved, self.limits.throttle)
        moving = {r.tp: (r.step.current, r.step.adding) for r in running if r.step is not None}
        moving.update({c.key: (c.step.current, c.step.adding) for c in batch})  # type: ignore[misc]
        self.throttle.set_replicas(moving)  # before the copies start, so none runs a moment unthrottled
        if self.dirs is not None:
            # KIP-113: the broker learns the new replica's dir before the step makes it create the replica.
            no_dir = self.dirs.before_step({c.key: c.step.adding for c in batch})  # type: ignore[misc]
            for tp, error in no_dir.items():
                run = self.runs[tp]
                run.done, run.error = True, error
                self.say(f"Partition {run.name}: {error}; its step is not started")
            batch = [c for c in batch if c.key not in no_dir]
            if not batch:
                return
        refused = self.cluster.alter_reassignments({c.key: c.step.target for c in batch})  # type: ignore[misc]
        for c in batch:
            run = self.runs[c.key]  # type: ignore[index]
            if c.key in refused:
                code, message = refused[c.key]  # type: ignore[index]
                self.say(f"Partition {run.name}: step to {list(c.step.target)} refused: {error_name(code)}"
                         + (f": {message}" if message else ""))
                if code not in _RETRIABLE:
                    run.fail(code, error_name(code))
                continue
            run.step = c.step
            run.step_started = time.monotonic()
            run.follow(c.step.adding)
            moves = []
            if c.step.adding:
                moves.append("+" + str(list(c.step.adding)))
            if c.step.removing:
                moves.append("-" + str(list(c.step.removing)))
            self.say(f"Partition {run.name}: step {run.steps_done + 1} {list(c.step.current)} -> "
                     f"{list(c.step.target)} {' '.join(moves)}".rstrip()
                     + (", new preferred leader" if c.step.leader_movement else ""))
        if self.dirs is not None:
            started = {c.key: c.step.adding for c in batch if c.key not in refused}  # type: ignore[misc]
            self._dir_errors(self.dirs.after_step(started))

    def _dir_errors(self, errors: Mapping[TopicPartition, Failure]) -> None:
        """A broker refused a replica's log dir: the partition fails (its running step goes on to its end)."""
        for tp, error in errors.items():
            run = self.runs[tp]
            if run.error is None:
                run.error = error
                self.say(f"Partition {run.name}: {error}")

    # ------------------------------------------------------------------------------------------------ progress

    def _progress(self, states: dict[TopicPartition, PartitionState]) -> None:
        """KIP-179 progress of every new replica of the running steps: its size of the leader's size (the one
        per-replica call, mover/admin/reassign/progress.py, without the lag: sizes are what a copy shows)."""
        running = self.running()
        wanted = [TopicPartitionReplica(r.tp[0], r.tp[1], b) for r in running for b in r.progress]
        seen = {s.replica: s for s in replica_statuses(self.client, wanted, lag=False, states=states)}
        # A broker not answering (or not in the metadata) is asked again on a fresh connection at the next poll.
        for broker in sorted({s.broker for s in seen.values() if _unreachable(s)}):
            try:
                self.client.reconnect(broker)
            except ClientError:
                pass
        now = time.monotonic()
        for run in running:
            for b, before in list(run.progress.items()):
                s = seen.get(TopicPartitionReplica(run.tp[0], run.tp[1], b))
                if s is None:
                    continue
                if _unreachable(s):
                    before.progress.fail(ErrorCode.BROKER_NOT_AVAILABLE, UNREACHABLE)
                    continue
                p = s.progress
                p.error = None  # a replica this broker's metadata does not list yet has copied nothing: no error
                p.complete = p.complete or before.progress.complete
                if p.numerator > before.progress.numerator or p.complete:
                    run.grew_at[b] = now
                    run.stalled.discard(b)
                run.progress[b] = s
                if not p.complete and b not in run.stalled and now - run.grew_at.get(b, now) >= self.stall_s:
                    run.stalled.add(b)
                    self.say(f"Stalled: replica {s.replica} has not grown for {self.stall_s:g} s "
                             f"({p.numerator} bytes; broker {b} {'in' if b in self.client.brokers else 'not in'} "
                             f"the cluster's metadata)")


def _unreachable(s: ReplicaStatus) -> bool:
    return s.progress.error_code == ErrorCode.BROKER_NOT_AVAILABLE


# Refusals a later poll may not meet: Kafka's retriable codes (the controller is busy, a leader is being elected), and
# a partition still in another reassignment.
_RETRIABLE = RETRIABLE | {ErrorCode.REASSIGNMENT_IN_PROGRESS}


def progress_lines(runs: list[PartitionRun]) -> list[str]:
    return [progress_line(s, b in run.stalled) for run in runs for b, s in run.progress.items()]


def as_json(result: EngineResult) -> dict[str, Any]:
    return {"done": result.done, "failed": {k: str(v) for k, v in result.failed.items()}, "remaining": result.remaining,
            "stopped": result.stopped}
