"""The balancer's loop: collect -> plan -> execute, again and again, for every cluster given, until stopped.

Each cycle, in its own directory under the state dir (`cycle-<UTC stamp>-<n>/`: `snapshots/`, `plan/`):
1. discovery and the gates (gates.py) per cluster: a paused cluster is said (one line when its reason changes) and
   left out of the cycle;
2. `collect` of the others (collect.collect_local: no Spark job), `plan` (plan.compute, the planner's hard rules:
   cordoned dirs never a destination, capacity, headroom), written as `mover-audit plan` writes it;
3. `execute` of that plan (mover/audit/executor/: the step loop, the limits file read at every step, the run's
   throttle and each broker's own put back), where before starting moves the gates are asked again every `check_s`
   and a paused cluster starts none (its running moves go on to their end).

Stopping (`interrupt()`, the command line's SIGTERM / SIGINT): between the moves, at once; with moves in flight, the
first signal starts no more and lets those finish, the second cancels them (AlterReplicaLogDirs to the replica's
current dir, what `mover-log-dirs --cancel` sends) and waits until their copies are gone; either way every throttle
the cycle set is put back. A balancer killed -9 leaves its throttle and its moves: started again on the same state
dir, it first carries the last unfinished plan on (adopting the moves still running) and puts back the throttles any
earlier plan left (their originals are in each plan's execute-state.json).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mover.admin.alter_log_dirs import alter_log_dirs
from mover.admin.client import DEFAULT_TIMEOUT_S, Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, some
from mover.admin.common import format_bytes as _size
from mover.admin.limits import RunLimits, read_limits
from mover.admin.reassign.progress import broker_replicas
from mover.admin.throttle import DEFAULT_THROTTLE
from mover.audit import plan, plan_layout, planner, snapshot
from mover.audit.balance import Thresholds, assess_disks
from mover.audit.balancer import gates
from mover.audit.balancer.canary import DEFAULT_INTERVAL_S, DEFAULT_TOPIC, DEFAULT_WINDOW_S, Canary
from mover.audit.balancer.lease import TOOL as BALANCER_TOOL
from mover.audit.balancer.lease import ClusterLeases
from mover.audit.balancer.metrics import BalanceMetrics
from mover.audit.balancer.unswapped import UnswappedCopies
from mover.audit.collect import collect_local
from mover.audit.errors import AuditError
from mover.audit.executor import schedule
from mover.audit.executor.clusters import ClusterRun, classify, connect
from mover.audit.executor.loop import Executor, Outcome
from mover.audit.executor.moves import Move, State, read_moves
from mover.audit.executor.throttles import LogDirThrottles
from mover.audit.fleet import ClusterSource, ClusterView, discover

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

Say = Callable[[str], None]
FINISHED = "finished"  # in a cycle dir: its plan was carried out to the end (nothing to resume)
STATE_LOCK = ".lock"  # in the state dir: held by the balancer running on it (_held)
CANCEL_WAIT_S = 60.0


@dataclass(frozen=True)
class Settings:
    rules: planner.Rules
    limits: RunLimits
    state_dir: Path
    limits_path: Path | None = None
    interval_s: float = 300.0  # between cycles that moved nothing
    check_s: float = 10.0  # gates asked again while moves run
    poll_s: float = 1.0
    stall_s: float = 300.0
    timeout: float = DEFAULT_TIMEOUT_S
    max_p99_ms: float | None = None  # None: no canary
    canary_topic: str = DEFAULT_TOPIC
    canary_interval_s: float = DEFAULT_INTERVAL_S
    canary_window_s: float = DEFAULT_WINDOW_S
    max_cycles: int | None = None  # None: until stopped
    # No move starts on a cluster for this long after a broker of it that was down answers again (BROKER_SETTLING).
    settle_s: float = gates.SETTLE_S
    keep_cycles: int = 3  # cycle dirs kept (a plan with throttles to put back is always kept)


def out_of_band_now(disks: pd.DataFrame, t: Thresholds) -> pd.DataFrame:
    """The plan's disks (plan_layout.DISKS) judged as the planner sees them: online and not cordoned (a cordoned
    dir is out of its broker's average and has no band, docs/cordons.md), with `out_of_band` against that average."""
    keep = disks["online"].fillna(False).astype(bool) & ~disks["cordoned"].fillna(False).astype(bool)
    usage = disks.loc[keep, ["cluster", "broker", "log_dir", "error", "total_bytes", "usable_bytes", "used_before"]]
    return assess_disks(usage.rename(columns={"used_before": "used_bytes"}).reset_index(drop=True), t)


