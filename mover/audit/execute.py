"""`mover-audit execute --plan PLANDIR`: carry a plan's moves out in steps, KIP-435's idea applied to disks (and, for
rows with a `to_broker`, KIP-435 itself: those run on the step engine, in the same loop). The command line: options,
what is printed before and after the run, exit codes. The run itself is mover/audit/executor/.

    mover-audit execute --plan PLANDIR (--fleet F | --bootstrap-server H:P | --zookeeper H:P/chroot) [--cluster NAME]
                        [--max-moves-per-disk 1] [--max-moves-per-broker 2] [--max-moves 10]
                        [--max-partition-movements 5] [--max-replica-movements 1] [--max-leader-movements 2]
                        [--throttle B/S] [--limits FILE] [--stall-seconds 300] [--dry-run]

KIP-435 (incremental reassignment) starts a few replica movements at a time and the next as earlier ones finish,
so a big rebalance never floods the cluster. Here the unit is one replica moving between two disks of a broker: at
most `--max-moves-per-disk` moves touch a disk (as source or destination), `--max-moves-per-broker` run on a broker
and `--max-moves` in a cluster at once (moves between brokers count there too); a move of the plan's step s starts
on a broker only once that broker's moves of earlier steps ended. Moves between brokers keep KIP-435's own limits
(`--max-partition-movements`, `--max-replica-movements` per partition per step, `--max-leader-movements`). All of
them and the throttle can be changed while it runs through `--limits FILE` (JSON or TOML, the options' names without
dashes, re-read when it changes), effective at the next step.

What is done is asked of the brokers, never taken from a local file (executor/clusters.py `classify`), so running
the command again after an interruption resumes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import FrameType
from typing import TextIO

from mover.admin.common import AdminError, some
from mover.admin.common import format_bytes as _size
from mover.admin.limits import (
    DEFAULT_MAX_PER_BROKER,
    DEFAULT_MAX_PER_CLUSTER,
    DEFAULT_MAX_PER_DISK,
    DiskLimits,
    RunLimits,
    parse_budget,
    rate_text,
    read_limits,
)
from mover.admin.reassign.schedule import format_duration
from mover.admin.reassign.steps import (
    DEFAULT_MAX_LEADER_MOVEMENTS,
    DEFAULT_MAX_PARTITION_MOVEMENTS,
    DEFAULT_MAX_REPLICA_MOVEMENTS,
    Limits,
)
from mover.admin.throttle import DEFAULT_THROTTLE
from mover.audit import drain
from mover.audit.balancer.lease import PlanLease
from mover.audit.errors import AuditError, AuditInputError
from mover.audit.executor import schedule
from mover.audit.executor.clusters import ClusterRun, classify, connect, known_brokers, refusals
from mover.audit.executor.loop import Executor, Outcome
from mover.audit.executor.moves import OPEN, Move, State, read_moves
from mover.audit.executor.throttles import TOOL, LogDirThrottles
from mover.audit.fleet import add_arguments as add_source_arguments
from mover.audit.fleet import discover, sources_from_args
from mover.cli.arguments import positive_int, rate_or_minus_one
from mover.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, handling_sigint
from mover.cli.progress import LiveBars

# --throttle not given: the default, said as such at the start of the run (argparse applies `type` to str defaults).
_THROTTLE_NOT_GIVEN = object()
DEFAULT_STALL_S = 300.0
DEFAULT_POLL_S = 1.0
EXIT_CODES = {Outcome.DONE: EXIT_OK, Outcome.UNFINISHED: EXIT_ERROR, Outcome.INTERRUPTED: EXIT_INTERRUPTED}


# ------------------------------------------------------------------------------------------------ arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", type=Path, required=True, metavar="PLANDIR", help="a plan written by `plan`")
    add_source_arguments(parser)
    add_disk_limit_arguments(parser.add_argument_group("moves between the log dirs of a broker"))
    brokers = parser.add_argument_group("moves between brokers (KIP-435 steps, the plan's to_broker)")
    brokers.add_argument("--max-partition-movements", type=positive_int, default=DEFAULT_MAX_PARTITION_MOVEMENTS,
                         metavar="N", help=f"partitions with a step running at once (default "
                                           f"{DEFAULT_MAX_PARTITION_MOVEMENTS})")
    brokers.add_argument("--max-replica-movements", type=positive_int, default=DEFAULT_MAX_REPLICA_MOVEMENTS,
                         metavar="N", help=f"replicas added to a partition per step (default "
                                           f"{DEFAULT_MAX_REPLICA_MOVEMENTS})")
    brokers.add_argument("--max-leader-movements", type=positive_int, default=DEFAULT_MAX_LEADER_MOVEMENTS,
                         metavar="N", help=f"steps moving a preferred leader at once (default "
                                           f"{DEFAULT_MAX_LEADER_MOVEMENTS})")
    parser.add_argument("--throttle", type=rate_or_none, default=_THROTTLE_NOT_GIVEN, metavar="BYTES_PER_S",
                        help=f"log-dir move throttle (replica.alter.log.dirs.io.max.bytes.per.second) set on each "
                             f"broker with moves for the run, -1 for none; each broker's own throttle is restored "
                             f"at the end. Default {DEFAULT_THROTTLE} ({_size(DEFAULT_THROTTLE)}/s), chosen by "
                             f"execute to spare the disks: Kafka's own default is unlimited. Moves between brokers "
                             f"get it as their replication throttle")
    parser.add_argument("--limits", type=Path, metavar="FILE",
                        help="JSON or TOML with any of max_moves_per_disk, max_moves_per_broker, max_moves, "
                             "max_partition_movements, max_replica_movements, max_leader_movements, disk_budgets, "
                             "throttle; re-read when it changes: changes apply at the next step")
    parser.add_argument("--stall-seconds", type=float, default=DEFAULT_STALL_S, metavar="S",
                        help=f"report a move whose copy has not grown for this long (default {DEFAULT_STALL_S:g})")
    parser.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_S, metavar="S",
                        help=f"how often running moves are checked (default {DEFAULT_POLL_S:g})")
    parser.add_argument("--dry-run", action="store_true", help="check the plan against the brokers, print the steps")


def add_disk_limit_arguments(disks: argparse._ArgumentGroup) -> None:
    """The limits of moves between log dirs (mover-audit balance takes them too)."""
    disks.add_argument("--max-moves-per-disk", type=positive_int, default=DEFAULT_MAX_PER_DISK, metavar="N",
                       help=f"moves touching one disk at once, as source or destination (default "
                            f"{DEFAULT_MAX_PER_DISK})")
    disks.add_argument("--max-moves-per-broker", type=positive_int, default=DEFAULT_MAX_PER_BROKER, metavar="N",
                       help=f"moves on one broker at once (default {DEFAULT_MAX_PER_BROKER})")
    disks.add_argument("--max-moves", type=positive_int, default=DEFAULT_MAX_PER_CLUSTER, metavar="N",
                       help=f"moves in one cluster at once, moves between brokers included (default "
                            f"{DEFAULT_MAX_PER_CLUSTER})")
    disks.add_argument("--disk-budget", type=_budget, action="append", default=[], metavar="LOG_DIR=BYTES_PER_S",
                       help="the most a move may read from or write to LOG_DIR (on any broker having it) per second; "
                            "a broker running moves gets the smallest budget of their disks as its log-dir move "
                            "throttle, if below --throttle (repeatable; limits file: disk_budgets)")


def _budget(text: str) -> tuple[str, int]:
    try:
        return parse_budget(text)
    except AdminError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def disk_limits_from_args(args: argparse.Namespace) -> DiskLimits:
    return DiskLimits(args.max_moves_per_disk, args.max_moves_per_broker, args.max_moves,
                      tuple(sorted(dict(args.disk_budget).items())))


def rate_or_none(text: str) -> int | None:
    """--throttle: bytes per second, None for -1 (unthrottled)."""
    value = rate_or_minus_one(text)
    return None if value == -1 else value


def limits_from_args(args: argparse.Namespace) -> RunLimits:
    rate = DEFAULT_THROTTLE if args.throttle is _THROTTLE_NOT_GIVEN else args.throttle
    return RunLimits(Limits(args.max_partition_movements, args.max_replica_movements, args.max_leader_movements),
                     rate, disk_limits_from_args(args))


# ------------------------------------------------------------------------------------------------ the view


class MovesView:
    """execute's progress: rich's live bars (bytes, rate, ETA) on a terminal, one for all moves and one per running
    move; nothing extra otherwise (the event lines say it all)."""

    def __init__(self, out: TextIO) -> None:
        self.bars = LiveBars(out, only_on_terminal=True, transient=True)

    def __enter__(self) -> MovesView:
        self.bars.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.__exit__(*exc)

    def say(self, text: str) -> None:
        self.bars.say(text)

    def update(self, moves: list[Move]) -> None:
        todo = [m for m in moves if m.state not in (State.GONE, State.MISMATCH, State.ALREADY_DONE)]
        done = sum(m.size_bytes if m.state is State.DONE else m.copied for m in todo)
        self.bars.bar("all", "all moves", done, sum(m.size_bytes for m in todo))
        running = {(m.cluster, m.replica): m for m in moves if m.state is State.RUNNING}
        for key, m in running.items():
            self.bars.bar(key, str(m) + (" (stalled)" if m.stalled else ""), m.copied, m.size_bytes)
        for key in self.bars.keys():
            if key != "all" and key not in running:
                self.bars.drop(key)


# ------------------------------------------------------------------------------------------------ entry point


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    moves = read_moves(args.plan)
    limits = limits_from_args(args)
    if args.limits is not None:
        limits = read_limits(args.limits, limits)  # a bad file is refused before anything starts
    sources = sources_from_args(args)
    names = {s.name for s in sources}
    plan_clusters = sorted({m.cluster for m in moves})
    if moves and not names & set(plan_clusters):
        raise AuditInputError(f"the plan moves replicas of cluster(s) {some(plan_clusters)}; the brokers given "
                              f"are cluster(s) {some(sorted(names))} (name them with --cluster)")
    for name in plan_clusters:
        if name not in names:
            print(f"cluster {name} of the plan is not among the brokers given: its moves are left", file=out)
    runs: list[ClusterRun] = []
    unreached = 0

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    lease = PlanLease(TOOL, say)

    try:
        for s in sources:
            mine = [m for m in moves if m.cluster == s.name]
            if not mine:
                continue
            try:
                run_ = connect(discover(s, args.timeout), mine, args.timeout)
            except AdminError as e:  # AuditError among them: a cluster out of reach, said in one line
                if len(sources) == 1:
                    raise
                # One cluster out of reach must not hold up the fleet's other clusters.
                print(f"not moved: the {len(mine)} move(s) of cluster {s.name}: {e}", file=out)
                unreached += 1
                continue
            runs.append(run_)
            classify(run_, say)
            problems = refusals(run_)
            if problems:
                raise AuditError(f"plan {args.plan}: {len(problems)} move(s) name what cluster {s.name} does not have "
                                 f"(brokers {some(sorted(known_brokers(run_)), ',')}); nothing was changed: "
                                 f"{some(problems, '; ')}")
        everything = [m for r in runs for m in r.moves]
        _report_checked(everything, out)
        todo = [m for m in everything if m.state in OPEN]
        print(f"plan {args.plan}: {len(todo)} move(s) to carry out, {_size(sum(m.size_bytes for m in todo))}; "
              f"{limits.describe(any(m.between_brokers for m in todo))}", file=out)
        print(_throttle_in_effect(args, limits), file=out)
        if not args.dry_run:
            # Before anything changes: no balancer moves these clusters' replicas while the plan runs, nor starts
            # to (balancer/lease.py).
            for r in runs:
                lease.take(r.name, r.client)
        # Before any move: nothing new may land on a disk being drained (docs/cordons.md).
        drain.cordon_drained(runs, args.plan, out, dry_run=args.dry_run)
        if args.dry_run:
            for r in runs:
                balancer = lease.balancer_of(r.name, r.client)
                if balancer is not None:
                    print(balancer, file=out)
                brokers = LogDirThrottles(args.plan, say).left_by_earlier(r)
                if brokers:
                    print(f"an earlier run left its throttle on brokers {','.join(map(str, brokers))} of {r.name}: "
                          f"execute puts back their own at its end", file=out)
            status = dry_run(everything, limits, out)
        else:
            executor = Executor(runs, limits, plan=args.plan, stall_s=args.stall_seconds, poll_s=args.poll_interval,
                                limits_path=args.limits, view=MovesView(out), must_stop=lease.lost)

            def on_sigint(signum: int, frame: FrameType | None) -> None:
                executor.interrupt()

            with handling_sigint(on_sigint):
                status = EXIT_CODES[executor.run()]
        return EXIT_ERROR if unreached and status == EXIT_OK else status
    finally:
        lease.release()
        for r in runs:
            r.client.close()


def _throttle_in_effect(args: argparse.Namespace, limits: RunLimits) -> str:
    """Where the run's throttle comes from: the operator must see that a default one applies."""
    if limits.throttle is None:
        rate = "none: moves run unthrottled (each broker's own throttle is lifted for the run, restored at the end)"
    else:
        rate = (f"{rate_text(limits.throttle)} per broker with moves, for the run; each broker's own is restored at "
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


def dry_run(moves: list[Move], limits: RunLimits, out: TextIO) -> int:
    assert limits.disks is not None
    running = [m for m in moves if m.state is State.RUNNING]
    if running:
        print(f"running now: {len(running)} move(s)", file=out)
    waves = schedule.waves(moves, limits.disks)
    for i, wave in enumerate(waves, 1):
        print(f"step {i}: {len(wave)} move(s), {_size(sum(m.size_bytes for m in wave))}", file=out)
        for m in wave:
            print(f"  {m}: {m.from_dir} -> {m.to_dir} ({_size(m.size_bytes)})", file=out)
    if waves and limits.throttle is not None:
        # Each wave as long as its busiest broker's bytes at the throttle; the executor starts the next moves as
        # earlier ones end rather than by waves, so the real run takes at most this.
        seconds = sum(schedule.wave_seconds(w, limits.throttle) for w in waves)
        print(f"estimate: at most {format_duration(seconds)} at the throttle of {limits.throttle} B/s per broker "
              f"({_size(sum(m.size_bytes for w in waves for m in w))} to copy between log dirs)", file=out)
    between = {(m.cluster, m.topic, m.partition): m for m in moves if m.between_brokers and m.state is State.PENDING}
    if between:
        at_once = min(limits.steps.max_partition_movements, limits.disks.per_cluster)
        print(f"between brokers, in KIP-435 steps (at most {at_once} partitions at once): {len(between)} "
              f"partition(s)", file=out)
        for (cluster, topic, partition), m in sorted(between.items()):
            print(f"  {topic}-{partition} of {cluster}: replicas {list(m.replicas_from)} -> {list(m.replicas_to)}",
                  file=out)
    return EXIT_OK
