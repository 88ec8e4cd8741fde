"""The run: the step engine's loop (mover/admin/reassign/step_engine.py `drive`, the one `mover-reassign --execute`
runs) over lanes. One lane carries the plan's log-dir moves (observe: poll the brokers with running moves; advance:
start what `schedule.startable` allows, AlterReplicaLogDirs); for rows with a `to_broker`, a `BrokerMoves` lane per
cluster wraps the step engine of the library's reassignment run (mover/admin/reassign/run.py: KIP-435 steps,
AlterPartitionReassignments, the replication throttle and its owners) whose partitions' state is mirrored onto the
moves.

Between polls the limits file is read again when it changed (applied at the next step, to both lanes). The first
interrupt stops starting moves and waits for the running ones; a second leaves them running (the command line turns
SIGINT into `interrupt()`). It returns an Outcome; the command line chooses the exit code.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Protocol

from mover.admin.alter_log_dirs import alter_log_dirs
from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget, reassignment_json
from mover.admin.client import ClientError
from mover.admin.common import AdminError
from mover.admin.common import format_bytes as _size
from mover.admin.limits import LimitsFile, RunLimits
from mover.admin.reassign.run import ReassignmentRun
from mover.admin.reassign.status_log import TOPIC
from mover.admin.reassign.step_engine import StepEngine, drive
from mover.audit.executor import schedule
from mover.audit.executor.clusters import ClusterRun, dir_trouble, observe
from mover.audit.executor.moves import OPEN, UNFINISHED, Move, State
from mover.audit.executor.throttles import TOOL as THROTTLE_TOOL
from mover.audit.executor.throttles import LogDirThrottles, replication_store, restore_replication

# How long AlterReplicaLogDirs keeps being re-sent while a broker answers REPLICA_NOT_AVAILABLE.
ALTER_TIMEOUT_S = 10.0
# How often a move whose copy the broker dropped is sent again before it counts as failed (see Loop._restart).
COPY_RESTARTS = 2


class Outcome(Enum):
    DONE = "done"  # every move ended where the plan wanted it (or was already there, or is gone)
    UNFINISHED = "unfinished"  # some did not: failed, not matching, unreachable, not started
    INTERRUPTED = "interrupted"


class View(Protocol):
    """Where the run's event lines and progress go (the command line's live bars, or plain lines). Entered for the
    loop only: the lines before and after it are plain."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...

    def say(self, text: str) -> None: ...

    def update(self, moves: list[Move]) -> None: ...


class BrokerMoves:
    """A lane of the step loop: the step engine, with the plan's moves kept in step with its partitions. The
    partitions it starts share the cluster's `--max-moves` with the cluster's log-dir moves."""

    def __init__(self, engine: StepEngine, moves: list[Move], cluster: ClusterRun, limits: RunLimits) -> None:
        self.engine = engine
        self.moves = moves
        self.cluster = cluster
        self.limits = limits

    def observe(self, first: bool) -> None:
        self.engine.observe(first)
        self._sync()

    def advance(self, start: bool) -> None:
        room = self.limits.steps.max_partition_movements
        if self.limits.disks is not None:
            disk_running = sum(1 for m in self.cluster.moves if not m.between_brokers and m.state is State.RUNNING)
            room = min(room, self.limits.disks.per_cluster - disk_running)
        running = len(self.engine.running())
        # KIP-435's limits, the partition movements capped by what the cluster's log-dir moves leave of --max-moves.
        steps = replace(self.limits.steps, max_partition_movements=max(1, room))
        self.engine.limits = replace(self.limits, steps=steps)
        self.engine.advance(start and room > running)
        self._sync()

    def busy(self) -> bool:
        return self.engine.busy()

    def pending(self) -> bool:
        return self.engine.pending()

    def set_limits(self, limits: RunLimits) -> None:
        if limits.throttle is not None and limits.throttle != self.limits.throttle:
            self.engine.throttle.set_rate([], limits.throttle)
        self.limits = limits

    def _sync(self) -> None:
        for m in self.moves:
            run = self.engine.runs[(m.topic, m.partition)]
            if run.error is not None:
                m.state, m.note = State.FAILED, str(run.error)
            elif run.done:
                m.state, m.copied = State.DONE, m.size_bytes
            elif run.step is not None:
                if m.state is not State.RUNNING:
                    m.started_at = time.monotonic()
                m.state = State.RUNNING
                p = run.progress.get(m.to_broker)  # type: ignore[arg-type]
                m.copied = p.progress.numerator if p is not None else m.copied
                m.stalled = m.to_broker in run.stalled
            else:
                m.state = State.PENDING