@contextlib.contextmanager
def _held(state_dir: Path) -> Iterator[None]:
    """The state dir held by this balancer (flock on STATE_LOCK, released with its descriptor, also when the process
    dies), or AuditError naming the holder."""
    lock = state_dir / STATE_LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise AuditError(f"cannot open {lock}: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise AuditError(f"another balancer (pid {holder}) runs on the state dir {state_dir}: stop it first, "
                             f"or give this one a state dir of its own") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # for the refusal's line only: the flock is the lock
        yield
    finally:
        os.close(fd)


class _CycleExecutor(Executor):
    """execute's Executor, asking the balancer's gates before it starts moves: a paused cluster starts none."""

    def __init__(self, balancer: Balancer, runs: list[ClusterRun], limits: RunLimits, plan_dir: Path) -> None:
        s = balancer.settings
        super().__init__(runs, limits, plan=plan_dir, stall_s=s.stall_s, poll_s=s.poll_s, limits_path=s.limits_path,
                         view=_Lines(balancer.say), tool=BALANCER_TOOL)
        self.balancer = balancer
        self._checked = time.monotonic()

    def advance(self, start: bool) -> None:
        if not start:
            return
        now = time.monotonic()
        if now - self._checked >= self.balancer.settings.check_s:
            self._checked = now
            # A move between brokers builds its copy on to_broker (in to_dir, or, created elsewhere in a race, as a
            # future copy moving there), also between its KIP-435 steps and after its last step ended (the copy into
            # to_dir may still run then): whatever its state, such a copy is this plan's. So is one whose start got
            # no answer (the broker died with the request): Kafka resumes that copy when the broker is back.
            own = {(TopicPartitionReplica(m.topic, m.partition, m.to_broker if m.to_broker is not None else m.broker),
                    m.to_dir) for m in self.moves
                   if m.state in (State.RUNNING, State.UNSWAPPED) or m.between_brokers or m.unanswered}
            for r in self.runs:
                self.balancer.gate(r.name, r.client, [b.broker for b in r.view.brokers], [],
                                   own | self.balancer.unswapped.own(r.name), r.view.source.zookeeper)
        for r in self.runs:
            if self.balancer.paused.get(r.name) is None:
                continue
            if not any(m.state is State.RUNNING for m in r.moves):
                # Paused with nothing of its own running: the rest of the plan waits for a fresh snapshot (the
                # next cycle's), not for the end of the pause, however long, on what this one saw.
                left = [m for m in r.moves if m.state is State.PENDING]
                for m in left:
                    m.state, m.note = State.GONE, "left to the next cycle (paused)"
                if left:
                    self.say(f"{len(left)} move(s) of {r.name} left to the next cycle's plan")
        open_ = [m for m in self.moves if self.balancer.paused.get(m.cluster) is None]
        self._start(schedule.startable(open_, self.disk_limits))

    def _left_running(self, *, final: bool) -> None:
        running = [m for m in self.moves if m.state is State.RUNNING]
        if not final and running:
            self.say(f"stopping: starting no more moves, finishing the {len(running)} in flight (signal again to "
                     f"cancel them)")


class _Lines:
    """The executor's view: its event lines, nothing else (the balancer runs unattended: no bars)."""

    def __init__(self, say: Say) -> None:
        self.say = say

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, moves: list[Move]) -> None:
        pass


@dataclass
class CycleResult:
    result: str  # metrics.RESULTS
    moved_bytes: int = 0
    planned: bool = True  # False: paused before anything was collected


