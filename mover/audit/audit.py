"""audit: the balance of every disk of a snapshot, offline dirs, stuck moves and partitions held twice.

Spark reduces the replicas to one row per disk (a hash aggregation: 20 million rows become 40,000); everything after
that is small and computed with pandas on the driver (mover/audit/balance.py). Stuck moves compare the future copies
of two snapshots; partitions held in two dirs of one broker need one grouping of the replicas by partition.

Outputs in --out (default `<snapshot>-audit`, next to the snapshot): `disks.parquet`, `brokers.parquet`,
`clusters.parquet`, `offline.parquet`, `cordoned.parquet`, `stuck.parquet`, `duplicates.parquet` and `findings.json`
(the summary, the thresholds, the worst brokers). The layout is in docs/audit.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.admin.common import format_bytes
from mover.audit import balance, partitions, planner, snapshot, spark
from mover.audit.errors import AuditError, AuditInputError, make_dir
from mover.audit.forecast import layout as forecast_layout

FAIL_KINDS = ("imbalance", "capacity", "offline", "stuck", "duplicate")
FULL_WITHIN = "full-within"  # --fail-on full-within=72h: a disk the forecast fills within 72 hours
WORST_SHOWN = 10
FULL_NAMED = 10  # disks named in the --fail-on full-within line (all of them are in forecast.parquet)
# findings.json lists at most this many of each kind (the Parquet files hold all of them).
JSON_LIMIT = 1000


@dataclass
class AuditResult:
    snapshot: Path
    previous: Path | None
    thresholds: balance.Thresholds
    disks: pd.DataFrame
    brokers: pd.DataFrame
    clusters: pd.DataFrame
    offline: pd.DataFrame
    stuck: pd.DataFrame | None  # None without an earlier snapshot
    duplicates: pd.DataFrame | None  # None when not checked
    # KIP-1066: cordoned dirs (DescribeLogDirs v5) and what is still on them (docs/cordons.md).
    cordoned: pd.DataFrame | None = None

    def counts(self) -> dict[str, int | None]:
        return {
            "imbalance": int((self.brokers["disks_out_of_band"] > 0).sum()),
            "capacity": int(self.disks["over_capacity"].sum()),
            "offline": len(self.offline),
            "stuck": None if self.stuck is None else len(self.stuck),
            "duplicate": None if self.duplicates is None else len(self.duplicates),
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", metavar="DIR", help="the snapshot to audit")
    source.add_argument("--snapshots", metavar="ROOT",
                        help="audit the latest snapshot under ROOT; the one before it finds stuck moves")
    parser.add_argument("--previous", metavar="DIR", help="an earlier snapshot to find stuck moves against")
    parser.add_argument("--out", metavar="DIR", help="where the findings go (default: <snapshot>-audit)")
    parser.add_argument("--fail-on", type=_kinds, default=(), metavar="KINDS",
                        help=f"exit 3 if any of these is found: {','.join(FAIL_KINDS)}, {FULL_WITHIN}=DURATION "
                             "(a disk the forecast fills within it, e.g. full-within=72h)")
    parser.add_argument("--skip-duplicates", action="store_true",
                        help="do not look for partitions held in two dirs of a broker (saves one shuffle)")
    then = parser.add_argument_group(
        "plan and report in the same run (one Spark session: faster than the commands one after another)")
    then.add_argument("--plan", metavar="PLANDIR",
                      help="also plan the moves, as `mover-audit plan` does, into this new or empty directory")
    then.add_argument("--report", metavar="FILE", help="also write the HTML report (with the plan, if planned)")
    then.add_argument("--forecast", action="store_true",
                      help="also forecast every disk's time to 90%% and to full from the snapshots before this one "
                           "(as `mover-audit forecast`, into the same --out)")
    from mover.audit import forecast

    forecast.add_window_argument(then)
    from mover.audit import plan

    plan.add_rule_arguments(then)
    balance.add_arguments(parser)
    spark.add_arguments(parser)


def _kinds(text: str) -> tuple[str, ...]:
    from mover.audit.forecast import layout as forecast_layout

    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    for kind in kinds:
        if kind.startswith(FULL_WITHIN + "="):
            forecast_layout.hours(kind.partition("=")[2])  # a bad duration is a usage error naming it
    unknown = [k for k in kinds if k not in FAIL_KINDS and not k.startswith(FULL_WITHIN + "=")]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(FAIL_KINDS)}, got {text!r}")
    return kinds


def run(args: argparse.Namespace) -> int:
    from mover.audit import plan

    plan_dir = Path(args.plan) if args.plan else None
    if plan_dir is None:
        given = [k for k, default in plan.RULE_OPTIONS.items() if getattr(args, k) != default]
        if given:
            raise AuditInputError(f"--{given[0].replace('_', '-')} is an option of the plan: give --plan PLANDIR too")
    path, earlier = snapshot.resolve(args.snapshot, args.snapshots)
    previous = Path(args.previous) if args.previous else (earlier[-1] if earlier else None)
    if previous is not None and not previous.is_dir():
        raise AuditError(f"snapshot {previous}: no such directory")
    thresholds = balance.from_args(args)
    out = Path(args.out) if args.out else path.with_name(path.name + "-audit")
    if plan_dir is not None:
        plan.check_out(plan_dir)
    if plan_dir is not None or not args.skip_duplicates:
        partitions.prefetch(path, listed=not args.skip_duplicates)
    rules = plan.rules_from_args(args) if plan_dir is not None else None
    # The plan's pass (or, for the audit alone, its sums) of a snapshot the driver reads itself starts now.
    if spark.local_master(args) and (rules is None or args.horizon is None):
        plan.prefetch(path, *((rules, args.drain) if rules is not None else (planner.Rules(), [], False)))
    if args.report:
        from mover.audit import report

        report.prefetch()
    session = spark.from_args(args, defer=_driver_only(path, previous, args))
    snap = snapshot.read(session, path)
    prev = snapshot.read(session, previous) if previous is not None else None
    shared: plan.PlanPass | None = None
    growth = None
    if rules is not None:
        # One read of the replicas for both: the plan's pass also sums each dir as the audit does.
        try:
            growth = (plan.horizon.growth(session, path, args.since, args.horizon) if args.horizon is not None
                      else None)
            shared = plan.scan(session, snap, rules, args.drain, growth=growth)
        except AuditError:
            shared = None  # a bad --drain: the audit is still written, then the plan says what is wrong
    usage = plan.audit_usage(shared) if shared is not None else plan.driver_usage(session, snap)
    result = compute(snap, prev, thresholds, duplicates=not args.skip_duplicates, usage=usage)
    planned: plan.PlanResult | None = None
    refused: AuditError | None = None
    if rules is not None:
        try:
            planned = (plan.finish(session, snap, rules, shared) if shared is not None
                       else plan.compute(session, snap, rules, args.drain, growth))
        except AuditError as e:
            refused = e  # said once the audit is written
    limits = [forecast_layout.hours(k.partition("=")[2]) for k in args.fail_on if k.startswith(FULL_WITHIN + "=")]
    foreseen = None
    if args.forecast or limits:
        from mover.audit import forecast

        foreseen = forecast.compute(session, forecast.window(path, args.since), args.since)
    # Spark's work is done: the session stops in a thread while the outputs are written and the report rendered.
    spark.release()
    write(result, out)
    print_summary(result, out)
    if foreseen is not None:
        forecast.write(foreseen, out)
        forecast.print_summary(foreseen, None)
    if refused is not None:
        raise refused
    if planned is not None and plan_dir is not None:
        plan.write(planned, plan_dir, args.throttle)
        plan.print_summary(planned, plan_dir, args.throttle)
    if args.report:
        from mover.audit import report

        report.write_page(report.render(out, plan_dir), Path(args.report))
    found = result.counts()
    failing = [f"{k} ({found[k]})" for k in args.fail_on if found.get(k)]
    if foreseen is not None:
        for kind, limit in zip([k for k in args.fail_on if k.startswith(FULL_WITHIN + "=")], limits, strict=True):
            filling = forecast_layout.within(foreseen.disks, limit)
            if len(filling):
                named = ", ".join(f"{r.cluster} broker {r.broker} {r.log_dir} in "
                                  f"{forecast_layout.say_hours(r.hours_to_full)}"
                                  for r in filling.head(FULL_NAMED).itertuples())
                more = f" and {len(filling) - FULL_NAMED} more" if len(filling) > FULL_NAMED else ""
                failing.append(f"{kind} ({len(filling)}: {named}{more})")
    if failing:
        print(f"mover-audit: found {', '.join(failing)}", file=sys.stderr)
        from mover.cli.common import EXIT_FINDINGS
        return EXIT_FINDINGS
    return 0


def _driver_only(path: Path, previous: Path | None, args: argparse.Namespace) -> bool:
    """Whether the driver can do every step itself (a local master then starts no JVM unless a step asks for one,
    spark.Deferred): it reads the snapshot (snapshot.driver_readable), the stuck moves' futures of both snapshots
    (DRIVER_ROWS), and the forecast if asked for (forecast_driver.fits). Else Spark's JVM starts at once, beside the
    driver's reads."""
    from mover.audit import forecast
    from mover.audit.forecast import driver as forecast_driver
    from mover.audit.plan import options

    if (args.forecast or any(k.startswith(FULL_WITHIN + "=") for k in args.fail_on)) and not forecast_driver.fits(
            forecast.window(path, args.since)):
        return False
    if not snapshot.driver_readable(path, options.LOCAL_SCAN_ROWS, partitions.LOCAL_ROWS):
        return False
    return previous is None or (snapshot.driver_readable(path, DRIVER_ROWS, partitions.LOCAL_ROWS)
                                and snapshot.driver_readable(previous, DRIVER_ROWS, partitions.LOCAL_ROWS))


