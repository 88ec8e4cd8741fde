"""`mover-audit execute --plan PLANDIR`: carry a plan's moves out in steps, KIP-435's idea applied to disks (and, for
rows with a `to_broker`, KIP-435 itself: those run on the step engine, in the same loop).

    mover-audit execute --plan PLANDIR (--fleet F | --bootstrap-server H:P | --zookeeper H:P/chroot) [--cluster NAME]
                        [--max-moves-per-disk 1] [--max-moves-per-broker 2] [--max-moves 10] [--throttle B/S]
                        [--limits FILE] [--stall-seconds 300] [--dry-run]

KIP-435 (incremental reassignment) starts a few replica movements at a time and the next as earlier ones finish,
so a big rebalance never floods the cluster. Here the unit is one replica moving between two disks of a broker: at
most `--max-moves-per-disk` moves touch a disk (as source or destination), `--max-moves-per-broker` run on a broker
and `--max-moves` in a cluster at once; a move of the plan's step s starts on a broker only once that broker's moves
of earlier steps ended. The limits and the throttle can be changed while it runs through `--limits FILE` (JSON or
TOML, watched with watchdog), effective at the next step.

What is done is asked of the brokers, never taken from a local file: at start every move is checked with
DescribeLogDirs (replica in to_dir: done; copy being built in to_dir: running, adopted; in from_dir: to do;
partition gone: skipped; anywhere else: the plan no longer matches, not moved), so running the command again after
an interruption resumes. Moves are started and observed with mover-log-dirs' own helpers (mover/cli/*).

The log-dir throttle is the run's only while it runs: each broker's own per-broker value is read before the first
change, kept in PLANDIR/execute-state.json (mover/audit/execute_state.py) and put back at the end, by this run or,
if this one was killed, by the next on the same plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import tomllib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from mover.admin import throttle
from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget, reassignment_json
from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica
from mover.admin.common import format_bytes as _size
from mover.admin.log_dir_state import ReplicaDirs, describe_broker, replica_dirs
from mover.admin.reassign_state import RequestStore
from mover.admin.reassignment import list_reassignments, min_insync_replicas
from mover.admin.replication_throttle import ReplicationThrottle
from mover.admin.step_engine import PartitionRun, RunLimits, StepEngine, drive
from mover.admin.steps import Limits as Limits435
from mover.admin.throttle import DEFAULT_THROTTLE
from mover.audit import drain
from mover.audit.execute_state import SavedThrottles
from mover.audit.fleet import ClusterView, discover, sources_from_args
from mover.audit.fleet import add_arguments as add_source_arguments
from mover.cli.arguments import positive_int
from mover.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CliError, handling_sigint
from mover.cli.reassign import alter_log_dirs
from mover.config.file_watch import stop_observer

MOVE_COLUMNS = ("cluster", "broker", "topic", "partition", "from_dir", "to_dir", "size_bytes", "step")
# `to_broker` (nullable): the replica moves to another broker, in KIP-435 steps (mover/admin/step_engine.py).
OPTIONAL_COLUMNS = ("to_broker",)
REASSIGN_STATE_DIR = "reassign-state"
DEFAULT_MAX_PER_DISK = 1
DEFAULT_MAX_PER_BROKER = 2
DEFAULT_MAX_PER_CLUSTER = 10
# --throttle not given: the default, said as such at the start of the run (argparse applies `type` to str defaults).
_THROTTLE_NOT_GIVEN = object()
DEFAULT_STALL_S = 300.0
DEFAULT_POLL_S = 1.0
# How long AlterReplicaLogDirs keeps being re-sent while a broker answers REPLICA_NOT_AVAILABLE.
ALTER_TIMEOUT_S = 10.0
EXIT_INTERRUPTED = 130
LIMIT_KEYS = {"max_moves_per_disk": "per_disk", "max_moves_per_broker": "per_broker", "max_moves": "per_cluster",
              "throttle": "throttle"}


class State(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"  # by this run
    ALREADY_DONE = "already done"
    GONE = "skipped"  # the partition (or this replica of it) no longer exists
    MISMATCH = "not moved"  # the replica is where the plan did not expect it
    FAILED = "failed"
    UNREACHABLE = "unreachable"


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


@dataclass(frozen=True)
class Limits:
    per_disk: int = DEFAULT_MAX_PER_DISK
    per_broker: int = DEFAULT_MAX_PER_BROKER
    per_cluster: int = DEFAULT_MAX_PER_CLUSTER
    throttle: int | None = DEFAULT_THROTTLE  # bytes/s per broker; None = unthrottled

    def describe(self) -> str:
        rate = "unthrottled" if self.throttle is None else f"throttle {_rate_text(self.throttle)}"
        return (f"at most {self.per_disk} move(s) per disk, {self.per_broker} per broker, {self.per_cluster} per "
                f"cluster; {rate}")


# ------------------------------------------------------------------------------------------------ arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="PLANDIR", help="a plan written by `plan`")
    add_source_arguments(parser)
    parser.add_argument("--max-moves-per-disk", type=positive_int, default=DEFAULT_MAX_PER_DISK, metavar="N",
                        help=f"moves touching one disk at once, as source or destination (default "
                             f"{DEFAULT_MAX_PER_DISK})")
    parser.add_argument("--max-moves-per-broker", type=positive_int, default=DEFAULT_MAX_PER_BROKER, metavar="N",
                        help=f"moves on one broker at once (default {DEFAULT_MAX_PER_BROKER})")
    parser.add_argument("--max-moves", type=positive_int, default=DEFAULT_MAX_PER_CLUSTER, metavar="N",
                        help=f"moves in one cluster at once (default {DEFAULT_MAX_PER_CLUSTER})")
    parser.add_argument("--throttle", type=_rate, default=_THROTTLE_NOT_GIVEN, metavar="BYTES_PER_S",
                        help=f"log-dir move throttle (replica.alter.log.dirs.io.max.bytes.per.second) set on each "
                             f"broker with moves for the run, -1 for none; each broker's own throttle is restored "
                             f"at the end. Default {DEFAULT_THROTTLE} ({_size(DEFAULT_THROTTLE)}/s), chosen by "
                             f"execute to spare the disks: Kafka's own default is unlimited")
    parser.add_argument("--limits", type=Path, metavar="FILE",
                        help="JSON or TOML with max_moves_per_disk, max_moves_per_broker, max_moves, throttle; "
                             "watched: changes apply at the next step")
    parser.add_argument("--stall-seconds", type=float, default=DEFAULT_STALL_S, metavar="S",
                        help=f"report a move whose copy has not grown for this long (default {DEFAULT_STALL_S:g})")
    parser.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_S, metavar="S",
                        help=f"how often running moves are checked (default {DEFAULT_POLL_S:g})")
    parser.add_argument("--dry-run", action="store_true", help="check the plan against the brokers, print the steps")



def _rate(text: str) -> int | None:
    if text.strip() == "-1":
        return None
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected bytes per second (a positive integer) or -1, got {text!r}")
    return int(text)


def limits_from_args(args: argparse.Namespace) -> Limits:
    rate = DEFAULT_THROTTLE if args.throttle is _THROTTLE_NOT_GIVEN else args.throttle
    return Limits(args.max_moves_per_disk, args.max_moves_per_broker, args.max_moves, rate)


def _rate_text(rate: int) -> str:
    return f"{rate} B/s ({_size(rate)}/s)" if rate >= 1024 else f"{rate} B/s"


def _config_text(config: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))


# ------------------------------------------------------------------------------------------------ inputs


def read_moves(plan: Path) -> list[Move]:
    """The plan's `moves/` dataset (Parquet), in step order."""
    import pyarrow.dataset as ds

    where = plan / "moves"
    if not where.exists():
        raise CliError(f"plan {plan}: no moves dataset ({where} is missing)")
    try:
        table = ds.dataset(str(where), format="parquet").to_table()
    except Exception as e:  # pyarrow raises several types for unreadable files; all mean the same to the user
        raise CliError(f"plan {plan}: cannot read {where}: {str(e).splitlines()[0] if str(e) else e!r}") from None
    missing = [c for c in MOVE_COLUMNS if c not in table.column_names]
    if missing:
        raise CliError(f"plan {plan}: moves lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    columns = list(MOVE_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in table.column_names]
    moves = [Move(r["cluster"], int(r["broker"]), r["topic"], int(r["partition"]), r["from_dir"], r["to_dir"],
                  int(r["size_bytes"]), int(r["step"]),
                  to_broker=int(r["to_broker"]) if r.get("to_broker") is not None else None)
             for r in table.select(columns).to_pylist()]
    seen: set[tuple[str, TopicPartitionReplica]] = set()
    for m in moves:
        key = (m.cluster, m.replica)
        if key in seen:
            raise CliError(f"plan {plan}: replica {m.replica} of {m.cluster} is moved twice")
        seen.add(key)
    return sorted(moves, key=lambda m: (m.cluster, m.step, m.broker, m.topic, m.partition))


def read_limits(path: Path, base: Limits) -> Limits:
    """The limits file over `base`: JSON or TOML (by content), keys as the options without dashes."""
    try:
        text = path.read_text()
    except OSError as e:
        raise CliError(f"limits file {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise CliError(f"limits file {path} is neither JSON nor TOML: {e}") from None
    if not isinstance(doc, dict):
        raise CliError(f"limits file {path}: expected a table of limits")
    changes: dict[str, Any] = {}
    for key, value in doc.items():
        name = LIMIT_KEYS.get(key.replace("-", "_"))
        if name is None:
            raise CliError(f"limits file {path}: unknown key {key!r} (known: {', '.join(LIMIT_KEYS)})")
        if name == "throttle":
            if value is not None and value != -1 and (not isinstance(value, int) or isinstance(value, bool)
                                                      or value <= 0):
                raise CliError(f"limits file {path}: throttle must be bytes per second or -1, got {value!r}")
            changes[name] = None if value in (None, -1) else value
        else:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CliError(f"limits file {path}: {key} must be a positive integer, got {value!r}")
            changes[name] = value
    return replace(base, **changes)


class LimitsWatch:
    """Tells when the limits file changed (watchdog on its directory: editors replace files by renaming)."""

    def __init__(self, path: Path) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        self.path = path.resolve()
        self.changed = threading.Event()
        watched, changed = self.path, self.changed

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                paths = (event.src_path, getattr(event, "dest_path", ""))
                if any(p and Path(os.fsdecode(p)).resolve() == watched for p in paths):
                    changed.set()

        self.observer = Observer()
        self.observer.schedule(Handler(), str(self.path.parent), recursive=False)
        self.observer.start()

    def stop(self) -> None:
        stop_observer(self.observer)  # execute-state.json is replaced beside the limits file: no spurious ERROR


# ------------------------------------------------------------------------------------------------ brokers


@dataclass
class ClusterRun:
    view: ClusterView
    client: Client
    moves: list[Move]
    brokers: list[int] = field(default_factory=list)  # those the plan touches
    unreachable: dict[int, float] = field(default_factory=dict)  # broker -> since when (monotonic)
    assignment: dict[tuple[str, int], list[int]] = field(default_factory=dict)


def _connect(view: ClusterView, moves: list[Move], timeout: float) -> ClusterRun:
    name = view.source.name
    if view.error is not None and not view.brokers:
        raise CliError(f"cluster {name}: {view.error}")
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in view.brokers)
    try:
        client = Client(bootstrap, timeout=timeout, security=view.source.security)
    except ClientError as e:
        raise CliError(f"cluster {name}: {e}") from None
    # The brokers discovery found (ZooKeeper's registrations among them) are reachable too, not only those the
    # bootstrap broker's Metadata names: a moverd names only itself.
    for b in view.brokers:
        client.brokers.setdefault(b.broker, (b.host, b.port))
    run = ClusterRun(view, client, moves, sorted({m.broker for m in moves if not m.between_brokers}))
    run.assignment = {(t, p): replicas for t, p, replicas in view.partitions}
    return run


def _observe(run: ClusterRun, brokers: list[int], moves: list[Move],
             out: TextIO) -> dict[int, dict[TopicPartitionReplica, ReplicaDirs]]:
    """Where the replicas of `moves` are now, per broker; a broker that does not answer is left out (and said)."""
    seen: dict[int, dict[TopicPartitionReplica, ReplicaDirs]] = {}
    for broker in brokers:
        topics: dict[str, set[int]] = defaultdict(set)
        for m in moves:
            if m.broker == broker:
                topics[m.topic].add(m.partition)
        if not topics:
            continue
        try:
            dirs = describe_broker(run.client, broker, {t: sorted(ps) for t, ps in topics.items()})
        except (ClientError, CliError) as e:
            if broker not in run.unreachable:
                print(f"broker {broker} of {run.view.source.name} does not answer: {e}", file=out)
            run.unreachable.setdefault(broker, time.monotonic())
            try:
                run.client.reconnect(broker)
            except ClientError:
                pass
            continue
        if broker in run.unreachable:
            print(f"broker {broker} of {run.view.source.name} answers again", file=out)
            del run.unreachable[broker]
        seen[broker] = replica_dirs(broker, dirs)
    return seen


def classify(run: ClusterRun, out: TextIO) -> None:
    """At start: what each move's replica says about it (the resume check)."""
    seen = _observe(run, run.brokers, [m for m in run.moves if not m.between_brokers], out)
    _classify_broker_moves(run, [m for m in run.moves if m.between_brokers], out)
    for m in run.moves:
        if m.between_brokers:
            continue
        replicas = run.assignment.get((m.topic, m.partition))
        if replicas is None or m.broker not in replicas:
            m.state, m.note = State.GONE, ("the partition no longer exists" if replicas is None
                                           else f"broker {m.broker} no longer holds a replica of it")
            continue
        if m.broker not in seen:
            m.state, m.note = State.UNREACHABLE, f"broker {m.broker} does not answer"
            continue
        info = seen[m.broker].get(m.replica)
        if info is None or info.current is None:
            m.state, m.note = State.MISMATCH, "the replica is in no online log dir of its broker"
        elif info.current == m.to_dir and info.future is None:
            m.state, m.copied = State.ALREADY_DONE, m.size_bytes
        elif info.current == m.from_dir and info.future == m.to_dir:
            m.state, m.copied = State.RUNNING, info.future_size  # started by an earlier run: adopted
            m.started_at = m.progress_at = time.monotonic()
        elif info.current == m.from_dir and info.future is None:
            m.state = State.PENDING
        elif info.current == m.from_dir:
            m.state, m.note = State.MISMATCH, f"it is being moved to {info.future}, not {m.to_dir}"
        else:
            m.state, m.note = State.MISMATCH, f"it is in {info.current}, the plan expected {m.from_dir}"


def _classify_broker_moves(run: ClusterRun, moves: list[Move], out: TextIO) -> None:
    """At start, for the moves between brokers: each partition's replicas now (those it started from when a
    reassignment is running, which the step engine then follows) and the ones its moves head to."""
    if not moves:
        return
    tps = sorted({(m.topic, m.partition) for m in moves})
    try:
        ongoing = list_reassignments(run.client, tps)
    except (ClientError, AdminError) as e:
        for m in moves:
            m.state, m.note = State.UNREACHABLE, f"the cluster does not list its reassignments: {e}"
        return
    for tp in tps:
        mine = [m for m in moves if (m.topic, m.partition) == tp]
        listed = run.assignment.get(tp)
        base = tuple(ongoing[tp].original) if tp in ongoing else tuple(listed or ())
        if listed is None:
            for m in mine:
                m.state, m.note = State.GONE, "the partition no longer exists"
            continue
        final = list(base)
        for m in mine:
            if m.broker in final and m.to_broker not in final:
                final[final.index(m.broker)] = m.to_broker  # type: ignore[call-overload]
        for m in mine:
            m.replicas_from, m.replicas_to = base, tuple(final)
            if m.broker in base and m.to_broker not in base:
                m.state = State.PENDING  # a running reassignment to the same target is adopted by the engine
            elif m.to_broker in base and m.broker not in base:
                m.state, m.copied = State.ALREADY_DONE, m.size_bytes
            elif m.broker not in base:
                m.state, m.note = State.GONE, f"broker {m.broker} no longer holds a replica of it"
            else:
                m.state, m.note = State.MISMATCH, f"broker {m.to_broker} already holds a replica of it"


def broker_lane(run: ClusterRun, moves: list[Move], limits: Limits, *, plan: Path, stall_s: float,
                say: Callable[[str], None]) -> BrokerMoves | None:
    """The step engine for the plan's moves between brokers of one cluster: KIP-435 steps with the partition
    movements bounded by --max-moves, one replica per partition per step, the replication throttle at --throttle."""
    todo = [m for m in moves if m.between_brokers and m.state is State.PENDING]
    if not todo:
        return None
    finals = {(m.topic, m.partition): m.replicas_to for m in todo}
    try:
        min_insync = min_insync_replicas(run.client, sorted({t for t, _ in finals}))
    except (ClientError, AdminError) as e:
        for m in todo:
            m.state, m.note = State.FAILED, f"cannot read min.insync.replicas: {e}"
            say(f"failed {m}: {m.note}")
        return None
    runs = [PartitionRun(tp, final, min_insync.get(tp[0], 1)) for tp, final in finals.items()]
    # The replication throttle's originals are kept in PLANDIR, as the log-dir throttle's: the plan's own, so a
    # mover-reassign running on the same cluster keeps its own, and running execute again restores them.
    store = RequestStore(run.client.cluster_id, plan / REASSIGN_STATE_DIR)
    engine = StepEngine(run.client, runs, _run_limits(limits), ReplicationThrottle(run.client, store),
                        out=sys.stdout, stall_s=stall_s)
    engine.say = say  # type: ignore[method-assign]  # the engine's event lines join execute's (above the bars)
    return BrokerMoves(engine, todo)


def _run_limits(limits: Limits) -> RunLimits:
    return RunLimits(Limits435(max_partition_movements=limits.per_cluster), limits.throttle)


class BrokerMoves:
    """A lane of the step loop: the step engine, with the plan's moves kept in step with its partitions."""

    def __init__(self, engine: StepEngine, moves: list[Move]) -> None:
        self.engine = engine
        self.moves = moves

    def observe(self, first: bool) -> None:
        self.engine.observe(first)
        self._sync()

    def advance(self, start: bool) -> None:
        self.engine.advance(start)
        self._sync()

    def busy(self) -> bool:
        return self.engine.busy()

    def pending(self) -> bool:
        return self.engine.pending()

    def set_limits(self, limits: Limits) -> None:
        new = _run_limits(limits)
        if new != self.engine.limits:
            self.engine.limits = new
            if new.throttle is not None:
                self.engine.throttle.set_rate([], new.throttle)

    def _sync(self) -> None:
        for m in self.moves:
            run = self.engine.runs[(m.topic, m.partition)]
            if run.error is not None:
                m.state, m.note = State.FAILED, run.error
            elif run.done:
                m.state, m.copied = State.DONE, m.size_bytes
            elif run.step is not None:
                if m.state is not State.RUNNING:
                    m.started_at = time.monotonic()
                m.state = State.RUNNING
                p = run.progress.get(m.to_broker)  # type: ignore[arg-type]
                m.copied = p.numerator if p is not None else m.copied
                m.stalled = p.stalled if p is not None else False
            else:
                m.state = State.PENDING


# ------------------------------------------------------------------------------------------------ scheduling


def startable(moves: list[Move], limits: Limits) -> list[Move]:
    """The pending moves that may start now, in plan order, without exceeding any limit once started."""
    per_cluster: dict[str, int] = defaultdict(int)
    per_broker: dict[tuple[str, int], int] = defaultdict(int)
    per_disk: dict[tuple[str, int, str], int] = defaultdict(int)
    # A broker's step s waits for its earlier steps: the plan may free space on a disk before filling it.
    first_open_step: dict[tuple[str, int], int] = {}
    moves = [m for m in moves if not m.between_brokers]  # those run in the step engine's lane
    for m in moves:
        if m.state in (State.PENDING, State.RUNNING):
            key = (m.cluster, m.broker)
            first_open_step[key] = min(first_open_step.get(key, m.step), m.step)
        if m.state is State.RUNNING:
            per_cluster[m.cluster] += 1
            per_broker[(m.cluster, m.broker)] += 1
            for d in set(m.disks):
                per_disk[d] += 1
    chosen = []
    for m in moves:
        if m.state is not State.PENDING or m.step > first_open_step[(m.cluster, m.broker)]:
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


def waves(moves: list[Move], limits: Limits) -> list[list[Move]]:
    """--dry-run: the steps if each wave of started moves ended together."""
    sim = [replace(m) for m in moves]
    out = []
    while True:
        wave = startable(sim, limits)
        if not wave:
            return out
        out.append(wave)
        for m in sim:
            if m in wave or m.state is State.RUNNING:
                m.state = State.DONE


# ------------------------------------------------------------------------------------------------ the run


class Interrupt:
    """First SIGINT: start nothing more and watch the running moves end. Second: leave now."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count >= 2:
            raise KeyboardInterrupt



class Executor:
    def __init__(self, runs: list[ClusterRun], limits: Limits, *, plan: Path, stall_s: float, poll_s: float,
                 limits_path: Path | None, out: TextIO) -> None:
        self.runs = runs
        self.limits = limits
        self.plan = plan
        self.stall_s = stall_s
        self.poll_s = poll_s
        self.limits_path = limits_path
        self.out = out
        self.interrupt = Interrupt()
        # Each broker's own throttle from before this run (or an earlier, interrupted one) changed it.
        self.saved = SavedThrottles(plan)
        self.live = LiveProgress(out)
        self.broker_lanes: list[BrokerMoves] = []

    @property
    def moves(self) -> list[Move]:
        return [m for r in self.runs for m in r.moves]

    def say(self, text: str) -> None:
        self.live.say(text)

    def run(self) -> int:
        watch = LimitsWatch(self.limits_path) if self.limits_path is not None else None
        try:
            with handling_sigint(self.interrupt), self._progress() as progress:
                self._apply_throttle()
                self.broker_lanes = [lane for r in self.runs if (lane := broker_lane(
                    r, r.moves, self.limits, plan=self.plan, stall_s=self.stall_s, say=self.say)) is not None]
                self._loop(watch, progress)
        except KeyboardInterrupt:
            self._left_running(final=True)
            return EXIT_INTERRUPTED
        except Exception:
            # An unexpected failure must not leave the run's throttle in place of the operator's.
            self._restore_throttle()
            self._restore_replication_throttle()
            raise
        finally:
            if watch is not None:
                watch.stop()
        self._restore_throttle()
        if not self.interrupt.count or not any(lane.busy() for lane in self.broker_lanes):
            self._restore_replication_throttle()
        status = self._summary()
        return EXIT_INTERRUPTED if self.interrupt.count else status

    def _loop(self, watch: LimitsWatch | None, progress: Any) -> None:
        """The step engine's loop (mover/admin/step_engine.py drive) over two lanes: this executor's log-dir moves
        (AlterReplicaLogDirs, limits per disk, broker and cluster) and, for a plan that moves replicas between
        brokers, the step engine of each cluster (AlterPartitionReassignments, KIP-435 limits)."""
        announced_stop = False

        def before_start() -> None:
            nonlocal announced_stop
            if watch is not None and watch.changed.is_set():
                watch.changed.clear()
                self._reload_limits()
            if self.interrupt.count and not announced_stop:
                announced_stop = True
                self._left_running(final=False)

        drive([self, *self.broker_lanes], stopped=lambda: bool(self.interrupt.count), sleep=time.sleep,
              poll_s=self.poll_s, before_start=before_start, before_sleep=lambda: progress.update(self.moves))

    # ------------------------------------------------------------------------ the log-dir moves, as a Lane

    def observe(self, first: bool) -> None:
        if not first:  # classify has just asked the brokers
            self._poll()

    def advance(self, start: bool) -> None:
        if start:
            self._start(startable(self.moves, self.limits))

    def busy(self) -> bool:
        return any(m.state is State.RUNNING for m in self.moves if not m.between_brokers)

    def pending(self) -> bool:
        return any(m.state is State.PENDING for m in self.moves if not m.between_brokers)

    def _restore_replication_throttle(self) -> None:
        """The replication throttle of the moves between brokers: this run's, or one a killed run on this plan left
        (its originals are in PLANDIR/reassign-state/ until they are back)."""
        lanes = {id(lane.engine.client): lane for lane in self.broker_lanes}
        for r in self.runs:
            lane = lanes.get(id(r.client))
            if lane is not None:
                throttle_ = lane.engine.throttle
            elif (self.plan / REASSIGN_STATE_DIR).is_dir():
                store = RequestStore(r.client.cluster_id, self.plan / REASSIGN_STATE_DIR)
                if not store.originals():
                    continue
                throttle_ = ReplicationThrottle(r.client, store)
            else:
                continue
            try:
                restored = throttle_.restore_all(out=self.out)
            except (ClientError, AdminError) as e:
                self.say(f"cannot restore the replication throttle of {r.view.source.name}: {e} (running execute "
                         f"again on this plan retries)")
                continue
            if restored:
                self.say(f"replication throttle of {r.view.source.name} restored: {', '.join(restored)}")

    def _reload_limits(self) -> None:
        assert self.limits_path is not None
        try:
            new = read_limits(self.limits_path, self.limits)
        except CliError as e:
            self.say(f"{e} (keeping: {self.limits.describe()})")
            return
        if new == self.limits:
            return
        old, self.limits = self.limits, new
        self.say(f"limits changed: {new.describe()}")
        for lane in self.broker_lanes:
            lane.set_limits(new)
        if new.throttle != old.throttle:
            self._apply_throttle()

    def _apply_throttle(self) -> None:
        for r in self.runs:
            name = r.view.source.name
            brokers = [b for b in r.brokers if any(m.broker == b and m.state in (State.PENDING, State.RUNNING)
                                                   for m in r.moves if not m.between_brokers)]
            done = self._throttle_each(r, brokers, self.limits.throttle)
            if done:
                rate = "removed" if self.limits.throttle is None else f"set to {_rate_text(self.limits.throttle)}"
                self.say(f"throttle {rate} on brokers {','.join(map(str, done))} of {name}")

    def _restore_throttle(self) -> None:
        """Every broker whose throttle this run (or an interrupted one on this plan) changed gets its own back."""
        for r in self.runs:
            name = r.view.source.name
            removed: list[int] = []
            restored: list[tuple[int, dict[str, str]]] = []
            for broker in self.saved.brokers(name):
                original = self.saved.original(name, broker) or {}
                try:
                    throttle.restore_throttle(r.client, broker, original)
                    self.saved.forget(name, broker)
                except (ClientError, CliError) as e:
                    action = "restore" if original else "remove"
                    self.say(f"cannot {action} the throttle on broker {broker} of {name}: {e} (running execute "
                             f"again on this plan retries; {self.saved.path} keeps the original)")
                    continue
                if original:
                    restored.append((broker, original))
                else:
                    removed.append(broker)
            if removed:
                self.say(f"throttle removed on brokers {','.join(map(str, removed))} of {name}")
            for broker, original in restored:
                self.say(f"throttle of broker {broker} of {name} restored to its own: {_config_text(original)}")

    def _ensure_original(self, r: ClusterRun, broker: int) -> bool:
        """Read and keep the broker's own throttle before the first change; False: leave the broker alone."""
        name = r.view.source.name
        if self.saved.original(name, broker) is not None:
            return True
        try:
            original = throttle.dynamic_throttle(r.client, broker)
            self.saved.record(name, broker, original)
        except (ClientError, CliError) as e:
            # Without its original kept, the broker's own throttle could not be put back: do not touch it.
            self.say(f"leaving the throttle of broker {broker} of {name} unchanged: {e}")
            return False
        if original:
            self.say(f"broker {broker} of {name} has its own throttle, restored at the end: {_config_text(original)}")
        return True

    def _throttle_each(self, r: ClusterRun, brokers: list[int], rate: int | None) -> list[int]:
        """One broker at a time, so one that does not answer leaves the others' throttle right."""
        done = []
        for broker in brokers:
            if not self._ensure_original(r, broker):
                continue
            try:
                throttle.set_throttle(r.client, [broker], rate)
                done.append(broker)
            except (ClientError, CliError) as e:
                action = "remove" if rate is None else "set"
                self.say(f"cannot {action} the throttle on broker {broker} of {r.view.source.name}: {e}")
        return done

    def _start(self, moves: list[Move]) -> None:
        by_run: dict[str, list[Move]] = defaultdict(list)
        for m in moves:
            by_run[m.cluster].append(m)
        for r in self.runs:
            chosen = [m for m in by_run.get(r.view.source.name, []) if m.broker not in r.unreachable]
            for m in chosen:
                if m.broker in r.unreachable:
                    continue  # went away while starting an earlier move of this round
                try:
                    alter_log_dirs(r.client, {m.replica: m.to_dir}, ALTER_TIMEOUT_S)
                except ClientError as e:
                    # The broker, not the move: keep it to do, and watch whether the broker comes back.
                    self.say(f"broker {m.broker} of {m.cluster} does not answer: {e}")
                    r.unreachable.setdefault(m.broker, time.monotonic())
                    continue
                except CliError as e:
                    m.state, m.note = State.FAILED, str(e)
                    self.say(f"failed to start {m}: {e}")
                    continue
                m.state, m.started_at, m.progress_at, m.copied = State.RUNNING, time.monotonic(), time.monotonic(), 0
                self.say(f"started {m}: {m.from_dir} -> {m.to_dir} ({_size(m.size_bytes)}, step {m.step})")

    def _poll(self) -> None:
        now = time.monotonic()
        for r in self.runs:
            disk_moves = [m for m in r.moves if not m.between_brokers]  # the others are the step engine's
            running = [m for m in disk_moves if m.state is State.RUNNING]
            # Brokers that stopped answering are asked again, also those with only moves still to start.
            waiting = [m for m in disk_moves if m.state is State.PENDING and m.broker in r.unreachable]
            if not running and not waiting:
                continue
            seen = _observe(r, sorted({m.broker for m in running + waiting}), running + waiting, self.out)
            self._give_up_on_silent_brokers(r, now)
            for m in running:
                if m.broker not in seen:
                    self._check_stall(m, now)
                    continue
                info = seen[m.broker].get(m.replica)
                if info is not None and info.current == m.to_dir and info.future is None:
                    m.state, m.copied = State.DONE, max(m.size_bytes, info.current_size)
                    self.say(f"done {m} in {now - m.started_at:.1f} s")
                elif info is not None and info.future == m.to_dir:
                    if info.future_size > m.copied:
                        m.copied, m.progress_at = info.future_size, now
                        if m.stalled:
                            m.stalled = False
                            self.say(f"progressing again: {m}")
                    self._check_stall(m, now)
                elif info is None or info.current is None:
                    m.state, m.note = State.FAILED, "the replica disappeared from its broker during the move"
                    self.say(f"failed {m}: {m.note}")
                else:
                    m.state = State.FAILED
                    m.note = f"no copy is being built in {m.to_dir} (cancelled, or failed on the broker)"
                    self.say(f"failed {m}: {m.note}")

    def _give_up_on_silent_brokers(self, r: ClusterRun, now: float) -> None:
        """A broker silent for --stall-seconds: its moves end this run as unreachable (a running one may still
        finish on the broker; running execute again tells)."""
        for broker, since in r.unreachable.items():
            if now - since < self.stall_s:
                continue
            for m in r.moves:
                if m.broker == broker and m.state in (State.PENDING, State.RUNNING) and not m.between_brokers:
                    m.state = State.UNREACHABLE
                    m.note = f"broker {broker} has not answered for {now - since:.0f} s" + (
                        "; the move may still finish there" if m.started_at else "")
                    self.say(f"unreachable: {m}: {m.note}")

    def _check_stall(self, m: Move, now: float) -> None:
        if not m.stalled and now - m.progress_at >= self.stall_s:
            m.stalled = True
            self.say(f"stalled: {m} has made no progress for {now - m.progress_at:.0f} s "
                     f"({_size(m.copied)} of {_size(m.size_bytes)} copied)")

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
            mine = [m for m in running if m.cluster == r.view.source.name]
            if not mine:
                continue
            path = self._cancel_file(r, mine)
            bootstrap = ",".join(f"{b.host}:{b.port}" for b in r.view.brokers)
            self.say(f"{len(mine)} move(s) of {r.view.source.name} still running; to cancel them:")
            security = r.view.source.security
            config = f" --command-config {security.source}" if security is not None and security.source else ""
            self.say(f"  mover-log-dirs --bootstrap-server {bootstrap}{config} --cancel --reassignment-json-file "
                     f"{path}")
        if final:
            self.say(f"the moves keep running on the brokers, and so does this run's throttle; run execute again to "
                     f"resume watching them: at its end it puts back each broker's own throttle, kept in "
                     f"{self.saved.path}")

    def _cancel_file(self, r: ClusterRun, moves: list[Move]) -> Path:
        targets = []
        for m in moves:
            replicas = tuple(r.assignment.get((m.topic, m.partition), [m.broker]))
            targets.append(PartitionTarget(m.topic, m.partition, replicas, tuple(
                m.to_dir if b == m.broker else ANY_LOG_DIR for b in replicas)))
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = self.plan / f"running-{r.view.source.name}-{stamp}.json"
        try:
            path.write_text(reassignment_json(targets) + "\n")
        except OSError:
            path = Path.cwd() / path.name
            path.write_text(reassignment_json(targets) + "\n")
        return path

    def _progress(self) -> LiveProgress:
        return self.live

    def _summary(self) -> int:
        counts: dict[State, int] = defaultdict(int)
        for m in self.moves:
            counts[m.state] += 1
        for m in self.moves:
            if m.state in (State.MISMATCH, State.FAILED, State.UNREACHABLE, State.PENDING):
                self.say(f"{m.state.value}: {m}: {m.note or 'not started'}")
        self.say("executed: " + (", ".join(f"{counts[s]} {s.value}" for s in State if counts[s]) or "nothing to do"))
        bad = counts[State.MISMATCH] + counts[State.FAILED] + counts[State.UNREACHABLE] + counts[State.PENDING]
        return EXIT_ERROR if bad else EXIT_OK


class LiveProgress:
    """rich's live bars (bytes, rate, ETA) on a terminal; nothing extra otherwise (the event lines say it all)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.progress: Any = None
        self.tasks: dict[tuple[str, TopicPartitionReplica], Any] = {}
        self.total: Any = None

    def __enter__(self) -> LiveProgress:
        if self.out.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TransferSpeedColumn(), TimeRemainingColumn(),
                                     console=Console(file=self.out), transient=True)
            self.progress.start()
        return self

    def say(self, text: str) -> None:
        """One event line; above the live bars while they are shown, so the two never garble each other."""
        if self.progress is not None:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.out, flush=True)

    def update(self, moves: list[Move]) -> None:
        if self.progress is None:
            return
        todo = [m for m in moves if m.state not in (State.GONE, State.MISMATCH, State.ALREADY_DONE)]
        total = sum(m.size_bytes for m in todo)
        done = sum(m.size_bytes if m.state is State.DONE else m.copied for m in todo)
        if self.total is None:
            self.total = self.progress.add_task("all moves", total=total)
        self.progress.update(self.total, total=total, completed=done)
        for m in moves:
            key = (m.cluster, m.replica)
            if m.state is State.RUNNING:
                if key not in self.tasks:
                    self.tasks[key] = self.progress.add_task(str(m), total=m.size_bytes)
                self.progress.update(self.tasks[key], completed=m.copied,
                                     description=str(m) + (" (stalled)" if m.stalled else ""))
            elif key in self.tasks:
                self.progress.remove_task(self.tasks.pop(key))

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


# ------------------------------------------------------------------------------------------------ entry point


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    moves = read_moves(args.plan)
    limits = limits_from_args(args)
    if args.limits is not None:
        limits = read_limits(args.limits, limits)
    sources = sources_from_args(args)
    names = {s.name for s in sources}
    plan_clusters = sorted({m.cluster for m in moves})
    if moves and not names & set(plan_clusters):
        raise CliError(f"the plan moves replicas of cluster(s) {', '.join(plan_clusters)}; the brokers given are "
                       f"cluster(s) {', '.join(sorted(names))} (name them with --cluster)", EXIT_USAGE)
    for name in plan_clusters:
        if name not in names:
            print(f"cluster {name} of the plan is not among the brokers given: its moves are left", file=out)
    runs = []
    unreached = 0
    try:
        for s in sources:
            mine = [m for m in moves if m.cluster == s.name]
            if not mine:
                continue
            try:
                run_ = _connect(discover(s, args.timeout), mine, args.timeout)
            except CliError as e:
                if len(sources) == 1:
                    raise
                # One cluster out of reach must not hold up the fleet's other clusters.
                print(f"not moved: the {len(mine)} move(s) of cluster {s.name}: {e}", file=out)
                unreached += 1
                continue
            runs.append(run_)
            classify(run_, out)
        _report_checked([m for r in runs for m in r.moves], out)
        todo = [m for r in runs for m in r.moves if m.state in (State.PENDING, State.RUNNING)]
        print(f"plan {args.plan}: {len(todo)} move(s) to carry out, {_size(sum(m.size_bytes for m in todo))}; "
              f"{limits.describe()}", file=out)
        print(_throttle_in_effect(args, limits), file=out)
        # Before any move: nothing new may land on a disk being drained (docs/cordons.md).
        drain.cordon_drained(runs, args.plan, out, dry_run=args.dry_run)
        if args.dry_run:
            leftover = {r.view.source.name: SavedThrottles(args.plan).brokers(r.view.source.name) for r in runs}
            for name, brokers in leftover.items():
                if brokers:
                    print(f"an earlier run left its throttle on brokers {','.join(map(str, brokers))} of {name}: "
                          f"execute puts back their own at its end", file=out)
            status = dry_run([m for r in runs for m in r.moves], limits, out)
        else:
            status = Executor(runs, limits, plan=args.plan, stall_s=args.stall_seconds, poll_s=args.poll_interval,
                              limits_path=args.limits, out=out).run()
        return EXIT_ERROR if unreached and status == EXIT_OK else status
    finally:
        for r in runs:
            r.client.close()


def _throttle_in_effect(args: argparse.Namespace, limits: Limits) -> str:
    """Where the run's throttle comes from: the operator must see that a default one applies."""
    if limits.throttle is None:
        rate = "none: moves run unthrottled (each broker's own throttle is lifted for the run, restored at the end)"
    else:
        rate = (f"{_rate_text(limits.throttle)} per broker with moves, for the run; each broker's own is restored at "
                "the end")
    if args.limits is not None and limits.throttle != limits_from_args(args).throttle:
        origin = f"from {args.limits}"
    elif args.throttle is _THROTTLE_NOT_GIVEN:
        origin = "execute's default (Kafka's own is unlimited; --throttle N, or -1 for none)"
    else:
        origin = "--throttle"
    return f"throttle: {rate} [{origin}]"


def _report_checked(moves: list[Move], out: TextIO) -> None:
    done = [m for m in moves if m.state is State.ALREADY_DONE]
    adopted = [m for m in moves if m.state is State.RUNNING]
    if done:
        print(f"{len(done)} move(s) already done (checked on the brokers)", file=out)
    for m in adopted:
        print(f"already running: {m}: {m.from_dir} -> {m.to_dir} ({_size(m.copied)} copied)", file=out)
    for m in moves:
        if m.state is State.GONE:
            print(f"skipped: {m}: {m.note}", file=out)
        elif m.state is State.MISMATCH:
            print(f"not moved: {m}: {m.note} (the plan no longer matches; collect and plan again)", file=out)
        elif m.state is State.UNREACHABLE:
            print(f"not moved: {m}: {m.note}", file=out)


def dry_run(moves: list[Move], limits: Limits, out: TextIO) -> int:
    running = [m for m in moves if m.state is State.RUNNING]
    if running:
        print(f"running now: {len(running)} move(s)", file=out)
    for i, wave in enumerate(waves(moves, limits), 1):
        print(f"step {i}: {len(wave)} move(s), {_size(sum(m.size_bytes for m in wave))}", file=out)
        for m in wave:
            print(f"  {m}: {m.from_dir} -> {m.to_dir} ({_size(m.size_bytes)})", file=out)
    between = {(m.cluster, m.topic, m.partition): m for m in moves if m.between_brokers and m.state is State.PENDING}
    if between:
        print(f"between brokers, in KIP-435 steps (at most {limits.per_cluster} partitions at once): "
              f"{len(between)} partition(s)", file=out)
        for (cluster, topic, partition), m in sorted(between.items()):
            print(f"  {topic}-{partition} of {cluster}: replicas {list(m.replicas_from)} -> {list(m.replicas_to)}",
                  file=out)
    return EXIT_OK