class Balancer:
    def __init__(self, sources: list[ClusterSource], settings: Settings, session: Callable[[], SparkSession],
                 say: Say, metrics: BalanceMetrics | None = None) -> None:
        self.sources = sources
        self.settings = settings
        self.session = session
        self.say = say
        self.metrics = metrics or BalanceMetrics()
        self.paused: dict[str, gates.Pause | None] = {}
        # Clusters a broker of which was seen down -> when the brokers first all answered again (monotonic; None:
        # not yet): no move starts there for settle_s from then (_settling).
        self._back: dict[str, float | None] = {}
        # The copies into their to_dir that the last plan's moves between brokers may leave running after their last
        # KIP-435 step (the new replica created in another dir, moving there): still this balancer's at the next gate.
        self._trailing: dict[str, set[gates.OwnMove]] = {}
        # Copies its brokers will not swap in until they restart (KAFKA-16365), left alone; run() first reads what an
        # earlier balancer on this state dir left.
        self.unswapped = UnswappedCopies(say)
        self.leases = ClusterLeases(say)
        self.signals = 0
        self.cycles = 0
        self.moved_bytes = 0
        self.executor: _CycleExecutor | None = None
        self._left: dict[Path, list[str]] = {}  # per plan, what its run could not take back (_note_left)
        self.canaries: dict[str, Canary] = {}
        self._wake = threading.Event()
        self._limits = settings.limits
        for s in sources:
            self.metrics.cluster(s.name)

    # ------------------------------------------------------------------------ stopping

    def interrupt(self) -> None:
        """A stop signal: see the module's docstring. Called from a signal handler on the loop's thread."""
        self.signals += 1
        self._wake.set()
        if self.executor is not None and self.signals <= 2:
            self.executor.interrupt()  # the second raises KeyboardInterrupt out of the step loop: cancelled below
        elif self.signals == 1:
            self.say("stopping: no move in flight")
        # A third signal while the second's cancel runs is ignored: the cancel and the throttles' restore must end.

    @property
    def stopped(self) -> bool:
        return self.signals > 0

    # ------------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Cycles until stopped (or max_cycles); the number of cycles run. A second balancer on the same state dir
        at once is refused (AuditError): both would resume, prune and write the same plans and files."""
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        with _held(self.settings.state_dir):
            return self._run()

    def _run(self) -> int:
        try:
            self._recover()
            while not self.stopped:
                started = time.monotonic()
                try:
                    outcome = self.cycle()
                except (AuditError, AdminError, ClientError) as e:
                    self.say(f"cycle failed: {e}")
                    outcome = CycleResult("failed")
                if outcome.result != "paused" or outcome.planned:
                    self.cycles += 1  # a wait before any collect is no cycle (for --max-cycles and the numbering)
                self.metrics.cycle(outcome.result, started)
                self._prune()
                if self.settings.max_cycles is not None and self.cycles >= self.settings.max_cycles:
                    break
                if outcome.result == "moved":
                    continue  # collect again at once: the next plan says whether more is needed
                wait = self.settings.check_s if outcome.result == "paused" else self.settings.interval_s
                self._wake.wait(wait)
        finally:
            for c in self.canaries.values():
                c.stop()
                self.say(f"canary of {c.source.name} stopped; its topic {c.topic} stays")
            self.leases.release()
        return self.cycles

    def cycle(self) -> CycleResult:
        self._reload_limits()
        views = [self._discover(s) for s in self.sources]
        ready = [v for v in views if v is not None and self._gate_view(v)]
        if not ready:
            return CycleResult("paused", planned=False)
        if self.stopped:
            return CycleResult("interrupted")
        self._restore_left()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        n = self.cycles
        while (where := self.settings.state_dir / f"cycle-{stamp}-{n:06d}").exists():
            n += 1  # a balancer started again within the second of an earlier one's cycle: after it, not over it
        path = collect_local(ready, where / "snapshots", timeout=self.settings.timeout)
        session = self.session()
        result = plan.compute(session, snapshot.read(session, path), self.settings.rules)
        result.moves = self.unswapped.leave_out(result.moves)
        disks = out_of_band_now(result.disks, self.settings.rules.thresholds)
        out_of_band = 0
        for v in ready:
            mine = disks[disks["cluster"] == v.source.name]
            n = int(mine["out_of_band"].fillna(False).astype(bool).sum())
            out_of_band += n
            self.metrics.out_of_band.labels(v.source.name).set(n)
            self.metrics.disks.labels(v.source.name).set(len(mine))
        if not len(result.moves):
            self.say(f"cycle {self.cycles + 1}: nothing to move ({out_of_band} disk(s) out of band)")
            shutil.rmtree(where, ignore_errors=True)
            return CycleResult("balanced" if not out_of_band else "unfinished")
        plan.write(result, where / "plan", self._limits.throttle or DEFAULT_THROTTLE)
        self.say(f"cycle {self.cycles + 1}: {out_of_band} disk(s) out of band; {len(result.moves)} move(s), "
                 f"{_size(int(result.moves['size_bytes'].sum()))} (plan {where / 'plan'})")
        if self.stopped:
            (where / FINISHED).touch()
            return CycleResult("interrupted")
        return self.execute(where, ready)

    def execute(self, where: Path, views: list[ClusterView]) -> CycleResult:
        plan_dir = where / "plan"
        moves = read_moves(plan_dir)
        runs: list[ClusterRun] = []
        try:
            for v in views:
                mine = [m for m in moves if m.cluster == v.source.name]
                if not mine:
                    continue
                run = connect(v, mine, self.settings.timeout)
                runs.append(run)
                classify(run, self.say)
                for m in run.moves:
                    if m.state is State.RUNNING:  # an earlier run's, still copying: watched to its end
                        self.say(f"already running: {m}: {m.from_dir} -> {m.to_dir} ({_size(m.copied)} copied)")
            self.executor = _CycleExecutor(self, runs, self._limits, plan_dir)
            outcome = self.executor.run()
            if outcome is Outcome.INTERRUPTED:
                self._cancel(runs)
                self.executor.throttles.restore(runs)
        finally:
            executor, self.executor = self.executor, None
            for r in runs:
                r.client.close()
        everything = [m for r in runs for m in r.moves]
        for r in runs:
            self._trailing[r.name] = {(TopicPartitionReplica(m.topic, m.partition, m.to_broker), m.to_dir)
                                      for m in r.moves if m.between_brokers and m.to_broker is not None}
        self._note_left(executor, runs)
        self.unswapped.record(everything)
        moved = 0
        for m in everything:
            self.metrics.moves.labels(m.cluster, m.state.value).inc()
            if m.state is State.DONE:
                moved += m.size_bytes
                self.metrics.bytes_moved.labels(m.cluster).inc(m.size_bytes)
        self.moved_bytes += moved
        if executor is not None and not executor.throttles.unrestored:
            (where / FINISHED).touch()
        if outcome is Outcome.INTERRUPTED:
            return CycleResult("interrupted", moved)
        if any(self.paused.get(r.name) is not None for r in runs):
            return CycleResult("paused", moved)
        if outcome is Outcome.UNFINISHED and not moved:
            return CycleResult("unfinished")
        return CycleResult("moved" if moved else "balanced", moved)

    # ------------------------------------------------------------------------ gates

    def gate(self, name: str, client: Client, brokers: list[int], missing: list[int],
             own: set[gates.OwnMove], zookeeper: str | None = None) -> gates.Pause | None:
        canary = self.canaries.get(name)
        pause = self._settling(name, self.leases.check(name, client) or gates.check(
            client, brokers, missing, own, canary, self.settings.max_p99_ms, zookeeper))
        if canary is not None:
            p99 = canary.p99_ms()
            self.metrics.canary_p99.labels(name).set(float("nan") if p99 is None else p99 / 1000)
        before = self.paused.get(name)
        if (before.kind if before else None) != (pause.kind if pause else None):
            self.metrics.pause(name, pause.kind if pause else None)
            self.say(f"paused {name}: {pause.text}" if pause else f"resumed {name}")
        self.paused[name] = pause
        return pause

    def _discover(self, source: ClusterSource) -> ClusterView | None:
        view = discover(source, self.settings.timeout)
        if view.error is not None and not view.brokers:
            self._note(source.name, gates.Pause(gates.BROKER_DOWN, f"no broker answers: {view.error}"))
            return None
        return view

    def _gate_view(self, view: ClusterView) -> bool:
        name = view.source.name
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in view.brokers)
        try:
            client = Client(bootstrap, timeout=self.settings.timeout, security=view.source.security)
        except ClientError as e:
            self._note(name, gates.Pause(gates.BROKER_DOWN, f"no broker answers: {e}"))
            return False
        try:
            for b in view.brokers:
                client.brokers.setdefault(b.broker, (b.host, b.port))
            if self.settings.max_p99_ms is not None and name not in self.canaries:
                self.canaries[name] = Canary(view.source, bootstrap, topic=self.settings.canary_topic,
                                             interval_s=self.settings.canary_interval_s,
                                             window_s=self.settings.canary_window_s,
                                             timeout_s=self.settings.timeout, say=self.say).start()
            if not self._hold(view, client):
                return False
            self.unswapped.refresh(name, client)
            return self.gate(name, client, [b.broker for b in view.brokers], view.missing,
                             self._trailing.get(name, set()) | self.unswapped.own(name),
                             view.source.zookeeper) is None
        finally:
            client.close()

    def _leased(self, view: ClusterView) -> bool:
        try:
            client = Client(",".join(f"{b.host}:{b.port}" for b in view.brokers), timeout=self.settings.timeout,
                            security=view.source.security)
        except ClientError as e:
            self._note(view.source.name, gates.Pause(gates.BROKER_DOWN, f"no broker answers: {e}"))
            return False
        try:
            # No sweep yet: the plan about to be resumed takes over its own holds without lifting its throttle from
            # the moves it left running; the first cycle sweeps what is left.
            return self._hold(view, client, sweep=False)
        finally:
            client.close()

    def _hold(self, view: ClusterView, client: Client, sweep: bool = True) -> bool:
        """Whether this balancer holds the cluster's lease (taken now if free; else the pause said), with what the
        cluster records of its copies not swapped in. Taking it, it first puts back the throttles runs that are over
        left there (a balancer killed, whose plans are in its own state dir: this one may never see them)."""
        name = view.source.name
        other = self.leases.check(name, client)
        if other is not None:
            self._note(name, other)
            return False
        self.unswapped.attach(name, self.leases.notes(name))
        if sweep and self.leases.taken(name):
            run = connect(view, [], self.settings.timeout)
            try:
                LogDirThrottles.orphans(self.say, tool=BALANCER_TOOL).restore([run])
            finally:
                run.client.close()
        return True

    def _settling(self, name: str, pause: gates.Pause | None) -> gates.Pause | None:
        """`pause`, or the settling pause for settle_s from the first look that finds a broker of the cluster, once
        seen down, answering again (counted from then: a look that waited on a broker still starting is not the
        settle)."""
        if pause is not None and pause.kind == gates.BROKER_DOWN:
            self._back[name] = None
            return pause
        if name not in self._back:
            return pause
        back = self._back[name]
        if back is None:
            back = self._back[name] = time.monotonic()
        if pause is not None:
            return pause
        if time.monotonic() - back < self.settings.settle_s:
            return gates.settling(self.settings.settle_s)
        del self._back[name]
        return None

    def _note(self, name: str, pause: gates.Pause) -> None:
        if pause.kind == gates.BROKER_DOWN:
            self._back[name] = None
        before = self.paused.get(name)
        if before is None or before.kind != pause.kind:
            self.metrics.pause(name, pause.kind)
            self.say(f"paused {name}: {pause.text}")
        self.paused[name] = pause

    # ------------------------------------------------------------------------ limits, cancel, recovery, pruning

    def _reload_limits(self) -> None:
        """The limits file, read at each cycle's start (and by the executor at every step)."""
        if self.settings.limits_path is None:
            return
        try:
            new = read_limits(self.settings.limits_path, self.settings.limits)
        except AdminError as e:
            self.say(f"{e} (keeping: {self._limits.describe(False)})")
            return
        if new != self._limits:
            self.say(f"limits: {new.describe(False)}")
            self._limits = new

    def _cancel(self, runs: list[ClusterRun]) -> None:
        """The moves still running after the second signal: cancelled, and waited for until their copies are
        gone (a copy left would be a move still running)."""
        for r in runs:
            running = [m for m in r.moves if m.state is State.RUNNING and not m.between_brokers]
            if not running:
                continue
            try:
                alter_log_dirs(r.client, {m.replica: m.from_dir for m in running}, self.settings.timeout)
            except (ClientError, AdminError) as e:
                self.say(f"cannot cancel the {len(running)} move(s) in flight on {r.name}: {e}")
                continue
            deadline = time.monotonic() + CANCEL_WAIT_S
            left = running
            while left and time.monotonic() < deadline:
                left = [m for m in left if self._copy_left(r, m)]
                if left:
                    time.sleep(min(self.settings.poll_s, 0.5))
            self.say(f"cancelled {len(running) - len(left)} move(s) in flight on {r.name}: "
                     f"{some(str(m) for m in running)}" + (f"; still copying: {some(str(m) for m in left)}"
                                                            if left else ""))
            for m in running:
                m.state, m.note = (State.PENDING, "cancelled on stop") if m not in left else (m.state, m.note)

    def _note_left(self, executor: _CycleExecutor | None, runs: list[ClusterRun]) -> None:
        """What this cycle could not take back: a throttle not restored (a broker that did not answer), a move
        still running on a broker that stopped answering or whose cancel did not take. Said at the end."""
        if executor is None:
            return
        left: list[str] = []
        for r in runs:
            brokers = executor.throttles.unrestored.get(r.name, [])
            if brokers:
                left.append(f"{executor.plan}: the throttle on brokers {','.join(map(str, brokers))} of {r.name} "
                            "(their own kept in the cluster; the next start, or the next cycle throttling them, "
                            "puts it back)")
            running = [m for m in r.moves if m.state in (State.RUNNING, State.UNREACHABLE) and m.started_at]
            if running:
                left.append(f"{executor.plan}: {len(running)} move(s) of {r.name} that may still run: "
                                 f"{some(str(m) for m in running)}")
        self._left[executor.plan] = left  # a plan carried on again (a resume) replaces what it had left

    @property
    def left(self) -> list[str]:
        return [text for texts in self._left.values() for text in texts] + self.unswapped.left()

    @staticmethod
    def _copy_left(r: ClusterRun, m: Move) -> bool:
        # The one per-replica call every tool reads progress through (mover/admin/reassign/progress.py).
        try:
            where, _ = broker_replicas(r.client, m.broker, {m.topic: [m.partition]})
        except (ClientError, AdminError):
            return True
        return any(s.future_dir is not None for s in where.values())

    def _cycle_dirs(self) -> list[Path]:
        return sorted(p for p in self.settings.state_dir.glob("cycle-*") if p.is_dir())

    def _recover(self) -> None:
        """After a balancer that was killed: earlier plans' throttles put back, then the last unfinished plan
        carried on. In that order: the last plan, reading a broker's throttle it has no original of yet, must not
        take an earlier plan's leftover for the broker's own."""
        dirs = self._cycle_dirs()
        last = next((d for d in reversed(dirs) if (d / "plan" / plan_layout.SUMMARY_FILE).exists()), None)
        self._restore_left(exclude=last)
        if last is not None and not (last / FINISHED).exists():
            self.say(f"resuming the unfinished plan {last / 'plan'} of an earlier run")
            # Only where this balancer holds the lease: another balancer acting on a cluster meanwhile (a standby
            # that took over) owns what is moving there now.
            views = [v for v in (self._discover(s) for s in self.sources) if v is not None and self._leased(v)]
            try:
                self.execute(last, views)
            except (AuditError, AdminError, ClientError) as e:
                self.say(f"cannot resume {last / 'plan'}: {e}")

    def _restore_left(self, exclude: Path | None = None) -> None:
        """The throttles earlier cycles could not put back (a broker down at their end, a balancer killed) put back
        now, before a plan holds a broker's throttle: each cycle not marked finished, its plan's holds in each
        cluster taken over and restored."""
        for d in self._cycle_dirs():
            if d != exclude and not (d / FINISHED).exists() and (d / "plan" / plan_layout.SUMMARY_FILE).exists():
                self._restore_throttles(d / "plan")

    def _restore_throttles(self, plan_dir: Path) -> None:
        """The plan's holds put back in every cluster; once all are (every cluster answered), its cycle is
        finished: not looked at again."""
        throttles = LogDirThrottles(plan_dir, self.say, tool=BALANCER_TOOL)
        reached = True
        for s in self.sources:
            view = self._discover(s)
            if view is None:
                reached = False
                continue
            run = connect(view, [], self.settings.timeout)
            try:
                throttles.restore([run])
            finally:
                run.client.close()
        if reached and not throttles.unrestored:
            (plan_dir.parent / FINISHED).touch()

    def _prune(self) -> None:
        dirs = self._cycle_dirs()
        for d in dirs[:-self.settings.keep_cycles] if self.settings.keep_cycles else dirs:
            if (d / FINISHED).exists() or not (d / "plan").exists():
                shutil.rmtree(d, ignore_errors=True)