def _partition_hash() -> Any:
    from pyspark.sql import functions as F

    return F.xxhash64(F.col("topic"), F.col("partition")).bitwiseAND(F.lit(partitions.HASH_MASK))


def disk_usage(snap: snapshot.Snapshot) -> pd.DataFrame:
    """One row per log dir (every dir of log_dirs, and any dir only replicas name): its columns plus used_bytes,
    replica counts, the bytes of future copies and the hash sum of its current copies' partitions."""
    from pyspark.sql import functions as F

    keys = ["cluster", "broker", "log_dir"]
    replicas = snap.replicas  # first: a deferred session (spark.Deferred) starts here, before any column is built
    current = ~F.col("is_future")
    used = (replicas.groupBy(*keys).agg(
        F.sum("size_bytes").alias("used_bytes"),
        F.sum(F.when(current, 1).otherwise(0)).alias("replicas"),
        F.sum(F.when(F.col("is_future"), 1).otherwise(0)).alias("future_replicas"),
        F.sum(F.when(F.col("is_future"), F.col("size_bytes")).otherwise(0)).alias("future_bytes"),
        F.sum(F.when(current, _partition_hash()).otherwise(0)).alias("partition_hash")))
    dirs = snap.log_dirs.select(*keys, "error", "total_bytes", "usable_bytes", "is_cordoned")
    frame = dirs.join(used, keys, "full").toPandas()
    for column in ("used_bytes", "replicas", "future_replicas", "future_bytes", "partition_hash"):
        frame[column] = frame[column].fillna(0).astype("int64")
    frame["broker"] = frame["broker"].astype("int64")
    return frame.sort_values(keys, kind="mergesort").reset_index(drop=True)


