"""plan: log-dir moves for every broker of a snapshot that needs them, computed per broker in parallel on Spark.

The snapshot is read once (scan). Every replica becomes three longs in the JVM (dir code, size with flags,
partition key: see DIR_BITS), is hash-partitioned by broker and handed to Python as Arrow (mapInArrow). Each task
groups its rows by broker and dir with one numpy sort, sums each disk's bytes (and the audit's sums, so `audit --plan`
reads the replicas once: audit_usage), and runs the planner's array core (mover/audit/planner.py) once per broker;
the dirs (one row each) travel in the function's closure, not through the shuffle. The moves' partitions are then
named by a join with the partitions dataset, which also gives Kafka's reassignment JSON.

This module is `mover-audit plan`'s command line and the library's entry points (what `audit`, the demo and the
benches call); the work is in its modules, each a job:

    options.py       the plan's options (--drain, --exclude-topics, ...), the planner's Rules from them, the drained
                     dirs resolved, and the limits that pick where the pass runs (DRIVER_PLAN_ROWS, LOCAL_SCAN_ROWS,
                     HELPER_ROWS)
    encoding.py      the planner's inputs as arrays: the listed dirs numbered, every replica as three longs (by
                     Spark's JVM, or by the driver with pyarrow and spark_hash)
    steps.py         one step of brokers planned (planner.plan_arrays on its BrokerDirs and BrokerReplicas) and the
                     task's output rows (TaskRows, UDF_SCHEMA)
    task.py          the planner's task: rows sorted by dir and grouped into steps, planned here or, in the driver,
                     some of them by a spawned helper process
    replica_pass.py  the one pass over the replicas (scan, prefetch's thread, audit_usage)
    outputs.py       the plan from its pass (finish: PlanResult), the summary and the files written to PLANDIR
    between.py       the moves between brokers of a cluster whose broker is above the cluster's band (after the pass)
    horizon.py       plan --horizon: each partition's growth by then, from the forecast's fits
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from mover.admin.throttle import DEFAULT_THROTTLE
from mover.audit import balance, partitions, planner, snapshot, spark
from mover.audit.errors import AuditInputError
from mover.audit.forecast import layout as forecast_layout
from mover.audit.plan import horizon, options
from mover.audit.plan.options import RULE_OPTIONS, add_rule_arguments, check_out, rules_from_args
from mover.audit.plan.outputs import PlanResult, finish, print_summary, summary, write
from mover.audit.plan.replica_pass import PlanPass, audit_usage, driver_usage, prefetch, scan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_THROTTLE", "RULE_OPTIONS", "PlanPass", "PlanResult", "add_arguments", "add_rule_arguments",
           "audit_usage", "check_out", "compute", "driver_usage", "finish", "prefetch", "print_summary",
           "rules_from_args", "run", "scan", "summary", "write"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot", required=True, metavar="DIR")
    parser.add_argument("--out", required=True, metavar="PLANDIR", help="a new or empty directory for the plan")
    parser.add_argument("--since", type=forecast_layout.hours, metavar="DURATION",
                        help="with --horizon: forecast from the snapshots of this last stretch only (default: all)")
    add_rule_arguments(parser)
    balance.add_arguments(parser)
    spark.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.since is not None and args.horizon is None:
        raise AuditInputError("--since is the window of --horizon's forecast: give --horizon DURATION too")
    path, _ = snapshot.resolve(args.snapshot, None)
    out = Path(args.out)
    check_out(out)
    rules = rules_from_args(args)
    partitions.prefetch(path, listed=False)
    if spark.local_master(args) and args.horizon is None:
        prefetch(path, rules, args.drain)
    # A snapshot the driver reads itself needs no Spark job: the JVM starts only if a step asks for it (a horizon's
    # forecast always does).
    session = spark.from_args(args, defer=args.horizon is None and snapshot.driver_readable(
        path, options.LOCAL_SCAN_ROWS, partitions.LOCAL_ROWS))
    grows = horizon.growth(session, path, args.since, args.horizon) if args.horizon is not None else None
    result = compute(session, snapshot.read(session, path), rules, args.drain, grows)
    spark.release()
    write(result, out, args.throttle)
    print_summary(result, out, args.throttle)
    return 0


def compute(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
            drains: list[tuple[str | None, int, str]] | None = None,
            growth: horizon.Growth | None = None) -> PlanResult:
    return finish(session, snap, rules, scan(session, snap, rules, drains, growth=growth))
