"""--progress [--request N] [--watch]: KIP-179's per-replica Progress (numerator, nullable denominator, error).

From our DescribeReplicaMoves (api key 32100) when the broker offers it. A broker that does not (a real Kafka: not
in its ApiVersions, and it hangs up if asked anyway) is asked DescribeLogDirs instead, and each future replica's
size is compared with its current copy's: no request ids, no errors, but a fair fraction.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
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

from mover.admin.client import AuthenticationFailed, Client, ClientError, ConnectionClosed, UnsupportedApi
from mover.admin.common import ClusterUnavailable, TopicPartitionReplica, error_name, some
from mover.admin.reassign.progress import Progress, ReplicaStatus, moving_replicas
from mover.cli.common import EXIT_ERROR, EXIT_IN_PROGRESS, EXIT_OK, CliError
from mover.cli.describe import select_brokers
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_REPLICA_MOVES
from mover.wire.messages.log_dirs import LATEST_REQUEST_ID

T = TypeVar("T")

FINISHED_STATES = frozenset({"completed", "cancelled", "failed"})
DEFAULT_INTERVAL_S = 1.0
# How long --watch keeps polling a broker that does not answer before it gives up (poll_until_done).
BROKER_DOWN_GRACE_S = 60.0


def finished(m: ReplicaStatus) -> bool:
    return m.status in FINISHED_STATES


def move_line(m: ReplicaStatus) -> str:
    """One move: `Replica t-0-1: /d1 -> /d2, copying, 10 of 40 bytes (25.0%)` (its source and destination dirs, the
    move's state, KIP-179's Progress; an error as its code's name and message)."""
    error = m.progress.error
    text = None if error is None else (f"{error_name(error.code)}: {error.message}" if error.message
                                       else error_name(error.code))
    state = f"{m.status} ({text})" if text else m.status
    return f"Replica {m.replica}: {m.log_dir} -> {m.future_dir}, {state}, {m.progress.amount()}"


@dataclass
class RequestProgress:
    broker: int
    request_id: int | None  # None: the broker has no request ids (DescribeLogDirs fallback)
    start_ms: int
    end_ms: int
    replicas: list[ReplicaStatus]  # status: the move's state; log_dir -> future_dir: its source -> destination

    def header(self) -> str:
        if self.request_id is None:
            return f"Replicas being moved on broker {self.broker} (from DescribeLogDirs; no request ids):"
        started = _utc(self.start_ms)
        ended = f"finished {_utc(self.end_ms)}" if self.end_ms >= 0 else "running"
        return f"Request {self.request_id} on broker {self.broker}: started {started}, {ended}"


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class ProgressSource:
    """Fetches the progress of one broker's moves, choosing the API once."""

    def __init__(self, client: Client, broker: int, request_id: int | None, warn: TextIO) -> None:
        self.client = client
        self.broker = broker
        self.requested = request_id  # what the user asked for (--request)
        self.request_id = request_id  # what is followed: --request, or the latest request once seen
        conn = client.connection(broker)
        self.native = conn.supports(DESCRIBE_REPLICA_MOVES)
        self.warn = warn
        if not self.native:
            self._fall_back()
        self._seen: dict[TopicPartitionReplica, ReplicaStatus] = {}

    def _fall_back(self) -> None:
        self.native = False
        if self.requested is not None:
            raise CliError(f"broker {self.broker} does not support DescribeReplicaMoves (api key "
                           f"{DESCRIBE_REPLICA_MOVES.key}), so it keeps no request ids: --request needs a mover broker")
        print(f"note: broker {self.broker} does not support DescribeReplicaMoves (api key "
              f"{DESCRIBE_REPLICA_MOVES.key}); estimating progress from DescribeLogDirs", file=self.warn)

    def fetch(self) -> RequestProgress | None:
        """None: the broker has no move request at all."""
        if self.native:
            for attempt in range(2):
                try:
                    return self._fetch_native()
                except (UnsupportedApi, ConnectionClosed):
                    # A hang-up is how Kafka answers an API it does not know, but also what a restart looks like:
                    # ask again on a fresh connection (client.connection reconnects) if the broker still offers it.
                    if attempt == 1 or not self.client.connection(self.broker).supports(DESCRIBE_REPLICA_MOVES):
                        break
            self._fall_back()
        return self._fetch_fallback()

    def _fetch_native(self) -> RequestProgress | None:
        wanted = LATEST_REQUEST_ID if self.request_id is None else self.request_id
        reply = self.client.connection(self.broker).call(DESCRIBE_REPLICA_MOVES, {"request_id": wanted})
        code = reply["error_code"]
        if code != ErrorCode.NONE:
            if self.request_id is not None:
                raise CliError(f"Request id {self.request_id} is not known to broker {self.broker} "
                               f"({error_name(code)})")
            raise CliError(f"broker {self.broker} answered DescribeReplicaMoves with {error_name(code)}")
        requests = reply["requests"]
        if self.request_id is not None:
            requests = [r for r in requests if r["request_id"] == self.request_id]
            if not requests:
                raise CliError(f"Request id {self.request_id} is not known to broker {self.broker}")
        if not requests:
            return None
        req = max(requests, key=lambda r: r["request_id"])
        # Later polls must follow this request even if another one starts meanwhile.
        self.request_id = req["request_id"]
        return RequestProgress(self.broker, req["request_id"], req["start_ms"], req["end_ms"], [
            _move(self.broker, r) for r in req["replicas"]])

    def _fetch_fallback(self) -> RequestProgress | None:
        copying, where = moving_replicas(self.client, self.broker)
        now = {m.replica: m for m in copying}
        # A future copy that vanished was swapped in (the replica is now in its destination) or dropped.
        for replica, before in self._seen.items():
            if replica not in now and not finished(before):
                info = where.get(replica)
                landed = info is not None and info.current == before.future_dir
                total = before.progress.denominator if before.progress.denominator is not None \
                    else before.progress.numerator
                now[replica] = replace(before, status="completed" if landed else "cancelled", progress=Progress(
                    total if landed else before.progress.numerator, before.progress.denominator, complete=landed))
            elif replica not in now:
                now[replica] = before
        self._seen = now
        if not now:
            return None
        return RequestProgress(self.broker, None, 0, -1, list(now.values()))


def _move(broker: int, r: dict[str, Any]) -> ReplicaStatus:
    """One replica of a DescribeReplicaMoves answer (the wire's -1 or 0 total: unknown)."""
    progress = Progress(r["bytes_copied"], r["bytes_total"], complete=r["state"] == "completed")
    if r["error_code"] != ErrorCode.NONE:
        progress.fail(r["error_code"], r["error_message"])
    return ReplicaStatus(r["topic"], r["partition"], broker, r["state"], log_dir=r["source_dir"],
                         future_dir=r["destination_dir"], progress=progress)


def exit_code(snapshots: list[RequestProgress]) -> int:
    moves = [m for s in snapshots for m in s.replicas]
    if any(m.status == "failed" for m in moves):
        return EXIT_ERROR
    return EXIT_OK if all(finished(m) for m in moves) else EXIT_IN_PROGRESS


def print_snapshots(snapshots: list[RequestProgress | None], brokers: list[int], out: TextIO) -> None:
    for broker, snap in zip(brokers, snapshots, strict=True):
        if snap is None:
            print(f"No replica moves on broker {broker}", file=out)
            continue
        print(snap.header(), file=out)
        for m in snap.replicas:
            print(move_line(m), file=out)


class FollowedSources:
    """The ProgressSources of the brokers followed, opened one broker at a time and kept once open: a watch that
    retries after a lost connection resumes where it stopped, so no broker's fallback note is printed twice."""

    def __init__(self, request_id: int | None, err: TextIO) -> None:
        self.request_id = request_id
        self.err = err
        self.sources: list[ProgressSource] | None = None  # set once every broker's is open (and filtered)
        self._opened: dict[int, ProgressSource] = {}

    def open(self, client: Client, brokers: list[int]) -> list[ProgressSource]:
        if self.sources is not None:
            return self.sources
        for b in brokers:
            if b not in self._opened:
                self._opened[b] = ProgressSource(client, b, self.request_id, self.err)
        sources = [self._opened[b] for b in brokers]
        if self.request_id is not None:
            # A request id belongs to one broker's sequence; keep the brokers that know it.
            known = []
            for s in sources:
                try:
                    s.fetch()
                    known.append(s)
                except CliError:
                    if len(sources) == 1:
                        raise
            if not known:
                raise CliError(f"Request id {self.request_id} is not known to brokers {some(brokers, ',')}")
            sources = known
        self.sources = sources
        return sources


def progress(client: Client, brokers: list[int], request_id: int | None, out: TextIO,
             err: TextIO = sys.stderr) -> int:
    """--progress without --watch: one look; a broker that cannot be reached ends it (one line, exit 1)."""
    sources = FollowedSources(request_id, err).open(client, brokers)
    snapshots = [s.fetch() for s in sources]
    print_snapshots(snapshots, [s.broker for s in sources], out)
    return exit_code([s for s in snapshots if s is not None])


def watch(connect: Callable[[], Client], broker_list: list[int] | None, request_id: int | None, interval_s: float,
          out: TextIO, err: TextIO = sys.stderr) -> int:
    """--progress --watch. Bootstrapping (`connect`) and opening each broker's connection (ApiVersions, SASL) are
    part of the first fetch watch_progress makes, so a connection lost in a handshake is retried by the watches' one
    loop (poll_until_done), as one lost later is: a restart may land on a handshake as well as on a poll."""
    client: Client | None = None
    followed = FollowedSources(request_id, err)

    def fetch() -> list[RequestProgress | None]:
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


def watch_progress(fetch: Callable[[], list[RequestProgress | None]], interval_s: float,
                   out: TextIO) -> list[RequestProgress | None]:
    """Live bars (bytes, rate, time left) until every move is finished. Without a terminal rich draws nothing
    live and prints the final bars once; the caller prints the text summary either way."""
    with LiveBars(out) as bars:

        def poll() -> list[RequestProgress | None] | None:
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
