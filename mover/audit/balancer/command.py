"""`mover-audit balance`: keep every disk of one or more clusters in its broker's band, collect -> plan -> execute
again and again until stopped (the loop: mover/audit/balancer/loop.py; docs/operations.md, "The balancer").

    mover-audit balance (--fleet F [--cluster NAME]... | --bootstrap-server H:P [--cluster NAME] | --zookeeper ...)
                        --state-dir DIR [--band 5%] [--interval 300] [--max-produce-p99-ms MS]
                        [--metrics-listener http://HOST:PORT] [execute's limits, --limits FILE, --throttle B/S]

The command line parses, prints one line per event and turns SIGTERM / SIGINT into the loop's `interrupt()`; exit 0
once stopped cleanly, 130 when a stop had to cancel moves in flight.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TextIO

from mover.admin.common import format_bytes as _size
from mover.admin.limits import RunLimits, read_limits
from mover.admin.reassign.steps import Limits
from mover.admin.throttle import DEFAULT_THROTTLE
from mover.audit import planner
from mover.audit.balance import Thresholds, fraction
from mover.audit.balancer import gates
from mover.audit.balancer.canary import DEFAULT_INTERVAL_S, DEFAULT_TOPIC, DEFAULT_WINDOW_S
from mover.audit.balancer.loop import Balancer, Settings
from mover.audit.balancer.metrics import BalanceMetrics
from mover.audit.errors import AuditInputError
from mover.audit.execute import add_disk_limit_arguments, disk_limits_from_args, rate_or_none
from mover.audit.fleet import add_arguments as add_source_arguments
from mover.audit.fleet import sources_from_args
from mover.cli.arguments import float_in, positive_int, seconds_up_to
from mover.cli.common import EXIT_INTERRUPTED, EXIT_OK

DEFAULT_BAND = 0.05
DEFAULT_INTERVAL = 300.0
DEFAULT_CHECK = 10.0
_seconds = seconds_up_to(7 * 86400)


def _band(text: str) -> float:
    """`5%` or `0.05`: the band's half width as a fraction of the broker's average."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5% (or 0.05), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a band above 0% and below 100%, got {text!r}")
    return value


_milliseconds = float_in(lambda v: v > 0, "milliseconds", "milliseconds above 0")


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({e})") from None