# Up to this many replica rows (by the footers), the steps that need a few replicas with their names (stuck moves,
# the brokers the duplicate check suspects) read the replicas on the driver instead of in a Spark job: each such job
# is a new kind of query for a fresh JVM, seconds on a small snapshot (docs/audit.md#performance).
DRIVER_ROWS = 1_000_000
_FUTURE_COLUMNS = ["cluster", "broker", "log_dir", "topic", "partition", "size_bytes", "offset_lag", "collected_at"]


def _futures(snap: snapshot.Snapshot) -> pd.DataFrame:
    from pyspark.sql import functions as F

    small = snapshot.read_small(snap, "replicas", [*_FUTURE_COLUMNS, "is_future"], DRIVER_ROWS)
    if small is not None:
        return small[small["is_future"].eq(True)][_FUTURE_COLUMNS].reset_index(drop=True)
    return snap.replicas.where(F.col("is_future")).select(*_FUTURE_COLUMNS).toPandas()


def stuck_moves(current: snapshot.Snapshot, previous: snapshot.Snapshot) -> pd.DataFrame:
    """Future copies present in both snapshots, in the same dir, that copied nothing and caught up nothing in
    between: moves that are not progressing (Kafka's KAFKA-9087 family: a future replica that never finishes)."""
    keys = ["cluster", "broker", "log_dir", "topic", "partition"]
    now, before = _futures(current), _futures(previous)
    both = now.merge(before, on=keys, suffixes=("", "_before"))
    stuck = both[(both["size_bytes"] <= both["size_bytes_before"]) & (both["offset_lag"] >= both["offset_lag_before"])]
    stuck = stuck.rename(columns={"collected_at_before": "since"})
    return stuck[[*keys, "size_bytes", "offset_lag", "since"]].reset_index(drop=True)


