"""One reassignment between brokers, carried out: the library under mover-reassign --execute, mover-log-dirs --execute
of a file that moves replicas between brokers, and mover-audit execute's moves between brokers.

    run = ReassignmentRun(client, targets, limits=limits, store=store, say=print)
    checked = run.check()      # AdminError: what makes the file impossible, before anything changes
    result = run.execute()     # RunResult: completed, failed, stopped or cancelled, and what each partition did

`check` reads where the partitions stand and refuses, one line each, what cannot be done (an unknown broker, topic or
partition, a target KIP-435 cannot reach under min.insync.replicas, a partition someone else is reassigning).
`execute` claims the request in the cluster (one run per partition: mover/admin/reassign/request_store.py), says the
limits and the estimate (schedule.py), drives the step engine (step_engine.py, with the file's log dirs placed as
KIP-113 says), records progress, and at the end restores the replication throttles it set (their owners are kept in
the cluster: the last run to leave restores the original) and records how the request ended.

Everything the run has to say goes to `say`, one line at a time; nothing is printed. What is left (a first Ctrl-C:
`stop` set; a cancel from another machine; failed partitions) is in the RunResult. A second Ctrl-C (KeyboardInterrupt)
leaves at once: the running steps go on in the cluster, and the request is marked stopped when its store closes.

mover-audit execute drives the run as one lane of its own loop beside its log-dir moves (`start`, then the Lane
methods, then `finish`), with a store that records throttles only (`claim=False`: its plan is the record).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget
from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, format_bytes, some
from mover.admin.limits import RunLimits
from mover.admin.reassign.kip455 import (
    PartitionState,
    TopicPartition,
    alter_reassignments,
    check_apis,
    list_reassignments,
    min_insync_replicas,
)
from mover.admin.reassign.progress import Failure
from mover.admin.reassign.replication_throttle import RESTORE_WAIT_S, ConfigAccess, ReplicationThrottle
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.schedule import PartitionPlan, Schedule, format_duration, leader_sizes, schedule
from mover.admin.reassign.status_store import CANCELLED, COMPLETED, FAILED, RUNNING, STOPPED
from mover.admin.reassign.step_engine import (
    DEFAULT_LOG_DIR_TIMEOUT_S,
    DEFAULT_POLL_S,
    DEFAULT_STALL_S,
    ClusterView,
    KafkaApis,
    PartitionRun,
    Sample,
    StepEngine,
    adopt,
)
from mover.admin.reassign.steps import Step, StepError, check_target
from mover.wire.errors import ErrorCode

Say = Callable[[str], None]

# How a run ended (RunResult.outcome), in the words of the request's states (status_store.py): every partition at
# its target (DONE); some failed, the others done (PARTITIONS_FAILED); `stop` set, Ctrl-C, some partitions not started
# or not finished, and the same run resumes (STOPPED); --cancel, from anywhere, asked the request to stop (CANCELLED).
DONE = COMPLETED
PARTITIONS_FAILED = FAILED


@dataclass
class Checked:
    """What `check` found: each partition's state now, its topic's min.insync.replicas, the running reassignments
    this run follows (they head for the file's target), and the assignment to roll back to."""

    states: dict[TopicPartition, PartitionState]
    min_insync: dict[str, int]
    adopted: dict[TopicPartition, Step]
    current: list[PartitionTarget] = field(default_factory=list)


@dataclass
class RunResult:
    outcome: str  # DONE, PARTITIONS_FAILED, STOPPED or CANCELLED
    request_id: int | None
    done: list[str]  # partitions at their target
    failed: dict[str, Failure]  # partition -> why (a Kafka error code and its message)
    remaining: list[str]  # not started or not finished
    samples: list[Sample]  # what ran at once, at each poll
    restored: list[str]  # the throttled resources given their own value back


def check_plan(client: Client, targets: list[PartitionTarget], cluster: ClusterView | None = None) -> Checked:
    """Everything that makes the file impossible, before anything starts: one line each (AdminError), in Kafka
    3.7's order: brokers, then topics and partitions. `cluster`: where partitions and running reassignments are
    read (default KIP-455's APIs; ZooKeeper's view for brokers before 2.4)."""
    view = cluster or KafkaApis(client)
    unknown = sorted({b for t in targets for b in t.replicas} - set(client.brokers))
    if unknown:
        raise AdminError(f"Unknown broker id {some(unknown, ',')}")
    topics = sorted({t.topic for t in targets})
    states, missing_topics = view.partition_states(topics)
    if missing_topics:
        raise AdminError(f"Topic {sorted(missing_topics)[0]} not found.")
    missing = [t.name for t in targets if (t.topic, t.partition) not in states]
    if missing:
        raise AdminError(f"Unable to find partition: {some(missing)}")
    if cluster is None:
        check_apis(client)
    min_insync = min_insync_replicas(client, topics)
    for t in targets:
        try:
            check_target(t.replicas, min_insync[t.topic])
        except StepError as e:
            raise AdminError(f"Partition {t.name}: {e}") from None
    ongoing = view.list_reassignments([(t.topic, t.partition) for t in targets])
    adopted = {}
    for t in targets:
        tp = (t.topic, t.partition)
        if tp in ongoing:
            step = adopt(ongoing[tp], t.replicas)
            if step is None:
                raise AdminError(f"Partition {t.name} is already being reassigned to "
                                 f"{list(ongoing[tp].target)} by someone else: wait for it, or cancel it first")
            adopted[tp] = step
    current = [PartitionTarget(t.topic, t.partition, states[(t.topic, t.partition)].replicas,
                               (ANY_LOG_DIR,) * len(states[(t.topic, t.partition)].replicas)) for t in targets]
    return Checked(states, min_insync, adopted, current)


def plan_schedule(client: Client, targets: list[PartitionTarget], checked: Checked, limits: RunLimits,
                  poll_s: float = DEFAULT_POLL_S) -> tuple[Schedule, list[str]]:
    """The steps and batches the run would make and the bytes each copies (the leaders' sizes); the problems are the
    leaders that could not say (their partitions count as empty)."""
    states = checked.states
    sizes, problems = leader_sizes(client, {(t.topic, t.partition): states[(t.topic, t.partition)].leader
                                            for t in targets})
    plans = [PartitionPlan((t.topic, t.partition), tuple(states[(t.topic, t.partition)].replicas), tuple(t.replicas),
                           checked.min_insync[t.topic], sizes.get((t.topic, t.partition), 0),
                           states[(t.topic, t.partition)].leader) for t in targets]
    return schedule(plans, limits.steps, limits.throttle, step_gap_s=poll_s), problems


def estimate_line(sch: Schedule, limits: RunLimits) -> str:
    """One line: steps, batches, bytes and (with a throttle) the time the copies take at it."""
    head = f"Estimate: {len(sch.steps)} steps in {sch.batches} batches, {format_bytes(sch.total_bytes)} to copy"
    eta = sch.eta_s
    if limits.throttle is None or eta is None:
        return head + "; no time without a throttle (the copies go as fast as the brokers allow)"
    return head + f", about {format_duration(eta)} at the throttle of {limits.throttle} B/s per broker"


def request_partitions(targets: list[PartitionTarget]) -> list[dict[str, Any]]:
    """A request's partitions as the cluster's store keeps them; `log_dirs` only where the file names a dir."""
    return [{"topic": t.topic, "partition": t.partition, "replicas": list(t.replicas)}
            | ({"log_dirs": list(t.log_dirs)} if t.replica_dirs() else {}) for t in targets]


class ReassignmentRun:
    """One run of a reassignment file's moves between brokers (see the module's docstring). `cluster` and
    `configs`: ZooKeeper's for brokers before Kafka 2.4 (mover/admin/reassign/zookeeper_view.py), else the brokers'
    APIs. `stop`: set to start nothing more (the running steps end, then `execute` returns STOPPED)."""

    def __init__(self, client: Client, targets: list[PartitionTarget], *, limits: RunLimits,
                 store: ClusterRequestStore, say: Say, limits_path: Path | None = None,
                 poll_s: float = DEFAULT_POLL_S, stall_s: float = DEFAULT_STALL_S,
                 log_dir_timeout_s: float = DEFAULT_LOG_DIR_TIMEOUT_S, cluster: ClusterView | None = None,
                 configs: ConfigAccess | None = None, stop: threading.Event | None = None, claim: bool = True) -> None:
        self.client = client
        self.targets = targets
        self.limits = limits
        self.store = store
        self.say = say
        self.limits_path = limits_path
        self.poll_s = poll_s
        self.stall_s = stall_s
        self.log_dir_timeout_s = log_dir_timeout_s
        self.cluster = cluster
        self.stop = stop or threading.Event()
        # False: the run holds throttles in the store but claims no request (mover-audit execute: the plan is the
        # record of what it moves, and it checks overlaps itself).
        self.claim = claim
        self.throttle = ReplicationThrottle(client, store, configs)
        self.checked: Checked | None = None
        self.request_id: int | None = None
        self.engine: StepEngine | None = None

    # ------------------------------------------------------------------------------------------------ before

    def check(self) -> Checked:
        """Refuse what cannot be done (AdminError), before anything changes."""
        self.checked = check_plan(self.client, self.targets, self.cluster)
        return self.checked

    def check_min_insync(self) -> Checked:
        """Only read each topic's min.insync.replicas (AdminError when it cannot be read): for a caller that checked
        the rest itself and lets a partition that cannot move fail alone (mover-audit execute: a plan ages)."""
        try:
            min_insync = min_insync_replicas(self.client, sorted({t.topic for t in self.targets}))
        except ClientError as e:
            raise AdminError(str(e)) from None
        self.checked = Checked({}, min_insync, {})
        return self.checked

    def start(self) -> StepEngine:
        """Claim the request (one run per partition; a live run holding one of them refuses this one, AdminError
        naming it), say the limits and the estimate, and build the step engine."""
        checked = self.checked or self.check()
        if self.claim:
            self.request_id, resumed = self.store.claim(request_partitions(self.targets))
            self.say(f"Request id: {self.request_id}" + (" (resumed from what the cluster says)" if resumed else ""))
            if self.limits.throttle is not None:
                self.say("Warning: the throttle is removed when the reassignment completes, or by --verify or "
                         "--cancel if this run is stopped.")
                self.say(f"The inter-broker throttle limit is {self.limits.throttle} B/s on the brokers of each "
                         f"running step")
            self.say(f"Limits: {self.limits.describe()}")
            self.say(estimate_line(plan_schedule(self.client, self.targets, checked, self.limits, self.poll_s)[0],
                                   self.limits))
        rid = self.request_id
        runs = [PartitionRun((t.topic, t.partition), t.replicas, checked.min_insync.get(t.topic, 1))
                for t in self.targets]
        self.engine = StepEngine(
            self.client, runs, self.limits, self.throttle, say=self.say, limits_path=self.limits_path,
            poll_s=self.poll_s, stall_s=self.stall_s, stop=self.stop, cluster=self.cluster,
            should_stop=(lambda: self.store.reloaded_state(rid) != RUNNING) if rid is not None else None,
            on_tick=(lambda e: self.store.progress_tick(rid, e.running())) if rid is not None else None,
            log_dirs={r: d for t in self.targets for r, d in t.replica_dirs().items()},
            log_dir_timeout_s=self.log_dir_timeout_s)
        return self.engine

    # ------------------------------------------------------------------------------------------------ the run

    def execute(self) -> RunResult:
        """check (unless done), start, drive the steps to their end, finish."""
        engine = self.start()
        result = engine.run()
        if result.samples:
            # What ran at once, as the engine counted it at each poll: the limits were never exceeded.
            self.say(f"Most at once: {max(x.partitions for x in result.samples)} partition movements, "
                     f"{max(x.leaders for x in result.samples)} leader movements, "
                     f"{max(x.max_replicas_added for x in result.samples)} replicas added to one partition")
        return self.finish()

    def finish(self) -> RunResult:
        """The end: the throttles back (unless steps still run after a stop), the request's final state recorded."""
        engine = self.engine
        assert engine is not None
        result = engine.result()
        stopped = bool(result.remaining) and (result.stopped or engine.external_stop)
        if stopped:
            restored = self.restore(engine.running(), "restored")
            outcome = CANCELLED if engine.external_stop else STOPPED
        else:
            restored = self.restore([], "removed")
            outcome = PARTITIONS_FAILED if result.failed else DONE
            if self.request_id is not None:
                self.store.finish(self.request_id, outcome)
        return RunResult(outcome, self.request_id, result.done, result.failed, result.remaining, result.samples,
                         restored)

    def restore(self, running: list[PartitionRun], said: str) -> list[str]:
        """Every throttle this run set gets its own value back, unless steps still run (they keep theirs until
        --verify, --cancel or the next run). `said`: the word of the line naming them (Kafka's tool says the
        throttles of a finished run are removed)."""
        if running:
            return []
        restored = self.throttle.restore_all(say=self.say)
        if restored:
            self.say(f"Throttles {said}: " + ", ".join(restored))
        return restored

    # ------------------------------------------------------------------------------------------------ as a Lane

    def observe(self, first: bool) -> None:
        assert self.engine is not None
        self.engine.observe(first)

    def advance(self, start: bool) -> None:
        assert self.engine is not None
        self.engine.advance(start)

    def busy(self) -> bool:
        return self.engine is not None and self.engine.busy()

    def pending(self) -> bool:
        return self.engine is not None and self.engine.pending()

    def partitions(self) -> Mapping[TopicPartition, PartitionRun]:
        assert self.engine is not None
        return self.engine.runs


def cancel_steps(client: Client, targets: list[PartitionTarget], store: ClusterRequestStore,
                 poll_s: float = DEFAULT_POLL_S) -> set[TopicPartition]:
    """KIP-455 cancel of the file's partitions' running steps (each goes back to where its step started), after
    telling a run of the same request, wherever it runs, to start nothing more. Returns the partitions whose step was
    cancelled; AdminError when the cluster refuses one."""
    check_apis(client)
    tps = [(t.topic, t.partition) for t in targets]
    request_id = store.running_for(set(tps))
    if request_id is not None:
        store.finish(request_id, CANCELLED)
    cancelled: set[TopicPartition] = set()
    # A running --execute reads the cancel at its next poll; a step it started just before is cancelled in the next
    # round here.
    for _ in range(3):
        ongoing = list_reassignments(client, tps)
        mine: dict[TopicPartition, tuple[int, ...] | None] = {tp: None for tp in tps if tp in ongoing}
        if not mine:
            break
        refused = alter_reassignments(client, mine)
        refused = {tp: e for tp, e in refused.items() if e[0] != ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
        if refused:
            tp, (code, message) = next(iter(refused.items()))
            raise AdminError(f"Error cancelling partition {tp[0]}-{tp[1]}: {code}" + (f": {message}" if message
                                                                                     else ""))
        cancelled |= set(mine)
        time.sleep(poll_s)
    return cancelled


def restore_throttles(client: Client, store: ClusterRequestStore, say: Say, wait_s: float = RESTORE_WAIT_S,
                      configs: ConfigAccess | None = None) -> list[str]:
    """The replication throttles a run that is over (or no longer alive) left: each resource's own value back, by
    the last run to leave it (--verify, --cancel). `configs`: ZooKeeper's for brokers before Kafka 2.4."""
    return ReplicationThrottle(client, store, configs).restore_all(wait_s=wait_s, say=say)