def _listener(text: str) -> tuple[str, int]:
    rest = text[len("http://"):] if text.startswith("http://") else text
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535 or "/" in rest.rstrip("/"):
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--state-dir", type=Path, required=True, metavar="DIR",
                        help="where each cycle's snapshot and plan go (the last few are kept), and what a restart "
                             "resumes from")
    parser.add_argument("--band", type=_band, default=DEFAULT_BAND, metavar="PCT",
                        help=f"every disk within avg x (1 +- PCT) of its broker's average usage (default "
                             f"{DEFAULT_BAND * 100:g}%%)")
    parser.add_argument("--capacity-threshold", type=fraction, default=Thresholds().capacity, metavar="F",
                        help=f"no move ends with a disk above this fraction of its size (default "
                             f"{Thresholds().capacity})")
    parser.add_argument("--exclude-topics", type=_regex, metavar="REGEX", help="never move these topics' replicas")
    parser.add_argument("--max-bytes-per-broker", type=positive_int, metavar="BYTES",
                        help="a cycle moves at most this many bytes on any broker")
    parser.add_argument("--within-brokers", action="store_true",
                        help="move replicas only between the log dirs of their broker, never to another broker")
    parser.add_argument("--interval", type=_seconds, default=DEFAULT_INTERVAL, metavar="S",
                        help=f"between cycles that moved nothing (default {DEFAULT_INTERVAL:g}); a cycle that "
                             f"moved is followed by the next at once")
    parser.add_argument("--check-interval", type=_seconds, default=DEFAULT_CHECK, metavar="S",
                        help=f"how often the pause conditions are asked while moves run, and while paused "
                             f"(default {DEFAULT_CHECK:g})")
    parser.add_argument("--settle-seconds", type=_seconds, default=gates.SETTLE_S, metavar="S",
                        help=f"no move starts on a cluster for S seconds after a broker of it that was down "
                             f"answers again (default {gates.SETTLE_S:g}; Kafka 3.7.0's KAFKA-16365)")
    parser.add_argument("--max-cycles", type=positive_int, metavar="N", help="stop after N cycles (default: never)")
    canary = parser.add_argument_group("produce latency (a canary producer of the balancer's own)")
    canary.add_argument("--max-produce-p99-ms", type=_milliseconds, metavar="MS",
                        help="pause while the canary's p99 produce latency (acks=all) is above this; no canary "
                             "without it")
    canary.add_argument("--canary-topic", default=DEFAULT_TOPIC, metavar="TOPIC",
                        help=f"the canary's topic, created if missing and left in place (default {DEFAULT_TOPIC})")
    canary.add_argument("--canary-window", type=_seconds, default=DEFAULT_WINDOW_S, metavar="S",
                        help=f"the p99 is over the last S seconds (default {DEFAULT_WINDOW_S:g})")
    canary.add_argument("--canary-interval", type=_seconds, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"one produce every S seconds (default {DEFAULT_INTERVAL_S:g})")
    parser.add_argument("--metrics-listener", type=_listener, metavar="http://HOST:PORT",
                        help="serve the balance_* Prometheus metrics there")
    limits = parser.add_argument_group("moves (execute's limits)")
    add_disk_limit_arguments(limits)
    limits.add_argument("--throttle", type=rate_or_none, default=DEFAULT_THROTTLE, metavar="BYTES_PER_S",
                        help=f"log-dir move throttle set on each broker with moves while they run, -1 for none; "
                             f"each broker's own is put back after (default {DEFAULT_THROTTLE}, "
                             f"{_size(DEFAULT_THROTTLE)}/s)")
    limits.add_argument("--limits", type=Path, metavar="FILE",
                        help="JSON or TOML with any of max_moves_per_disk, max_moves_per_broker, max_moves, "
                             "disk_budgets, throttle; read at every step")
    limits.add_argument("--stall-seconds", type=_seconds, default=300.0, metavar="S",
                        help="report a move whose copy has not grown for this long (default 300)")
    limits.add_argument("--poll-interval", type=_seconds, default=1.0, metavar="S",
                        help="how often running moves are checked (default 1)")
    from mover.audit import spark

    spark.add_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> Settings:
    # The band as Cruise Control's two numbers: balance 1 + PCT with margin 1 is a half width of exactly PCT.
    thresholds = Thresholds(args.capacity_threshold, 1 + args.band, 1.0)
    limits = RunLimits(Limits(), args.throttle, disk_limits_from_args(args))
    if args.limits is not None:
        limits = read_limits(args.limits, limits)  # a bad file is refused before anything starts
    return Settings(planner.Rules(thresholds, planner.Rules().headroom, args.max_bytes_per_broker,
                                  args.exclude_topics, not args.within_brokers),
                    limits, args.state_dir, limits_path=args.limits, interval_s=args.interval,
                    check_s=args.check_interval, poll_s=args.poll_interval, stall_s=args.stall_seconds,
                    timeout=args.timeout, max_p99_ms=args.max_produce_p99_ms, canary_topic=args.canary_topic,
                    canary_interval_s=args.canary_interval, canary_window_s=args.canary_window,
                    max_cycles=args.max_cycles, settle_s=args.settle_seconds)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    settings = settings_from_args(args)
    sources = sources_from_args(args)
    metrics = BalanceMetrics()
    exporter = None
    if args.metrics_listener is not None:
        from mover.metrics.exporter import MetricsExporter

        host, port = args.metrics_listener
        exporter = MetricsExporter(metrics.registry, host, port)
        try:
            exporter.start()
        except OSError as e:
            raise AuditInputError(f"--metrics-listener {host}:{port}: {e.strerror or e}") from None
        say(f"metrics on http://{host}:{exporter.port}/metrics")

    def session():  # noqa: ANN202 (a SparkSession: pyspark is imported only when a plan is made)
        from mover.audit import spark

        return spark.from_args(args)

    balancer = Balancer(sources, settings, session, say, metrics)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        say(f"{signal.Signals(signum).name} received")
        balancer.interrupt()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    limits = settings.limits
    say(f"balancing {', '.join(s.name for s in sources)}: band +-{args.band:.1%} of each broker's average, "
        f"capacity {args.capacity_threshold:.0%}; {limits.describe(False)}"
        + (f"; pausing while produce p99 > {settings.max_p99_ms:g} ms" if settings.max_p99_ms else ""))
    try:
        cycles = balancer.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if exporter is not None:
            exporter.stop()
    if balancer.left:
        say(f"stopped after {cycles} cycle(s), {_size(balancer.moved_bytes)} moved; left behind:")
        for text in balancer.left:
            say(f"  {text}")
    else:
        say(f"stopped after {cycles} cycle(s), {_size(balancer.moved_bytes)} moved; no throttle or move of the "
            f"balancer's left")
    return EXIT_INTERRUPTED if balancer.signals >= 2 else EXIT_OK
