"""The plan's options and limits: what may move and the time estimate (`plan` and `audit --plan` take the same
options: RULE_OPTIONS, the planner's Rules from them), the plan directory's check, the drained dirs resolved against
the snapshot's log dirs, and how many replica rows each way of running the pass takes (driver, Spark, a helper)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from mover.admin.throttle import DEFAULT_THROTTLE  # the rate execute applies: the plan's time estimate uses it
from mover.audit import balance, planner
from mover.audit.errors import AuditError
from mover.audit.forecast import layout as forecast_layout
from mover.cli.arguments import float_in, positive_int


def add_rule_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The plan's own options (what may move, the time estimate); `audit --plan` takes them too."""
    parser.add_argument("--drain", action="append", default=[], type=_drain, metavar="[CLUSTER/]BROKER:DIR",
                        help="empty this log dir (repeatable); refused if its replicas cannot fit elsewhere")
    parser.add_argument("--exclude-topics", type=_regex, metavar="REGEX", help="never move these topics' replicas")
    parser.add_argument("--max-bytes-per-broker", type=positive_int, metavar="BYTES",
                        help="move at most this many bytes on any broker")
    parser.add_argument("--headroom", type=_headroom, default=planner.Rules().headroom, metavar="F",
                        help="a move must leave this fraction of its destination usable (default 0.05)")
    parser.add_argument("--throttle", type=positive_int, default=DEFAULT_THROTTLE, metavar="BYTES_PER_S",
                        help=f"per-broker move throttle for the time estimate (default {DEFAULT_THROTTLE})")
    parser.add_argument("--within-brokers", action="store_true",
                        help="move replicas only between the log dirs of their broker, never to another broker (a "
                             "broker above its cluster's band then stays there)")
    parser.add_argument("--horizon", type=forecast_layout.hours, metavar="DURATION",
                        help="plan for the disks as the forecast gives them then (e.g. 7d), from the snapshots "
                             "beside this one (within --since)")


RULE_OPTIONS = {"drain": [], "exclude_topics": None, "max_bytes_per_broker": None,
                "headroom": planner.Rules().headroom, "throttle": DEFAULT_THROTTLE, "horizon": None,
                "within_brokers": False}


def rules_from_args(args: argparse.Namespace) -> planner.Rules:
    return planner.Rules(balance.from_args(args), args.headroom, args.max_bytes_per_broker, args.exclude_topics,
                         not args.within_brokers)


def check_out(out: Path) -> None:
    """A plan directory is new or empty: checked before any Spark work."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AuditError(f"{out} exists and is not an empty directory: a plan is written once")


def _drain(text: str) -> tuple[str | None, int, str]:
    m = re.fullmatch(r"(?:(?P<cluster>[^/:]+)/)?(?P<broker>\d+):(?P<dir>/.*)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected [CLUSTER/]BROKER:/absolute/dir, got {text!r}")
    return m["cluster"], int(m["broker"]), m["dir"]


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({e})") from None


_headroom = float_in(lambda v: 0 <= v < 1, "a number between 0 and 1")


def resolve_drains(disks: pd.DataFrame, drains: list[tuple[str | None, int, str]]) -> dict[tuple[str, int], set[str]]:
    """{(cluster, broker): dirs to drain}; an unknown broker or dir, or an ambiguous broker id, is an AuditError."""
    resolved: dict[tuple[str, int], set[str]] = {}
    for cluster, broker, log_dir in drains:
        rows = disks[disks["broker"] == broker]
        if cluster is not None:
            rows = rows[rows["cluster"] == cluster]
        clusters = sorted(rows["cluster"].unique())
        name = f"{cluster + '/' if cluster else ''}{broker}:{log_dir}"
        if not clusters:
            raise AuditError(f"--drain {name}: no broker {broker}" + (f" in cluster {cluster}" if cluster else ""))
        if len(clusters) > 1:
            raise AuditError(f"--drain {name}: broker {broker} is in clusters {', '.join(clusters)}; "
                           f"say which as CLUSTER/{broker}:{log_dir}")
        if log_dir not in set(rows["log_dir"]):
            raise AuditError(f"--drain {name}: broker {broker} of {clusters[0]} has no log dir {log_dir}")
        if not rows.loc[rows["log_dir"] == log_dir, "online"].all():
            raise AuditError(f"--drain {name}: {log_dir} is offline: its replicas cannot be read to move them")
        resolved.setdefault((clusters[0], broker), set()).add(log_dir)
    return resolved


# Up to this many replica rows (counted from the Parquet footers), the planner runs in the driver's process rather
# than in Spark's Python workers: 1M rows are 24 MB of Arrow and about 250 brokers, well under a second of planning.
DRIVER_PLAN_ROWS = 1_000_000
# On a local master, up to this many replica rows, the driver reads the replicas itself (pyarrow), keys them as the
# JVM would (dir code by the dir's hash, spark_hash's partition key) and plans them in its own process: at 20M rows
# about 20 s of CPU on one core and 3.4 GB of memory, where Spark's read, hash, join, shuffle, Arrow transfer and
# Python workers took 50-60 s of CPU on both (docs/audit.md#performance, fourth round). It starts in a thread before
# the JVM does (replica_pass.prefetch). With a cluster's master, the executors read them as before.
LOCAL_SCAN_ROWS = 30_000_000
# With this many replica rows or more still to plan once the JVM is up, the driver's own pass (a local master) plans
# in two processes (task.py): with fewer, starting the second (a new interpreter importing pandas and pyarrow,
# about a second of CPU) costs more than it saves.
HELPER_ROWS = 4_000_000