def listed_per_broker(snap: snapshot.Snapshot) -> pd.DataFrame:
    """(cluster, broker, listed, listed_hash): the partitions Metadata gives each broker, counted and their hashes
    summed; on the driver when the partitions dataset allows it (mover/audit/partitions.py), else by Spark."""
    from pyspark.sql import functions as F

    local = partitions.local(snap)
    if local is not None:
        return local.listed_per_broker()
    # The hash once per partition, before the explode multiplies the rows by the replication factor.
    return (snap.partitions.select("cluster", _partition_hash().alias("h"), F.explode("replicas").alias("broker"))
            .groupBy("cluster", "broker").agg(F.count(F.lit(1)).alias("listed"), F.sum("h").alias("listed_hash"))
            .toPandas().astype({"broker": "int64"}))


def duplicate_partitions(snap: snapshot.Snapshot, disks: pd.DataFrame) -> pd.DataFrame:
    """Partitions with a current (not future) copy in more than one dir of the same broker.

    Grouping 20 million replicas by partition is a full shuffle; instead, each broker's count and hash sum of its
    current copies (from disk_usage's pass) is compared with those of the partitions Metadata gives it (one
    aggregation whose shuffle is a row per broker). Only the brokers where they differ (a copy twice, a copy
    missing behind an offline dir, a stray copy) are grouped by partition."""
    from pyspark.sql import functions as F

    keys = ["cluster", "broker"]
    held = disks.groupby(keys, as_index=False)[["replicas", "partition_hash"]].sum()
    listed = listed_per_broker(snap)
    both = held.merge(listed, on=keys, how="outer")
    differ = both[(both["replicas"].fillna(0) != both["listed"].fillna(0))
                  | (both["partition_hash"].fillna(0) != both["listed_hash"].fillna(0))]
    empty = pd.DataFrame({"cluster": pd.Series(dtype=object), "broker": pd.Series(dtype="int64"),
                          "topic": pd.Series(dtype=object), "partition": pd.Series(dtype="int64"),
                          "copies": pd.Series(dtype="int64"), "log_dirs": pd.Series(dtype=object)})
    if differ.empty:
        return empty
    small = snapshot.read_small(snap, "replicas", ["cluster", "broker", "log_dir", "topic", "partition", "is_future"],
                                DRIVER_ROWS)
    if small is not None:
        held = small[small["is_future"].eq(False)].merge(differ[keys].astype({"broker": "int32"}), on=keys)
        g = held.groupby(["cluster", "broker", "topic", "partition"], sort=False, dropna=False)["log_dir"]
        found = g.agg(copies="size", log_dirs=lambda s: np.array(sorted(s), dtype=object)).reset_index()
        found = found[found["copies"] > 1].astype({"copies": "int64"}).reset_index(drop=True)
        return found if len(found) else empty
    suspects = snap.replicas.sparkSession.createDataFrame(differ[keys].astype({"broker": "int32"}))
    found = (snap.replicas.join(F.broadcast(suspects), keys).where(~F.col("is_future"))
             .groupBy("cluster", "broker", "topic", "partition")
             .agg(F.count(F.lit(1)).alias("copies"), F.sort_array(F.collect_list("log_dir")).alias("log_dirs"))
             .where(F.col("copies") > 1)
             .toPandas())
    return found if len(found) else empty


