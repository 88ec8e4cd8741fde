"""mover-log-dirs --progress [--request N] [--watch]: each broker's log-dir moves as the library reports them
(mover/admin/reassign/broker_moves.py: DescribeReplicaMoves, or DescribeLogDirs on a broker without it; per replica
KIP-179's Progress), printed, or shown as live bars. Also the tools' one live renderer (LiveBars) and the one loop of
every --progress --watch (poll_until_done).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgress

from mover.admin.client import AuthenticationFailed, Client, ClientError
from mover.admin.common import ClusterUnavailable, error_name
from mover.admin.reassign.broker_moves import BrokerMoves, FollowedBrokers, finished
from mover.admin.reassign.progress import ReplicaStatus
from mover.cli.common import EXIT_ERROR, EXIT_IN_PROGRESS, EXIT_OK
from mover.cli.describe import select_brokers

T = TypeVar("T")

DEFAULT_INTERVAL_S = 1.0
# How long --watch keeps polling a broker that does not answer before it gives up (poll_until_done).
BROKER_DOWN_GRACE_S = 60.0


def move_line(m: ReplicaStatus) -> str:
    """One move: `Replica t-0-1: /d1 -> /d2, copying, 10 of 40 bytes (25.0%)` (its source and destination dirs, the
    move's state, KIP-179's Progress; an error as its code's name and message)."""
    error = m.progress.error
    text = None if error is None else (f"{error_name(error.code)}: {error.message}" if error.message
                                       else error_name(error.code))
    state = f"{m.status} ({text})" if text else m.status
    return f"Replica {m.replica}: {m.log_dir} -> {m.future_dir}, {state}, {m.progress.amount()}"


def header(snap: BrokerMoves) -> str:
    if snap.request_id is None:
        return f"Replicas being moved on broker {snap.broker} (from DescribeLogDirs; no request ids):"
    started = _utc(snap.start_ms)
    ended = f"finished {_utc(snap.end_ms)}" if snap.end_ms >= 0 else "running"
    return f"Request {snap.request_id} on broker {snap.broker}: started {started}, {ended}"


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def exit_code(snapshots: list[BrokerMoves]) -> int:
    moves = [m for s in snapshots for m in s.replicas]
    if any(m.status == "failed" for m in moves):
        return EXIT_ERROR
    return EXIT_OK if all(finished(m) for m in moves) else EXIT_IN_PROGRESS


def print_snapshots(snapshots: list[BrokerMoves | None], brokers: list[int], out: TextIO) -> None:
    for broker, snap in zip(brokers, snapshots, strict=True):
        if snap is None:
            print(f"No replica moves on broker {broker}", file=out)
            continue
        print(header(snap), file=out)
        for m in snap.replicas:
            print(move_line(m), file=out)


def _printer(err: TextIO) -> Callable[[str], None]:
    return lambda line: print(line, file=err)


def progress(client: Client, brokers: list[int], request_id: int | None, out: TextIO,
             err: TextIO = sys.stderr) -> int:
    """--progress without --watch: one look; a broker that cannot be reached ends it (one line, exit 1)."""
    sources = FollowedBrokers(request_id, _printer(err)).open(client, brokers)
    snapshots = [s.fetch() for s in sources]
    print_snapshots(snapshots, [s.broker for s in sources], out)
    return exit_code([s for s in snapshots if s is not None])


def watch(connect: Callable[[], Client], broker_list: list[int] | None, request_id: int | None, interval_s: float,
          out: TextIO, err: TextIO = sys.stderr) -> int:
    """--progress --watch. Bootstrapping (`connect`) and opening each broker's connection (ApiVersions, SASL) are
    part of the first fetch watch_progress makes, so a connection lost in a handshake is retried by the watches' one
    loop (poll_until_done), as one lost later is: a restart may land on a handshake as well as on a poll."""
    client: Client | None = None
    followed = FollowedBrokers(request_id, _printer(err))

    def fetch() -> list[BrokerMoves | None]:
        nonlocal client
        if client is None:
            client = connect()  # kept once bootstrapped: later losses reconnect through it (Client.connection)
        return [s.fetch() for s in followed.open(client, select_brokers(client, broker_list))]

    try:
        snapshots = watch_progress(fetch, interval_s, out)
    finally:
        if client is not None:
            client.close()
    assert followed.sources is not None  # watch_progress returns only after a fetch that opened them all
    print_snapshots(snapshots, [s.broker for s in followed.sources], out)
    return exit_code([s for s in snapshots if s is not None])


class LiveBars:
    """The tools' one live progress renderer (rich): a bar per item with bytes done of the total, rate and time left,
    and event lines printed above the bars so the two never garble each other. Used by mover-log-dirs and
    mover-reassign `--progress --watch` and by mover-audit execute.

    `only_on_terminal`: draw nothing unless `out` is a terminal (the event lines then say it all); otherwise rich
    draws nothing live without a terminal and prints the bars once at the end. `transient`: the bars vanish at the
    end (a summary follows)."""

    def __init__(self, out: TextIO, *, only_on_terminal: bool = False, transient: bool = False) -> None:
        self.out = out
        self.only_on_terminal = only_on_terminal
        self.transient = transient
        self.progress: RichProgress | None = None
        self.tasks: dict[Hashable, TaskID] = {}

    def __enter__(self) -> LiveBars:
        if not self.only_on_terminal or self.out.isatty():
            # Paths and topic names are data, not rich markup.
            console = Console(file=self.out, markup=False, highlight=False)
            self.progress = RichProgress(TextColumn("{task.description}", markup=False), BarColumn(),
                                     DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn(),
                                     console=console, transient=self.transient, refresh_per_second=4)
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def say(self, text: str) -> None:
        """One event line; above the live bars while they are shown."""
        if self.progress is not None:
            self.progress.console.print(text, soft_wrap=True)
        else:
            print(text, file=self.out, flush=True)

    def bar(self, key: Hashable, description: str, done: int, total: int | None) -> None:
        """Add the bar `key`, or move it on (total None: unknown, no time left)."""
        if self.progress is None:
            return
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total)
        self.progress.update(self.tasks[key], completed=done, total=total, description=description)

    def drop(self, key: Hashable) -> None:
        if self.progress is not None and key in self.tasks:
            self.progress.remove_task(self.tasks.pop(key))

    def keys(self) -> list[Any]:
        return list(self.tasks)