def broker_lane(run: ClusterRun, limits: RunLimits, *, plan: Path, stall_s: float,
                say: Callable[[str], None]) -> BrokerMoves | None:
    """The library's reassignment run (mover/admin/reassign/run.py) for the plan's moves between brokers of one
    cluster: KIP-435 steps under the KIP-435 limits (and --max-moves), the replication throttle at --throttle. The
    plan was checked by `classify` and `refusals`; a partition that cannot move fails alone (a plan ages)."""
    todo = [m for m in run.moves if m.between_brokers and m.state is State.PENDING]
    if not todo:
        return None
    finals = {(m.topic, m.partition): m.replicas_to for m in todo}
    # Each new replica is created in the plan's to_dir (KIP-113's log_dirs, sent by the run before each step and
    # while the replica is created, mover/admin/reassign/new_replica_dirs.py), unless the plan leaves it to its broker.
    dirs = {(m.topic, m.partition, m.to_broker): m.to_dir for m in todo if m.to_broker is not None}
    targets = [PartitionTarget(t, p, final, tuple(dirs.get((t, p, b), ANY_LOG_DIR) for b in final))
               for (t, p), final in finals.items()]
    reassignment = ReassignmentRun(run.client, targets, limits=limits, store=replication_store(run, plan), say=say,
                                   stall_s=stall_s, claim=False)
    try:
        reassignment.check_min_insync()
    except AdminError as e:
        for m in todo:
            m.state, m.note = State.FAILED, f"cannot read min.insync.replicas: {e}"
            say(f"failed {m}: {m.note}")
        return None
    return BrokerMoves(reassignment.start(), todo, run, limits)