def compute(snap: snapshot.Snapshot, previous: snapshot.Snapshot | None, thresholds: balance.Thresholds,
            duplicates: bool = True, usage: pd.DataFrame | None = None) -> AuditResult:
    """`usage`: disk_usage's frame when already computed (plan.audit_usage: `audit --plan` reads the replicas once)."""
    usage = disk_usage(snap) if usage is None else usage
    disks = balance.assess_disks(usage, thresholds)
    brokers = balance.assess_brokers(disks)
    offline = disks.loc[~disks["online"], ["cluster", "broker", "log_dir", "error"]].reset_index(drop=True)
    stuck = stuck_moves(snap, previous) if previous is not None else None
    dups = duplicate_partitions(snap, usage) if duplicates else None
    clusters = summarize_clusters(disks, brokers, stuck, dups)
    return AuditResult(snap.path, previous.path if previous else None, thresholds, disks, brokers, clusters,
                       offline, stuck, dups, cordoned_dirs(usage))


def cordoned_dirs(usage: pd.DataFrame) -> pd.DataFrame:
    """The cordoned dirs and the bytes and replicas still on them (what a drain has left to move)."""
    flag = usage["is_cordoned"].astype("boolean").fillna(False).astype(bool)
    columns = ["cluster", "broker", "log_dir", "error", "used_bytes", "replicas", "future_bytes"]
    return usage.loc[flag, columns].reset_index(drop=True)


def summarize_clusters(disks: pd.DataFrame, brokers: pd.DataFrame, stuck: pd.DataFrame | None,
                       dups: pd.DataFrame | None) -> pd.DataFrame:
    g = brokers.groupby("cluster")
    c = pd.DataFrame({
        "brokers": g.size(),
        "disks": g["disks"].sum(),
        "disks_offline": g["disks_offline"].sum(),
        "brokers_out_of_band": g["disks_out_of_band"].apply(lambda s: int((s > 0).sum())),
        "disks_out_of_band": g["disks_out_of_band"].sum(),
        "disks_over_capacity": g["disks_over_capacity"].sum(),
        "brokers_capacity_unknown": g["basis"].apply(lambda s: int((s == balance.BASIS_BYTES).sum())),
        "used_bytes": g["used_bytes"].sum(),
        "total_bytes": g["total_bytes"].sum(min_count=1),
        "max_mean_ratio_worst": g["max_mean_ratio"].max(),
        "max_mean_ratio_median": g["max_mean_ratio"].median(),
    })
    c["stuck_moves"] = stuck.groupby("cluster").size() if stuck is not None else np.nan
    c["duplicate_partitions"] = dups.groupby("cluster").size() if dups is not None else np.nan
    if stuck is not None:
        c["stuck_moves"] = c["stuck_moves"].fillna(0).astype("int64")
    if dups is not None:
        c["duplicate_partitions"] = c["duplicate_partitions"].fillna(0).astype("int64")
    c = c.reset_index()
    # Worst first, the order of brokers: data at risk, then offline, then imbalance.
    return c.sort_values(["disks_over_capacity", "disks_offline", "brokers_out_of_band", "max_mean_ratio_worst"],
                         ascending=False, kind="mergesort").reset_index(drop=True)


def _json_value(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.ndarray):
        return [_json_value(v) for v in value.tolist()]
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if value is pd.NaT or value is None:
        return None
    return value


def records(frame: pd.DataFrame | None, limit: int = JSON_LIMIT) -> list[dict[str, Any]]:
    if frame is None:
        return []
    return [{k: _json_value(v) for k, v in row.items()} for row in frame.head(limit).to_dict("records")]


def findings(result: AuditResult) -> dict[str, Any]:
    b, d = result.brokers, result.disks
    counts = result.counts()
    return {
        "snapshot": str(result.snapshot),
        "previous": str(result.previous) if result.previous else None,
        "thresholds": asdict(result.thresholds),
        "fleet": {
            "clusters": len(result.clusters),
            "brokers": len(b),
            "disks": len(d),
            "disks_offline": counts["offline"],
            "brokers_out_of_band": counts["imbalance"],
            "disks_out_of_band": int(d["out_of_band"].sum()),
            "disks_over_capacity": counts["capacity"],
            "brokers_capacity_unknown": int((b["basis"] == balance.BASIS_BYTES).sum()),
            "stuck_moves": counts["stuck"],
            "duplicate_partitions": counts["duplicate"],
            "moves_in_progress": int(d["future_replicas"].sum()),
            "cordoned_dirs": 0 if result.cordoned is None else len(result.cordoned),
            "cordoned_bytes": 0 if result.cordoned is None else int(result.cordoned["used_bytes"].sum()),
            "used_bytes": int(d["used_bytes"].sum()),
            "total_bytes": _json_value(d.loc[d["online"], "total_bytes"].sum(min_count=1)),
        },
        "clusters": records(result.clusters),
        "worst_brokers": records(b, 50),
        "offline_dirs": records(result.offline),
        "cordoned_dirs": records(result.cordoned),
        "stuck_moves": records(result.stuck),
        "duplicate_partitions": records(result.duplicates),
    }