def poll_until_done(poll: Callable[[], T | None], interval_s: float) -> T:
    """The one loop of the tools' --progress --watch (mover-log-dirs and mover-reassign): `poll` every `interval_s`
    until it returns a result (not None).

    A broker restart (moves resume after one) is not the end of a watch; a long outage is. So a lost connection or a
    cluster where no broker answers, wherever it happens in `poll` (its bootstrap and each broker's first ApiVersions
    and SASL handshake included: the watches make them inside `poll`), is polled again `interval_s` later, until
    nothing has answered for BROKER_DOWN_GRACE_S; then that error is the watch's one line, as it would have been the
    one-shot command's. So is an answer with a retriable error code (ClusterUnavailable: NOT_CONTROLLER while a
    controller restarts). A user error (CliError) ends the watch at once."""
    down_since: float | None = None
    while True:
        try:
            result = poll()
        except AuthenticationFailed:
            raise  # refused credentials stay refused: waiting out the grace would only delay the one line
        except (ClientError, ClusterUnavailable):
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if now - down_since > BROKER_DOWN_GRACE_S:
                raise
            time.sleep(interval_s)
            continue
        down_since = None
        if result is not None:
            return result
        time.sleep(interval_s)


def watch_progress(fetch: Callable[[], list[BrokerMoves | None]], interval_s: float,
                   out: TextIO) -> list[BrokerMoves | None]:
    """Live bars (bytes, rate, time left) until every move is finished. Without a terminal rich draws nothing
    live and prints the final bars once; the caller prints the text summary either way."""
    with LiveBars(out) as bars:

        def poll() -> list[BrokerMoves | None] | None:
            snapshots = fetch()
            moves = [(s.broker, m) for s in snapshots if s is not None for m in s.replicas]
            totals = [m.progress.denominator for _, m in moves]
            bars.bar("all", "all moves", sum(m.progress.numerator for _, m in moves),
                     None if None in totals else sum(t for t in totals if t is not None))
            for broker, m in moves:
                p = m.progress
                total = p.denominator if p.denominator is not None else (p.numerator if finished(m) else None)
                bars.bar((broker, m.replica), f"{m.replica} -> {m.future_dir} ({m.status})", p.numerator, total)
            return snapshots if all(finished(m) for _, m in moves) else None

        return poll_until_done(poll, interval_s)