class Executor:
    def __init__(self, runs: list[ClusterRun], limits: RunLimits, *, plan: Path, stall_s: float, poll_s: float,
                 limits_path: Path | None, view: View, tool: str = THROTTLE_TOOL,
                 must_stop: Callable[[], str | None] | None = None) -> None:
        """`must_stop`: asked before each start, why the run may start no more moves (its share of a cluster's lease
        lost: balancer/lease.py), or None; once it says, the run stops as at a first Ctrl-C."""
        self.runs = runs
        self.must_stop = must_stop
        self.limits = limits
        self.plan = plan
        self.stall_s = stall_s
        self.poll_s = poll_s
        self.limits_file = LimitsFile(limits_path) if limits_path is not None else None
        self.view = view
        self.interrupts = 0
        self.throttles = LogDirThrottles(plan, self.say, tool=tool)  # `tool`: who the cluster's record names
        self.broker_lanes: list[BrokerMoves] = []
        # One cancel file per cluster per run, rewritten when the run lists its running moves again (at the first
        # Ctrl-C and at the end): a name stamped anew each time left two files when the two fell in different seconds.
        self._cancel_paths: dict[str, Path] = {}

    @property
    def moves(self) -> list[Move]:
        return [m for r in self.runs for m in r.moves]

    @property
    def disk_limits(self) -> schedule.DiskLimits:
        assert self.limits.disks is not None
        return self.limits.disks

    def say(self, text: str) -> None:
        self.view.say(text)

    def interrupt(self) -> None:
        """First: start nothing more and watch the running moves end. Second: leave now."""
        self.interrupts += 1
        if self.interrupts >= 2:
            raise KeyboardInterrupt

    def run(self) -> Outcome:
        try:
            with self.view:
                self.throttles.start(self.runs)
                self.throttles.fit(self.runs, self.limits, [])
                self.broker_lanes = [lane for r in self.runs if (lane := broker_lane(
                    r, self.limits, plan=self.plan, stall_s=self.stall_s, say=self.say)) is not None]
                self._loop()
        except KeyboardInterrupt:
            self._left_running(final=True)
            self.throttles.leave()
            return Outcome.INTERRUPTED
        except Exception:
            # An unexpected failure must not leave the run's throttle in place of the operator's.
            self.throttles.restore(self.runs)
            self._restore_replication_throttle()
            raise
        self.throttles.restore(self.runs)
        if not self.interrupts or not any(lane.busy() for lane in self.broker_lanes):
            self._restore_replication_throttle()
        unfinished = self._summary()
        if self.interrupts:
            return Outcome.INTERRUPTED
        return Outcome.UNFINISHED if unfinished else Outcome.DONE

    def _loop(self) -> None:
        announced_stop = False

        def before_start() -> None:
            nonlocal announced_stop
            if self.limits_file is not None:
                self._reload_limits()
            why = self.must_stop() if self.must_stop is not None and not self.interrupts else None
            if why is not None:
                self.say(why)
                self.interrupts = 1
            if self.interrupts and not announced_stop:
                announced_stop = True
                self._left_running(final=False)

        drive([self, *self.broker_lanes], stopped=lambda: bool(self.interrupts), sleep=time.sleep,
              poll_s=self.poll_s, before_start=before_start, before_sleep=lambda: self.view.update(self.moves))

    # ------------------------------------------------------------------------ the log-dir moves, as a Lane

    def observe(self, first: bool) -> None:
        if not first:  # classify has just asked the brokers
            self._poll()

    def advance(self, start: bool) -> None:
        if start:
            self._start(schedule.startable(self.moves, self.disk_limits))

    def busy(self) -> bool:
        return any(m.state is State.RUNNING for m in self.moves if not m.between_brokers)

    def pending(self) -> bool:
        """Moves still to start, but not those behind a move not swapped in: only a broker restart frees them."""
        held = {id(m) for m, _ in schedule.held_by_unswapped(self.moves)}
        return any(m.state is State.PENDING and id(m) not in held for m in self.moves if not m.between_brokers)

    def _restore_replication_throttle(self) -> None:
        engines = {id(lane.engine.client): lane.engine.throttle for lane in self.broker_lanes}
        restore_replication(self.runs, engines, self.plan, self.say)

    def _reload_limits(self) -> None:
        assert self.limits_file is not None
        new = self.limits_file.read_if_changed(self.limits, self.say, self._between())
        if new is None:
            return
        old, self.limits = self.limits, new
        self.say(f"limits changed: {new.describe(self._between())}")
        for lane in self.broker_lanes:
            lane.set_limits(new)
        if new.throttle != old.throttle or new.disks != old.disks:
            self.throttles.fit(self.runs, new, [])

    def _between(self) -> bool:
        return any(m.between_brokers for m in self.moves)

    def _start(self, moves: list[Move]) -> None:
        """`moves` started (none: only the throttles fitted to the moves running), each broker's quota lowered to
        their disks' budgets first."""
        self.throttles.fit(self.runs, self.limits, moves)
        by_run: dict[str, list[Move]] = defaultdict(list)
        for m in moves:
            by_run[m.cluster].append(m)
        for r in self.runs:
            for m in by_run.get(r.name, []):
                if m.broker in r.unreachable:
                    continue  # went away, also while starting an earlier move of this round
                if not self._send(r, m, "start"):
                    continue
                m.state, m.started_at, m.progress_at, m.copied = State.RUNNING, time.monotonic(), time.monotonic(), 0
                m.unanswered = False
                self.say(f"started {m}: {m.from_dir} -> {m.to_dir} ({_size(m.size_bytes)}, step {m.step})")

    def _send(self, r: ClusterRun, m: Move, verb: str) -> bool:
        """AlterReplicaLogDirs for one move; False, said and recorded, when it did not reach the broker or was
        refused."""
        try:
            alter_log_dirs(r.client, {m.replica: m.to_dir}, ALTER_TIMEOUT_S)
        except ClientError as e:
            # The broker, not the move: keep it to do, and watch whether the broker comes back.
            self.say(f"broker {m.broker} of {m.cluster} does not answer: {e}")
            r.unreachable.setdefault(m.broker, time.monotonic())
            m.unanswered = m.unanswered or verb == "start"
            return False
        except AdminError as e:
            trouble = dir_trouble(r, m.broker, m.to_dir, m.size_bytes)
            m.state, m.note = State.FAILED, f"{trouble}: {e}" if trouble else str(e)
            self.say(f"failed to {verb} {m}: {m.note}")
            return False
        return True

    def _poll(self) -> None:
        now = time.monotonic()
        for r in self.runs:
            disk_moves = [m for m in r.moves if not m.between_brokers]  # the others are the step engine's
            running = [m for m in disk_moves if m.state is State.RUNNING]
            # Brokers that stopped answering are asked again, also those with only moves still to start.
            waiting = [m for m in disk_moves if m.state is State.PENDING and m.broker in r.unreachable]
            if not running and not waiting:
                continue
            seen = observe(r, sorted({m.broker for m in running + waiting}), running + waiting, self.say)
            self._give_up_on_silent_brokers(r, now)
            for m in waiting:
                info = seen.get(m.broker, {}).get(m.replica)
                if m.unanswered and info is not None and m.to_dir in (info.future_dir, info.log_dir):
                    self._adopt(m, now)
                    running.append(m)
            for m in running:
                if m.broker not in seen:
                    self._check_stall(m, now)
                    continue
                info = seen[m.broker].get(m.replica)
                if info is not None and info.log_dir == m.to_dir and info.future_dir is None:
                    m.state, m.copied = State.DONE, max(m.size_bytes, info.bytes or 0)
                    self.say(f"done {m} in {now - m.started_at:.1f} s")
                elif info is not None and info.future_dir == m.to_dir:
                    if info.progress.numerator > m.copied:
                        m.copied, m.progress_at = info.progress.numerator, now
                        if m.stalled:
                            m.stalled = False
                            self.say(f"progressing again: {m}")
                    self._check_unswapped(m, info.future_lag, now)
                    if m.complete_at is None:  # a complete copy is not stalled: _check_unswapped says what it is
                        self._check_stall(m, now)
                elif info is None or info.log_dir is None:
                    trouble = dir_trouble(r, m.broker, m.from_dir)
                    m.state, m.note = State.FAILED, (f"{trouble}: " if trouble else "") + \
                        "the replica disappeared from its broker during the move"
                    self.say(f"failed {m}: {m.note}")
                elif trouble := dir_trouble(r, m.broker, m.to_dir, m.size_bytes):
                    # Sending it again would be refused, or copy into a dir that cannot take it: say why, once.
                    m.state, m.note = State.FAILED, f"{trouble}: the broker dropped the copy"
                    self.say(f"failed {m}: {m.note}")
                elif m.restarts < COPY_RESTARTS and not self.interrupts:
                    # After Ctrl-C the printed cancel command is what drops copies: never undo it.
                    self._restart(r, m, now)
                else:
                    m.state = State.FAILED
                    m.note = f"no copy is being built in {m.to_dir} (cancelled, or failed on the broker)"
                    self.say(f"failed {m}: {m.note}")

    def _adopt(self, m: Move, now: float) -> None:
        """A move whose start got no answer, found copying (or done) on its broker once that answers again: the
        broker took the request before it went away, and Kafka resumed the copy on restart. It is this run's move:
        followed like any other, and its broker's quota fitted to its disks at the next start (otherwise the copy
        would run under whatever quota the broker has, and the balancer would take it for someone else's)."""
        m.state, m.started_at, m.progress_at, m.copied, m.unanswered = State.RUNNING, now, now, 0, False
        self.say(f"found {m} copying: its broker took the move before it stopped answering")

    def _restart(self, r: ClusterRun, m: Move, now: float) -> None:
        """The broker dropped the copy while the replica still lives in its old dir. Kafka 3.7.0 does this when
        the leader epoch changes under a copy (a broker dying or coming back; docs/operations.md); sending the move
        again is what an operator would do, and is harmless: AlterReplicaLogDirs to where a copy is already being
        built changes nothing."""
        m.restarts += 1
        if not self._send(r, m, "restart"):
            return
        m.progress_at, m.copied, m.complete_at = now, 0, None
        self.say(f"restarted {m}: the broker dropped its copy in {m.to_dir} ({m.restarts} of {COPY_RESTARTS})")

    def _give_up_on_silent_brokers(self, r: ClusterRun, now: float) -> None:
        """A broker silent for --stall-seconds: its moves end this run as unreachable (a running one may still
        finish on the broker; running execute again tells)."""
        for broker, since in r.unreachable.items():
            if now - since < self.stall_s:
                continue
            for m in r.moves:
                if m.broker == broker and m.state in OPEN and not m.between_brokers:
                    m.state = State.UNREACHABLE
                    m.note = f"broker {broker} has not answered for {now - since:.0f} s" + (
                        "; the move may still finish there" if m.started_at else "")
                    self.say(f"unreachable: {m}: {m.note}")

    def _check_stall(self, m: Move, now: float) -> None:
        if not m.stalled and now - m.progress_at >= self.stall_s:
            m.stalled = True
            self.say(f"stalled: {m} has made no progress for {now - m.progress_at:.0f} s "
                     f"({_size(m.copied)} of {_size(m.size_bytes)} copied)")

    def _check_unswapped(self, m: Move, lag: int | None, now: float) -> None:
        """A copy once seen level with its replica (offset lag 0) and still not swapped in --stall-seconds later:
        Kafka swaps a copy in as soon as it has caught up, but 3.7.0 leaves one so when it lost the controller's
        acknowledgement of the copy's dir (KAFKA-16365, fixed in 3.7.1), until it restarts (docs/kafka-compat.md).
        Such a copy keeps growing with the partition's new records, so it is never stalled: without this the run
        would wait on it saying nothing. The count is not started again when a lag shows: the stuck copy keeps
        following its partition, so a producer's records make its lag flicker above 0 between looks.
        The move then ends as not swapped in: restarting a broker is the operator's call, not the run's, and
        waiting would hold its slot and the run (a balancer's cycle with it) until someone does. It copies
        nothing more, so its slot goes to the next move, but no other move of its broker starts: that broker
        would leave each the same way (schedule.startable)."""
        if lag == 0 and m.complete_at is None:
            m.complete_at = now
        elif m.complete_at is not None and now - m.complete_at >= self.stall_s:
            m.state = State.UNSWAPPED
            m.note = (f"its copy in {m.to_dir} has been complete (offset lag 0) for {now - m.complete_at:.0f} s; "
                      f"restart broker {m.broker} to swap it in, then run execute again")
            self.say(f"not swapped in: {m} has had its copy caught up (offset lag 0) {now - m.complete_at:.0f} s ago; "
                     f"Kafka 3.7.0 leaves copies so after KAFKA-16365 (fixed in 3.7.1) and swaps them in when "
                     f"broker {m.broker} restarts; this run waits for it no longer")

    # ------------------------------------------------------------------------ the end

    def _left_running(self, *, final: bool) -> None:
        everything = [m for m in self.moves if m.state is State.RUNNING]
        if not final:
            self.say("interrupted: starting no more moves" + (
                "; waiting for the running ones (Ctrl-C again to leave them running and exit)" if everything
                else ""))
        between = [m for m in everything if m.between_brokers]
        if between:
            self.say(f"{len(between)} move(s) between brokers still running (AlterPartitionReassignments); to cancel "
                     f"them: mover-reassign --bootstrap-server ... --cancel, or run execute again to resume")
        running = [m for m in everything if not m.between_brokers]
        if not running:
            return
        for r in self.runs:
            mine = [m for m in running if m.cluster == r.name]
            if not mine:
                continue
            path = self._cancel_file(r, mine)
            self.say(f"{len(mine)} move(s) of {r.name} still running; to cancel them:")
            security = r.view.source.security
            config = f" --command-config {security.source}" if security is not None and security.source else ""
            self.say(f"  mover-log-dirs --bootstrap-server {r.bootstrap}{config} --cancel --reassignment-json-file "
                     f"{path}")
        if final:
            self.say("the moves keep running on the brokers, and so does this run's throttle; run execute again to "
                     "resume watching them: at its end it puts back each broker's own throttle, kept in the cluster "
                     f"({TOPIC})")

    def _cancel_file(self, r: ClusterRun, moves: list[Move]) -> Path:
        targets = []
        for m in moves:
            replicas = tuple(r.assignment.get((m.topic, m.partition), [m.broker]))
            targets.append(PartitionTarget(m.topic, m.partition, replicas, tuple(
                m.to_dir if b == m.broker else ANY_LOG_DIR for b in replicas)))
        path = self._cancel_paths.get(r.name)
        if path is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            path = self.plan / f"running-{r.name}-{stamp}.json"
        try:
            path.write_text(reassignment_json(targets) + "\n")
        except OSError:
            path = Path.cwd() / path.name
            path.write_text(reassignment_json(targets) + "\n")
        self._cancel_paths[r.name] = path
        return path

    def _summary(self) -> bool:
        """The end's lines; True when some move is unfinished."""
        for m, holder in schedule.held_by_unswapped(self.moves):
            m.note = f"not started: broker {m.broker} swaps no move in until it restarts ({holder} is not swapped in)"
        counts: dict[State, int] = defaultdict(int)
        for m in self.moves:
            counts[m.state] += 1
        for m in self.moves:
            if m.state in UNFINISHED:
                self.say(f"{m.state.value}: {m}: {m.note or 'not started'}")
        self.say("executed: " + (", ".join(f"{counts[s]} {s.value}" for s in State if counts[s]) or "nothing to do"))
        return any(counts[s] for s in UNFINISHED)