def write(result: AuditResult, out: Path) -> None:
    make_dir(out)
    result.disks.to_parquet(out / "disks.parquet", index=False)
    result.brokers.to_parquet(out / "brokers.parquet", index=False)
    result.clusters.to_parquet(out / "clusters.parquet", index=False)
    result.offline.to_parquet(out / "offline.parquet", index=False)
    if result.cordoned is not None:
        result.cordoned.to_parquet(out / "cordoned.parquet", index=False)
    if result.stuck is not None:
        result.stuck.to_parquet(out / "stuck.parquet", index=False)
    if result.duplicates is not None:
        result.duplicates.to_parquet(out / "duplicates.parquet", index=False)
    tmp = out / "findings.json.tmp"
    tmp.write_text(json.dumps(findings(result), indent=1) + "\n")
    tmp.replace(out / "findings.json")  # readers (report, alerting) see the old file or the whole new one


def print_summary(result: AuditResult, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    # Without a terminal (cron, CI, a pipe) rich would wrap at 80 columns; the table needs more.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    f = findings(result)["fleet"]
    t = result.thresholds
    console.print(f"[bold]Audit of {result.snapshot}[/bold]: {f['clusters']} clusters, {f['brokers']} brokers, "
                  f"{f['disks']} disks, {format_bytes(f['used_bytes'])} used of {format_bytes(f['total_bytes'])}")
    console.print(f"band: broker average x (1 +- {t.half_width:.3f}), capacity threshold {t.capacity:.0%}")
    stuck = "no earlier snapshot" if f["stuck_moves"] is None else f["stuck_moves"]
    dups = "not checked" if f["duplicate_partitions"] is None else f["duplicate_partitions"]
    console.print(f"brokers out of band: {f['brokers_out_of_band']} ({f['disks_out_of_band']} disks)   "
                  f"disks over capacity: {f['disks_over_capacity']}   offline dirs: {f['disks_offline']}   "
                  f"moves in progress: {f['moves_in_progress']}   stuck: {stuck}   partitions in two dirs: {dups}"
                  + (f"   capacity unknown: {f['brokers_capacity_unknown']} brokers"
                     if f["brokers_capacity_unknown"] else "")
                  + (f"   cordoned dirs: {f['cordoned_dirs']} ({format_bytes(f['cordoned_bytes'])} still on them)"
                     if f["cordoned_dirs"] else ""))
    table = Table(title="Worst brokers", title_justify="left")
    for column in ("cluster", "broker", "disks", "max/mean", "std %", "out of band", "over cap.", "offline"):
        table.add_column(column, justify="left" if column == "cluster" else "right")
    for row in result.brokers.head(WORST_SHOWN).itertuples():
        ratio = "-" if pd.isna(row.max_mean_ratio) else f"{row.max_mean_ratio:.2f}"
        std = "unknown" if pd.isna(row.percent_std) else f"{row.percent_std:.1f}"
        table.add_row(str(row.cluster), str(row.broker), str(row.disks), ratio, std, str(row.disks_out_of_band),
                      str(row.disks_over_capacity), str(row.disks_offline))
    console.print(table)
    if result.cordoned is not None and len(result.cordoned):
        cordons = Table(title="Cordoned dirs (KIP-1066)", title_justify="left")
        for column in ("cluster", "broker", "log dir", "still on it", "replicas"):
            cordons.add_column(column, justify="right" if column in ("broker", "still on it", "replicas") else "left")
        for row in result.cordoned.head(WORST_SHOWN * 5).itertuples():
            cordons.add_row(str(row.cluster), str(row.broker), str(row.log_dir), format_bytes(row.used_bytes),
                            str(row.replicas))
        console.print(cordons)
    console.print(f"Findings written to {out}")
