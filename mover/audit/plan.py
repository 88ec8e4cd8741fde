"""plan: log-dir moves for every broker of a snapshot that needs them, computed per broker in parallel on Spark.

The snapshot is read once (scan). Every replica becomes three longs in the JVM (dir code, size with flags,
partition key: see DIR_BITS), is hash-partitioned by broker and handed to Python as Arrow (mapInArrow). Each task
groups its rows by broker and dir with one numpy sort, sums each disk's bytes (and the audit's sums, so `audit --plan`
reads the replicas once: audit_usage), and runs the planner's array core (mover/audit/planner.py) once per broker;
the dirs (one row each) travel in the function's closure, not through the shuffle. The moves' partitions are then
named by a join with the partitions dataset, which also gives Kafka's reassignment JSON: replicas exactly as Metadata
lists them, a log dir for the brokers that move the partition, "any" for the others.

Output in PLANDIR, laid out and typed as mover/audit/plan_layout.py declares: `<cluster>.reassignment.json` per
cluster (for `mover-log-dirs --execute` and kafka-reassign-partitions.sh), `moves/`, `disks.parquet` (every disk
before and after), `brokers.parquet` and `summary.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.admin.assignment import ANY_LOG_DIR
from mover.admin.common import format_bytes
from mover.admin.throttle import DEFAULT_THROTTLE  # the rate execute applies: the plan's time estimate uses it
from mover.audit import balance, columns, partitions, plan_layout, planner, snapshot, spark, spark_hash
from mover.audit.errors import AuditError
from mover.cli.arguments import positive_int

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot", required=True, metavar="DIR")
    parser.add_argument("--out", required=True, metavar="PLANDIR", help="a new or empty directory for the plan")
    add_rule_arguments(parser)
    balance.add_arguments(parser)
    spark.add_arguments(parser)


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


RULE_OPTIONS = {"drain": [], "exclude_topics": None, "max_bytes_per_broker": None,
                "headroom": planner.Rules().headroom, "throttle": DEFAULT_THROTTLE}


def rules_from_args(args: argparse.Namespace) -> planner.Rules:
    return planner.Rules(balance.from_args(args), args.headroom, args.max_bytes_per_broker, args.exclude_topics)


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


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    path, _ = snapshot.resolve(args.snapshot, None)
    out = Path(args.out)
    check_out(out)
    rules = rules_from_args(args)
    partitions.prefetch(path, listed=False)
    if spark.local_master(args):
        prefetch(path, rules, args.drain)
    session = spark.from_args(args)
    result = compute(session, snapshot.read(session, path), rules, args.drain)
    spark.release()
    write(result, out, args.throttle)
    print_summary(result, out, args.throttle)
    return 0


class PlanResult:
    def __init__(self, snapshot_path: Path, rules: planner.Rules, moves: pd.DataFrame, disks: pd.DataFrame,
                 brokers: pd.DataFrame, reassignments: dict[str, list[dict[str, Any]]], dropped: int) -> None:
        self.snapshot = snapshot_path
        self.rules = rules
        self.moves = moves
        self.disks = disks
        self.brokers = brokers
        self.reassignments = reassignments
        self.dropped = dropped


def _resolve_drains(disks: pd.DataFrame, drains: list[tuple[str | None, int, str]]) -> dict[tuple[str, int], set[str]]:
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


# The replicas cross from the JVM to the planner's Python as three longs a row, because turning rows into Arrow,
# field by field, is what costs most at 20 million rows: the dir code `bkey << DIR_BITS | dir index` (-1: a dir
# log_dirs does not list), the size with three flags `size << 3 | unknown << 2 | is_future << 1 | blocked` (size as
# written, null as 0; `unknown`: is_future is null), and the partition key xxhash64(topic, partition). The key tells
# a partition's current copy from another partition's within a broker, and names a move's partition afterwards (a
# join with the partitions dataset, where a collision is seen and the move dropped, never guessed).
DIR_BITS = 16
MAX_DIRS = 1 << DIR_BITS
SIZE_SHIFT = 3
KIND_MOVE, KIND_DISK, KIND_BROKER, KIND_STRAY = 0, 1, 2, 3
# The audit's sums per dir ride on the disk rows (audit_usage), so `audit --plan` reads the replicas once: used_bytes
# (raw sizes), replicas (current copies), future_replicas, future_bytes, partition_hash (audit._partition_hash).
# A KIND_STRAY row counts, in size_bytes, the replicas of a task in dirs log_dirs does not list.
USAGE_COLUMNS = ["used_bytes", "replicas", "future_replicas", "future_bytes", "partition_hash"]
UDF_SCHEMA = ("kind byte, bkey long, dir int, dst int, pkey long, size_bytes long, step int, used_before long, "
              "used_after long, band_low double, band_high double, capacity_bytes double, lower_bound long, "
              + "".join(f"{c} long, " for c in USAGE_COLUMNS) + "status string, reason string")
DIR_KEYS = ["cluster", "broker", "log_dir"]
# Up to this many replica rows (counted from the Parquet footers), the planner runs in the driver's process rather
# than in Spark's Python workers: 1M rows are 24 MB of Arrow and about 250 brokers, well under a second of planning.
DRIVER_PLAN_ROWS = 1_000_000
# On a local master, up to this many replica rows, the driver reads the replicas itself (pyarrow), keys them as the
# JVM would (dir code by the dir's hash, spark_hash's partition key) and plans them in its own process: at 20M rows
# about 20 s of CPU on one core and 3.4 GB of memory, where Spark's read, hash, join, shuffle, Arrow transfer and
# Python workers took 50-60 s of CPU on both (docs/audit.md#performance, fourth round). It starts in a thread before
# the JVM does (prefetch). With a cluster's master, the executors read them as before.
LOCAL_SCAN_ROWS = 30_000_000
# Below this many listed dirs, the planner's task sorts its rows by each dir's place in the list (16 bits, one more for
# the unlisted dirs): numpy sorts those by radix (_planner_task).
RADIX_SORT_DIRS = (1 << 16) - 1
# With this many replica rows or more still to plan once the JVM is up, the driver's own pass (a local master) plans
# in two processes (_plan_steps): with fewer, starting the second (a new interpreter importing pandas and pyarrow,
# about a second of CPU) costs more than it saves.
HELPER_ROWS = 4_000_000
_REPLICA_COLUMNS = ["cluster", "broker", "log_dir", "topic", "partition", "size_bytes", "is_future"]


def _log_dirs(snap: snapshot.Snapshot) -> pd.DataFrame:
    """Every log dir the snapshot's log_dirs lists, sorted by (cluster, broker, log_dir) and numbered: `bkey` per
    broker (0, 1, ... in order), `dir` within it, `code` as the replicas carry it, `dk` the hash a replica's dir is
    joined on."""
    from pyspark.sql import functions as F

    # A row per dir: 40,000 rows at 20M replicas, read on the driver whatever the replicas' count (a Spark job less).
    frame = _small_log_dirs(snap)
    if frame is None:
        frame = snap.log_dirs.select(*DIR_KEYS, "error", "total_bytes", "usable_bytes", "is_cordoned",
                                     F.xxhash64(*DIR_KEYS).alias("dk")).toPandas()
    listed = len(frame)
    frame = (frame.dropna(subset=DIR_KEYS).sort_values(DIR_KEYS, kind="mergesort")
             .drop_duplicates(DIR_KEYS).reset_index(drop=True))
    # A row left out here (a null key, a dir listed twice) is one the audit's own join keeps: see audit_usage.
    frame.attrs["all_listed"] = len(frame) == listed
    frame["broker"] = frame["broker"].astype("int64")
    frame["online"] = frame["error"].isna()
    # KIP-1066: never a destination (null: the broker does not report cordons, so none are known).
    frame["cordoned"] = frame["is_cordoned"].astype("boolean").fillna(False).astype(bool)
    grouped = frame.groupby(["cluster", "broker"], sort=False)
    frame["bkey"] = grouped.ngroup().astype("int64")
    frame["dir"] = grouped.cumcount().astype("int64")
    if len(frame) and int(frame["dir"].max()) >= MAX_DIRS:
        raise AuditError(f"a broker lists more than {MAX_DIRS} log dirs: not a snapshot this planner can read")
    frame["code"] = frame["bkey"] * MAX_DIRS + frame["dir"]
    return frame


def _small_log_dirs(snap: snapshot.Snapshot) -> pd.DataFrame | None:
    """_log_dirs' columns (a row per dir), read by the driver (a Spark job less: on a fresh JVM each costs
    seconds), `dk` computed as Spark computes it (spark_hash); None where Spark must read them."""
    import pyarrow as pa

    columns = [*DIR_KEYS, "error", "total_bytes", "usable_bytes"]
    frame = snapshot.read_small(snap, "log_dirs", columns, DRIVER_PLAN_ROWS)
    if frame is None:
        return None
    frame = frame.copy()
    cordons = snapshot.read_small(snap, "log_dirs", ["is_cordoned"], DRIVER_PLAN_ROWS)
    frame["is_cordoned"] = None if cordons is None else cordons["is_cordoned"].to_numpy(dtype=object)
    try:
        frame["dk"] = spark_hash.xxhash64(*(pa.array(frame[c], kind, from_pandas=True) for c, kind in
                                            zip(DIR_KEYS, (pa.string(), pa.int32(), pa.string()), strict=True)))
    except (pa.ArrowException, TypeError, ValueError):  # not the declared types after all: Spark reads them
        return None
    return frame


def _replica_rows(session: SparkSession, snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules,
                  by_hash: bool | None = None) -> DataFrame:
    """(code, sf, pkey) for every replica; code -1 for one in a dir log_dirs does not list (it cannot be planned
    around, the task only counts it; the audit reports it)."""
    from pyspark.sql import functions as F

    replicas, sf, pkey = _packed(session, snap, rules)
    if by_hash if by_hash is not None else not dirs["dk"].duplicated().any():
        # One long key joins far faster than three columns with two strings.
        tag = session.createDataFrame(dirs[["dk", "code"]])
        rows = replicas.select(F.xxhash64(*DIR_KEYS).alias("dk"), sf, pkey).join(F.broadcast(tag), "dk", "left")
    else:  # two dirs hash alike: join on the names themselves
        tag = session.createDataFrame(dirs[[*DIR_KEYS, "code"]].astype({"broker": "int32"}))
        rows = replicas.join(F.broadcast(tag), DIR_KEYS, "left").select("code", sf, pkey)
    return rows.select(F.coalesce(F.col("code"), F.lit(-1).cast("long")).alias("code"), "sf", "pkey")


def _packed(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules) -> tuple[DataFrame, Any, Any]:
    """The replicas (with the excluded topics' flag when there are some), and the sf and pkey columns."""
    from pyspark.sql import functions as F

    replicas = snap.replicas
    blocked = F.lit(0)
    if rules.exclude_topics is not None:
        # The regex is Python's (as the operator wrote it): applied to the distinct topic names, not by the JVM.
        topics = replicas.select("topic").distinct().toPandas()["topic"].dropna()
        excluded = [t for t in topics if rules.exclude_topics.search(str(t))]
        if excluded:
            flags = session.createDataFrame(pd.DataFrame({"topic": excluded, "excluded": 1}))
            replicas = replicas.join(F.broadcast(flags), "topic", "left")
            blocked = F.coalesce(F.col("excluded"), F.lit(0)).cast("long")
    size = F.coalesce(F.col("size_bytes"), F.lit(0))
    future = F.coalesce(F.col("is_future"), F.lit(False)).cast("long")
    unknown = F.col("is_future").isNull().cast("long")
    sf = (F.shiftleft(size, SIZE_SHIFT) + unknown * 4 + future * 2 + blocked).alias("sf")
    return replicas, sf, F.xxhash64("topic", "partition").alias("pkey")


def _driver_rows(session: SparkSession, snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules) -> Any:
    """_replica_rows as one Arrow table in the driver, for a small snapshot. When no two dirs hash alike, Spark
    only reads and hashes the replicas, and each one's dir code is looked up here by its dir's hash (numpy, the
    same answer as the broadcast join): the join's broadcast is a Spark job of its own, and on a fresh JVM a new
    kind of query costs seconds (docs/audit.md#performance). Else the join on the names, by Spark."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    keys = dirs["dk"].to_numpy(dtype="int64")
    if len(keys) == 0 or len(np.unique(keys)) != len(keys):
        return _replica_rows(session, snap, dirs, rules, by_hash=False).toArrow()
    replicas, sf, pkey = _packed(session, snap, rules)
    table = replicas.select(F.xxhash64(*DIR_KEYS).alias("dk"), sf, pkey).toArrow()
    dk = table.column("dk").to_numpy()
    code = _codes_of_hashes(dirs, keys, dk)
    return pa.table({"code": pa.array(code, pa.int64()), "sf": table.column("sf"), "pkey": table.column("pkey")})


def _codes_of_hashes(dirs: pd.DataFrame, keys: np.ndarray, dk: np.ndarray) -> np.ndarray:
    """The dir code of each hash in `dk` (-1 where no listed dir has it), `keys` being the dirs' own hashes (no two
    alike): the broadcast join's answer, by a sorted search."""
    order = np.argsort(keys)
    at = np.minimum(np.searchsorted(keys[order], dk), len(keys) - 1)
    return np.where(keys[order][at] == dk, dirs["code"].to_numpy(dtype="int64")[order][at], -1)


class _Out:
    """One task's output rows, kept as column arrays per kind and joined once at the end."""

    def __init__(self) -> None:
        self.moves: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.disks: list[tuple[int, np.ndarray, planner.ArrayPlan]] = []
        self.usage: list[list[np.ndarray]] = []  # per disks entry: the USAGE_COLUMNS arrays
        self.brokers: list[tuple[int, planner.ArrayPlan]] = []
        self.strays = 0

    def extend(self, other: _Out) -> None:
        self.moves += other.moves
        self.disks += other.disks
        self.usage += other.usage
        self.brokers += other.brokers

    def batch(self) -> Any:
        import pyarrow as pa

        m = sum(len(x[1]) for x in self.moves)
        d = sum(len(x[1]) for x in self.disks)
        b = len(self.brokers)

        def cat(parts: list[np.ndarray], dtype: str) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        def col(moves: np.ndarray | None, disks: np.ndarray | None, brokers: np.ndarray | None, dtype: str,
                fill: Any = 0) -> np.ndarray:
            return np.concatenate([
                moves.astype(dtype) if moves is not None else np.full(m, fill, dtype=dtype),
                disks.astype(dtype) if disks is not None else np.full(d, fill, dtype=dtype),
                brokers.astype(dtype) if brokers is not None else np.full(b, fill, dtype=dtype)])

        mv, dk, br = self.moves, self.disks, self.brokers
        columns = {
            "kind": col(np.full(m, KIND_MOVE), np.full(d, KIND_DISK), np.full(b, KIND_BROKER), "int8"),
            "bkey": col(cat([np.full(len(x[1]), x[0]) for x in mv], "int64"),
                        cat([np.full(len(x[1]), x[0]) for x in dk], "int64"),
                        np.array([x[0] for x in br], dtype="int64"), "int64"),
            "dir": col(cat([x[1] for x in mv], "int32"), cat([np.arange(len(x[1])) for x in dk], "int32"), None,
                       "int32"),
            "dst": col(cat([x[2] for x in mv], "int32"), None, None, "int32"),
            "pkey": col(cat([x[3] for x in mv], "int64"), None, None, "int64"),
            "size_bytes": col(cat([x[4] for x in mv], "int64"), None,
                              np.array([sum(x[1].size) for x in br], dtype="int64"), "int64"),
            "step": col(cat([np.arange(1, len(x[1]) + 1) for x in mv], "int32"), None, None, "int32"),
            "used_before": col(None, cat([x[1] for x in dk], "int64"), None, "int64"),
            "used_after": col(None, cat([x[2].used_after for x in dk], "int64"), None, "int64"),
            "band_low": col(None, cat([x[2].low for x in dk], "float64"), None, "float64", np.nan),
            "band_high": col(None, cat([x[2].high for x in dk], "float64"), None, "float64", np.nan),
            "capacity_bytes": col(None, cat([x[2].cap for x in dk], "float64"), None, "float64", np.nan),
            "lower_bound": col(None, None, np.array([x[1].lower_bound for x in br], dtype="int64"), "int64"),
            **{c: col(None, cat([u[i] for u in self.usage], "int64"), None, "int64")
               for i, c in enumerate(USAGE_COLUMNS)},
        }
        arrays = [pa.array(v) for v in columns.values()]
        status = [""] * (m + d) + [x[1].status for x in br]
        reason = [""] * (m + d) + [x[1].reason for x in br]
        return pa.RecordBatch.from_arrays([*arrays, pa.array(status, pa.string()), pa.array(reason, pa.string())],
                                          names=[*columns, "status", "reason"])

    def stray_batch(self, like: Any) -> Any:
        """One KIND_STRAY row (the count in size_bytes) with the schema of `like`."""
        import pyarrow as pa

        values = {"kind": KIND_STRAY, "size_bytes": self.strays}
        return pa.RecordBatch.from_arrays(
            [pa.array([values.get(f.name, "" if pa.types.is_string(f.type) else 0)], f.type) for f in like.schema],
            schema=like.schema)


@dataclass(frozen=True)
class _Dirs:
    """What the planner's task knows of the listed dirs (a row each, `dirs`' order): sent once to a helper."""

    names: np.ndarray
    online: np.ndarray
    cordoned: np.ndarray
    total: np.ndarray
    usable: np.ndarray
    drained: np.ndarray
    starts: np.ndarray  # a broker key's first row, for every key and one past the last
    rules: planner.Rules
    plan: bool


def _planner_task(rules: planner.Rules, dirs: pd.DataFrame, drained: np.ndarray,  # noqa: ANN202 (mapInArrow's)
                  plan: bool = True):
    """Plans every broker of one Spark partition (only sums each dir when not `plan`). The rows arrive
    hash-partitioned by broker key, unsorted: one numpy sort by dir groups them by broker and, within it, by dir
    (Spark's own grouping would sort them in the JVM and hand each broker over as a separate frame). A broker's disk
    usage is summed here from its rows, so the snapshot is read once. The brokers are planned a step of about
    columns.STEP_ROWS rows at a time; called with `helper` (the driver's own pass), a second process plans some of
    the steps of a big task (HELPER_ROWS)."""
    known = _Dirs(dirs["log_dir"].to_numpy(dtype=object), dirs["online"].to_numpy(dtype=bool),
                  dirs["cordoned"].to_numpy(dtype=bool), dirs["total_bytes"].to_numpy(dtype="float64", na_value=np.nan),
                  dirs["usable_bytes"].to_numpy(dtype="float64", na_value=np.nan), drained,
                  np.searchsorted(dirs["bkey"].to_numpy(), np.arange(int(dirs["bkey"].max()) + 2 if len(dirs) else 1)),
                  rules, plan)

    def plan_partition(batches: Any, helper: bool = False) -> Any:
        import pyarrow as pa

        full = [b for b in batches if b.num_rows]
        if not full:
            return
        table = pa.Table.from_batches(full)
        code, sf, pkey = (table.column(c).to_numpy() for c in ("code", "sf", "pkey"))
        del table
        starts = known.starts
        order = _dir_order(known, code)
        # Rows per broker key, counted a step at a time (index 0: the replicas of unlisted dirs, code -1, which sort
        # first; counted, then left out): the sorted codes are never built whole.
        counts = np.zeros(len(starts), dtype="int64")
        for at in range(0, len(code), columns.STEP_ROWS):
            counts += np.bincount((code[at:at + columns.STEP_ROWS] >> DIR_BITS) + 1, minlength=len(starts))
        firsts = np.cumsum(counts)
        # Brokers with rows, as (bkey, first row, end row) in the sorted order; grouped into steps of about
        # columns.STEP_ROWS rows, whose columns are gathered and derived together.
        brokers = [(k, int(firsts[k]), int(firsts[k + 1])) for k in np.flatnonzero(counts[1:]).tolist()]
        steps: list[list[tuple[int, int, int]]] = [[]]
        for i, broker in enumerate(brokers):
            steps[-1].append(broker)
            if i + 1 < len(brokers) and brokers[i + 1][2] - steps[-1][0][1] > columns.STEP_ROWS:
                steps.append([])

        def rows_of(step: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            rows = order[step[0][1]:step[-1][2]] if step else order[:0]
            return code[rows], sf[rows], pkey[rows]

        outs = _plan_steps(known, steps, rows_of, helper and len(code) >= HELPER_ROWS)
        out = _Out()
        for part in outs:
            out.extend(part)
        out.strays = int(counts[0])
        batch = out.batch()
        yield batch
        if out.strays:
            yield out.stray_batch(batch)

    return plan_partition


def _dir_order(known: _Dirs, code: np.ndarray) -> np.ndarray:
    """The rows' order by dir code, stable (the unlisted dirs' rows, code -1, first). By each dir's place in `dirs`
    (one more: 0 is -1) when that fits 16 bits: numpy sorts 16-bit keys by radix, in linear time (20M rows: 0.5 s
    against 2.6 s for the codes' own sort, random order); both give the same order."""
    if len(known.names) >= RADIX_SORT_DIRS:
        return np.argsort(code, kind="stable")
    places = np.empty(len(code), dtype=np.uint16)
    for at in range(0, len(code), columns.STEP_ROWS):
        part = code[at:at + columns.STEP_ROWS]
        place = known.starts[np.maximum(part >> DIR_BITS, 0)] + (part & (MAX_DIRS - 1)) + 1
        place[part < 0] = 0
        places[at:at + columns.STEP_ROWS] = place
    return np.argsort(places, kind="stable")


def _plan_steps(known: _Dirs, steps: list[list[tuple[int, int, int]]], rows_of: Any, helper: bool) -> list[_Out]:
    """Each step's output, in the steps' order. With `helper`, once no JVM is starting here (spark.starting: its
    start keeps the cores busy) and while HELPER_ROWS rows or more are left to plan, a second process (spawned: the
    driver holds a JVM gateway and pyarrow's threads, which a fork would copy half-alive) plans a step whenever it
    has fewer than two waiting, and this one plans the others: the planning is Python, a core per process, and on a
    local master the JVM has nothing to do meanwhile. A step the helper could not plan (the process died, or would
    not start) is planned here; an error of the planner itself is raised here too, as without a helper. As with any
    spawned process, the child imports the program's main module: mover-audit's entry points guard theirs (`if
    __name__ == "__main__"`), and so must a program that calls compute() or scan() on a local master."""
    outs: list[Any] = [None] * len(steps)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    helper = helper and cores > 1
    pool = None
    try:
        waiting: list[Any] = []
        for i, step in enumerate(steps):
            left = steps[-1][-1][2] - step[0][1] if step else 0
            if pool is None and helper and left >= HELPER_ROWS and i + 1 < len(steps) and not spark.starting():
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_helper_start, initargs=(known,))
            waiting = [f for f in waiting if not f.done()]
            if pool is not None and len(waiting) < 2 and i + 1 < len(steps):
                outs[i] = pool.submit(_helper_plan, step, *rows_of(step))
                waiting.append(outs[i])
            else:
                outs[i] = _plan_step(known, step, *rows_of(step))
        for i, step in enumerate(steps):
            if not isinstance(outs[i], _Out):
                try:
                    outs[i] = outs[i].result()
                except Exception:  # noqa: BLE001 (planned here instead: a planner error is raised here as well)
                    outs[i] = _plan_step(known, step, *rows_of(step))
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return outs


_helper_dirs: _Dirs | None = None


def _helper_start(known: _Dirs) -> None:
    global _helper_dirs
    _helper_dirs = known


def _helper_plan(step: list[tuple[int, int, int]], code: np.ndarray, sf: np.ndarray, pkey: np.ndarray) -> _Out:
    assert _helper_dirs is not None
    return _plan_step(_helper_dirs, step, code, sf, pkey)


def _plan_step(known: _Dirs, step: list[tuple[int, int, int]], code: np.ndarray, sf: np.ndarray,
               pkey: np.ndarray) -> _Out:
    """Plans the brokers of one step, given their rows (code, sf, pkey) sorted by dir code."""
    out = _Out()
    base = step[0][1] if step else 0
    dir_of = (code & (MAX_DIRS - 1)).astype("int64")
    raw = sf >> SIZE_SHIFT
    sizes = np.maximum(raw, 0)
    futures = (sf & 2) != 0
    current = (sf & 6) == 0
    blocked = (sf & 1) != 0
    for bkey, first, end in step:
        s, e = first - base, end - base
        lo, hi = int(known.starts[bkey]), int(known.starts[bkey + 1])
        d = dir_of[s:e]
        # Rows are sorted by dir within the broker: one reduceat sums each dir's bytes, exactly (int64).
        heads = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        used = np.zeros(hi - lo, dtype="int64")
        used[d[heads]] = np.add.reduceat(sizes[s:e], heads)
        usage = []
        hashes = np.where(current[s:e], pkey[s:e] & partitions.HASH_MASK, 0)
        for part in (raw[s:e], current[s:e].astype("int64"), futures[s:e].astype("int64"),
                     np.where(futures[s:e], raw[s:e], 0), hashes):
            summed = np.zeros(hi - lo, dtype="int64")
            summed[d[heads]] = np.add.reduceat(part, heads)
            usage.append(summed)
        out.usage.append(usage)
        on = known.online[lo:hi]
        keep = on[d]
        if not known.plan:
            nan = np.full(hi - lo, np.nan)
            out.disks.append((bkey, used, planner.ArrayPlan([], [], [], [], used.astype("float64"), nan, nan,
                                                             nan, 0, "balanced")))
            continue
        p = planner.plan_arrays(known.names[lo:hi].tolist(), on, known.total[lo:hi], known.usable[lo:hi], used,
                                known.drained[lo:hi], d[keep], pkey[s:e][keep], sizes[s:e][keep], futures[s:e][keep],
                                blocked[s:e][keep], known.rules, known.cordoned[lo:hi])
        if p.rows:
            moved = np.asarray(p.rows, dtype="int64")
            out.moves.append((bkey, np.asarray(p.src), np.asarray(p.dst), pkey[s:e][keep][moved],
                              np.asarray(p.size, dtype="int64")))
        out.disks.append((bkey, used, p))
        out.brokers.append((bkey, p))
    return out


class PlanPass:
    """The plan's one pass over the replicas: the listed dirs, the drained ones, the task's rows (kinds above)."""

    def __init__(self, dirs: pd.DataFrame, drained: np.ndarray, planned: pd.DataFrame) -> None:
        self.dirs = dirs
        self.drained = drained
        self.planned = planned


def compute(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
            drains: list[tuple[str | None, int, str]] | None = None) -> PlanResult:
    return finish(session, snap, rules, scan(session, snap, rules, drains))


def scan(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
         drains: list[tuple[str | None, int, str]] | None = None, plan: bool = True) -> PlanPass:
    """Reads the replicas once and plans every broker (a bad --drain is an AuditError before that); only sums each
    dir when not `plan`. What prefetch started for this snapshot and these arguments is taken as it is."""
    pending = _pending.pop(snap.path, None)
    if pending is not None and pending[0] == (rules, tuple(drains or []), plan):
        done = pending[1].result()  # an AuditError (a bad --drain) is raised here, as below
        if done is not None:
            snap.local.update(done[1])
            return done[0]
    dirs, drained, task = _prepare(snap, rules, drains, plan)
    planned = _run_task(task, None)
    if len(dirs):
        # With a cluster's master the executors read the replicas (the driver's host may be no place for 20M rows).
        local = _local_rows(snap, dirs, rules) if session.sparkContext.master.startswith("local") else None
        if local is not None or _small(snap):
            # Planned here, by the same function as in Spark's Python workers: no worker is started (each would
            # import pandas and pyarrow again: most of a small plan's time).
            planned = _run_task(task, local if local is not None else _driver_rows(session, snap, dirs, rules))
        else:
            from pyspark.sql import functions as F

            rows = _replica_rows(session, snap, dirs, rules)
            tasks = int(session.conf.get("spark.sql.shuffle.partitions") or spark.DEFAULT_SHUFFLE_PARTITIONS)
            planned = (rows.repartition(tasks, F.shiftright("code", DIR_BITS))
                       .mapInArrow(task, UDF_SCHEMA).toPandas())
    return PlanPass(dirs, drained, planned)


def _prepare(snap: snapshot.Snapshot, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None,
             plan: bool) -> tuple[pd.DataFrame, np.ndarray, Any]:
    """The listed dirs, the drained ones (a bad --drain is an AuditError), the planner's task function."""
    dirs = _log_dirs(snap)
    drain_dirs = _resolve_drains(dirs, drains or [])
    drained = np.array([dr in drain_dirs.get((c, b), ()) for c, b, dr in
                        zip(dirs["cluster"], dirs["broker"], dirs["log_dir"], strict=True)], dtype=bool)
    return dirs, drained, _planner_task(rules, dirs, drained, plan)


def _run_task(task: Any, table: Any) -> pd.DataFrame:
    """The task's rows for an Arrow table of (code, sf, pkey) (none: no rows), planned in the driver: with a helper
    process when the table is big (HELPER_ROWS)."""
    import pyarrow as pa

    batches = [] if table is None else list(task(iter(table.to_batches()), helper=True))
    if batches:
        return pa.Table.from_batches(batches).to_pandas()
    return pd.DataFrame({c.strip().split(" ")[0]: [] for c in UDF_SCHEMA.split(",")})


def _local_scan(path: Path, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None,
                plan: bool) -> tuple[PlanPass, dict[str, Any]] | None:
    """scan() of the snapshot at `path` without Spark (prefetch's thread), and what it read for the snapshot's
    `local`; None when the replicas are not for the driver (scan then runs as without prefetch)."""
    local = snapshot.Snapshot(path, {})
    if _small_log_dirs(local) is None:  # Spark reads the log dirs: scan runs as without prefetch
        return None
    dirs, drained, task = _prepare(local, rules, drains, plan)
    if not len(dirs):
        return None
    rows = _local_rows(local, dirs, rules)
    if rows is None:
        return None
    return PlanPass(dirs, drained, _run_task(task, rows)), local.local


def prefetch(path: Path, rules: planner.Rules, drains: list[tuple[str | None, int, str]] | None = None,
             plan: bool = True) -> None:
    """Starts scan()'s work for a snapshot the driver reads itself (LOCAL_SCAN_ROWS; for a local master only: the
    caller knows) in a thread, while the driver starts its JVM: the read, the keys and the planning need no Spark.
    scan() with the same arguments takes it."""
    import threading
    from concurrent.futures import Future

    # Imported on the caller's thread: the session's start imports the same packages (partitions.prefetch).
    import pyarrow.parquet  # noqa: F401
    import pyspark.sql.types  # noqa: F401

    rows = snapshot.dataset_rows(path / "replicas")
    if rows is None or rows > LOCAL_SCAN_ROWS:
        return
    done: Future[Any] = Future()

    def work() -> None:
        try:
            done.set_result(_local_scan(path, rules, drains, plan))
        except BaseException as e:  # noqa: BLE001 (handed to scan(), which raises it)
            done.set_exception(e)

    # A daemon: a command that fails before its scan (a dataset Spark cannot read) exits without waiting for it.
    threading.Thread(target=work, name="replicas-scan", daemon=True).start()
    _pending[path] = ((rules, tuple(drains or []), plan), done)


_pending: dict[Path, Any] = {}


def _local_rows(snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules) -> Any:
    """_replica_rows' (code, sf, pkey) as one Arrow table, computed by the driver from a pyarrow read of the
    replicas: each distinct (cluster, broker, log_dir) hashed as Spark's xxhash64 and looked up among the dirs'
    hashes (as the broadcast join does), the partition key as Spark's xxhash64(topic, partition) (spark_hash), the
    excluded topics by Python's regex per distinct topic. None where Spark must read them: more than
    LOCAL_SCAN_ROWS rows, a layout the footers do not vouch for, a file pyarrow does not read, two dirs that hash
    alike (the join is then on the names)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    where = snap.path / "replicas"
    count = snapshot.dataset_rows(where)
    keys = dirs["dk"].to_numpy(dtype="int64")
    if (count is None or count > LOCAL_SCAN_ROWS or snapshot.footer_schema(where, snapshot.REPLICAS) is None
            or len(np.unique(keys)) != len(keys)):
        return None
    try:
        table = pq.read_table(where, columns=_REPLICA_COLUMNS, read_dictionary=["cluster", "log_dir", "topic"])
        want = {"broker": pa.int32(), "partition": pa.int32(), "size_bytes": pa.int64(), "is_future": pa.bool_()}
        for name, kind in want.items():
            if table.schema.field(name).type != kind:
                table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(kind))
        for name in ("cluster", "log_dir", "topic"):
            kind = table.schema.field(name).type
            if not pa.types.is_dictionary(kind) or not pa.types.is_string(kind.value_type):
                return None
        code = _dir_codes(dirs, keys, table)
        if code is None:
            return None
        pkey = spark_hash.partition_keys(table.column("topic"), table.column("partition"))
        topics = columns.Names(table.column("topic")) if rules.exclude_topics is not None else None
        if topics is not None:
            excluded = np.array([n is not None and bool(rules.exclude_topics.search(n))
                                 for n in topics.dictionary.to_pylist()] + [False])
        sf = np.empty(table.num_rows, dtype=np.int64)
        for at, batch in columns.steps(table.select(["topic", "size_bytes", "is_future"])):
            topic, size, future = batch.columns
            part = sf[at:at + batch.num_rows]
            part[:] = pc.fill_null(size, 0).to_numpy(zero_copy_only=False)
            part <<= SIZE_SHIFT
            part += np.asarray(future.is_null(), dtype=np.int64) * 4
            part += pc.fill_null(future, False).to_numpy(zero_copy_only=False).astype(np.int64) * 2
            if topics is not None:
                part += excluded[topics.rows(topic, at)]
    except (pa.ArrowException, OSError, ValueError, TypeError):  # Spark's read says what is wrong
        return None
    return pa.table({"code": pa.array(code, pa.int64()), "sf": pa.array(sf, pa.int64()),
                     "pkey": pa.array(pkey, pa.int64())})


def _dir_codes(dirs: pd.DataFrame, keys: np.ndarray, table: Any) -> np.ndarray | None:
    """Each row's dir code (-1: no listed dir has its hash), hashing each distinct (cluster, broker, log_dir) once;
    None when the names are too many to pack into one 64-bit key. A step at a time (columns.py): the rows' packed
    names are written where their codes go, and replaced by the codes once the distinct ones are hashed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    clusters, log_dirs = columns.Names(table.column("cluster")), columns.Names(table.column("log_dir"))
    nc, nl = len(clusters.dictionary) + 1, len(log_dirs.dictionary) + 1
    if nc * nl >= 1 << 30:
        return None
    code = np.empty(table.num_rows, dtype=np.int64)
    seen = [np.zeros(0, dtype=np.int64)]
    for at, batch in columns.steps(table.select(["cluster", "broker", "log_dir"])):
        cluster, broker, log_dir = batch.columns
        key = code[at:at + batch.num_rows]
        # A null name is one past its dictionary's last entry; a null broker sets bit 32.
        key[:] = clusters.rows(cluster, at)
        key *= nl
        key += log_dirs.rows(log_dir, at)
        key <<= 33
        key |= pc.fill_null(broker, 0).to_numpy(zero_copy_only=False).astype(np.int64) & 0xFFFFFFFF
        if broker.null_count:
            key |= np.asarray(broker.is_null(), dtype=np.int64) << 32
        seen.append(pd.unique(key))
    uniques = np.unique(np.concatenate(seen))
    pair, ub = uniques >> 33, uniques & ((1 << 33) - 1)

    def names(dictionary: Any, index: np.ndarray, missing: int) -> Any:
        found = dictionary.take(pa.array(np.where(index == missing, 0, index))) if len(dictionary) else None
        values = found.to_pylist() if found is not None else [None] * len(index)
        return pa.array([None if i == missing else v for i, v in zip(index.tolist(), values, strict=True)],
                        pa.string())

    dk = spark_hash.xxhash64(names(clusters.dictionary, pair // nl, nc - 1),
                             pa.array((ub & 0xFFFFFFFF).astype(np.uint32).astype(np.int32), pa.int32(),
                                      mask=(ub >> 32) == 1),
                             names(log_dirs.dictionary, pair % nl, nl - 1))
    mapped = _codes_of_hashes(dirs, keys, dk)
    for at in range(0, len(code), columns.STEP_ROWS):
        part = code[at:at + columns.STEP_ROWS]
        part[:] = mapped[np.searchsorted(uniques, part)]
    return code


def _small(snap: snapshot.Snapshot) -> bool:
    """At most DRIVER_PLAN_ROWS replica rows, by the footers."""
    count = snapshot.dataset_rows(snap.path / "replicas")
    return count is not None and count <= DRIVER_PLAN_ROWS


def driver_usage(session: SparkSession, snap: snapshot.Snapshot) -> pd.DataFrame | None:
    """audit.disk_usage's frame for a snapshot the driver sums (LOCAL_SCAN_ROWS, DRIVER_PLAN_ROWS), else
    None: the plan's pass without the planning, the one Spark query `plan` runs anyway. On a fresh JVM it costs
    less than disk_usage's aggregation and full outer join, new kinds of query to compile (docs/audit.md)."""
    count = snapshot.dataset_rows(snap.path / "replicas")
    if count is None or count > max(DRIVER_PLAN_ROWS, LOCAL_SCAN_ROWS):
        return None
    return audit_usage(scan(session, snap, planner.Rules(), plan=False))


def audit_usage(p: PlanPass) -> pd.DataFrame | None:
    """audit.disk_usage's frame from the plan's pass, or None when the pass cannot give it exactly: replicas in
    dirs log_dirs does not list (the audit shows those dirs, named; the pass only counted them), or log_dirs rows
    the plan left out (a null key, a dir listed twice)."""
    planned, dirs = p.planned, p.dirs
    if not dirs.attrs.get("all_listed", False) or (planned["kind"] == KIND_STRAY).any():
        return None
    dk = planned[planned["kind"] == KIND_DISK]
    starts = np.searchsorted(dirs["bkey"].to_numpy(), np.arange(int(dirs["bkey"].max()) + 1 if len(dirs) else 0))
    at = starts[dk["bkey"].to_numpy(dtype="int64")] + dk["dir"].to_numpy(dtype="int64")
    frame = dirs[[*DIR_KEYS, "error", "total_bytes", "usable_bytes", "is_cordoned"]].copy()
    # The dirs' own flag (all_listed) stays with them: pandas would write it into cordoned.parquet's metadata, which
    # disk_usage's frame never had.
    frame.attrs = {}
    for column in USAGE_COLUMNS:
        values = np.zeros(len(dirs), dtype="int64")
        values[at] = dk[column].to_numpy(dtype="int64")
        frame[column] = values
    return frame.reset_index(drop=True)


def finish(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules, p: PlanPass) -> PlanResult:
    """The plan from its pass: brokers, moves named by partition, every disk before and after."""
    t = rules.thresholds
    dirs, drained, planned = p.dirs, p.drained, p.planned
    names = dirs["log_dir"].to_numpy(dtype=object)
    starts = np.searchsorted(dirs["bkey"].to_numpy(), np.arange(int(dirs["bkey"].max()) + 1 if len(dirs) else 0))
    cluster_of = dirs["cluster"].to_numpy(dtype=object)[starts]
    broker_of = dirs["broker"].to_numpy(dtype="int64")[starts]

    b = planned[planned["kind"] == KIND_BROKER]
    bk = b["bkey"].to_numpy(dtype="int64")
    brokers = pd.DataFrame({"cluster": cluster_of[bk], "broker": broker_of[bk],
                            "lower_bound": b["lower_bound"].to_numpy(dtype="int64"),
                            "moved_bytes": b["size_bytes"].to_numpy(dtype="int64"),
                            "status": b["status"].to_numpy(dtype=object), "reason": b["reason"].to_numpy(dtype=object)})
    brokers = brokers.sort_values(["cluster", "broker"], kind="mergesort").reset_index(drop=True)
    refused = brokers[brokers["status"] == "refused"]
    if len(refused):
        first = refused.iloc[0]
        more = f" (and {len(refused) - 1} more brokers)" if len(refused) > 1 else ""
        raise AuditError(f"cannot drain on broker {first['broker']} of {first['cluster']}: {first['reason']}{more}")

    m = planned[planned["kind"] == KIND_MOVE]
    mk = m["bkey"].to_numpy(dtype="int64")
    moves = pd.DataFrame({"cluster": cluster_of[mk], "broker": broker_of[mk].astype("int32"),
                          "pkey": m["pkey"].to_numpy(dtype="int64"),
                          "from_dir": names[starts[mk] + m["dir"].to_numpy(dtype="int64")],
                          "to_dir": names[starts[mk] + m["dst"].to_numpy(dtype="int64")],
                          "size_bytes": m["size_bytes"].to_numpy(dtype="int64"),
                          "step": m["step"].to_numpy(dtype="int32")})
    moves = moves.sort_values(["cluster", "broker", "step"], kind="mergesort").reset_index(drop=True)

    # Every listed dir, with the bytes in it before and as predicted after (a broker no replica names has none).
    dk = planned[planned["kind"] == KIND_DISK]
    at = starts[dk["bkey"].to_numpy(dtype="int64")] + dk["dir"].to_numpy(dtype="int64")
    used_before = np.zeros(len(dirs), dtype="int64")
    used_before[at] = dk["used_before"].to_numpy(dtype="int64")
    used_after = used_before.copy()
    used_after[at] = dk["used_after"].to_numpy(dtype="int64")
    usage = dirs[[*DIR_KEYS, "error", "total_bytes", "usable_bytes"]].assign(used_bytes=used_before)
    disks = balance.assess_disks(usage, t)
    after = dirs[DIR_KEYS].assign(used_after=used_after, drained=drained, cordoned=dirs["cordoned"].to_numpy())

    reassignments, kept, dropped = _reassignments(session, snap, moves)
    if dropped:
        # The prediction follows the moves that remain: take the dropped ones back out of it.
        after = _undo(after, moves, kept)
    kept = kept[list(plan_layout.MOVES)]
    return PlanResult(snap.path, rules, kept, _disks_after(disks, after, t), brokers, reassignments, dropped)


def _undo(after: pd.DataFrame, moves: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    keys = ["cluster", "broker", "pkey"]
    gone = moves.merge(kept[keys], on=keys, how="left", indicator=True)
    gone = gone[gone["_merge"] == "left_only"]
    delta = pd.concat([gone[["cluster", "broker", "from_dir", "size_bytes"]].rename(columns={"from_dir": "log_dir"}),
                       gone[["cluster", "broker", "to_dir", "size_bytes"]].rename(columns={"to_dir": "log_dir"})
                       .assign(size_bytes=lambda f: -f["size_bytes"])])
    delta = delta.groupby(["cluster", "broker", "log_dir"], as_index=False)["size_bytes"].sum()
    after = after.merge(delta.astype({"broker": "int64"}), on=["cluster", "broker", "log_dir"], how="left")
    after["used_after"] = after["used_after"] + after["size_bytes"].fillna(0).astype("int64")
    return after.drop(columns="size_bytes")


def _disks_after(disks: pd.DataFrame, after: pd.DataFrame, t: balance.Thresholds) -> pd.DataFrame:
    """Every disk with its usage before and as predicted after the plan (and the moves already running), judged
    again by the same rules; a drained disk leaves its broker's average."""
    keys = ["cluster", "broker", "log_dir"]
    d = disks[[*keys, "error", "online", "total_bytes", "usable_bytes", "used_bytes", "basis", "avg", "percent",
               "load", "band_low", "band_high", "out_of_band", "over_capacity"]]
    d = d.merge(after[[*keys, "used_after", "drained", "cordoned"]].astype({"broker": "int64"}), on=keys,
                how="left")
    d["used_after"] = d["used_after"].fillna(d["used_bytes"]).astype("int64")
    d["drained"] = d["drained"].astype("boolean").fillna(False).astype(bool)
    d["cordoned"] = d["cordoned"].astype("boolean").fillna(False).astype(bool)
    again = d[[*keys, "error", "total_bytes", "usable_bytes"]].assign(used_bytes=d["used_after"])
    again.loc[d["drained"], "error"] = "drained"
    judged = balance.assess_disks(again, t)
    d = d.rename(columns={"used_bytes": "used_before"})
    d["percent_after"] = judged["percent"].where(~d["drained"], 0.0)
    d["load_after"] = judged["load"]
    d["band_low_after"], d["band_high_after"] = judged["band_low"], judged["band_high"]
    d["out_of_band_after"] = judged["out_of_band"]
    d["over_capacity_after"] = judged["over_capacity"]
    return d


def _reassignments(session: SparkSession, snap: snapshot.Snapshot, moves: pd.DataFrame
                   ) -> tuple[dict[str, list[dict[str, Any]]], pd.DataFrame, int]:
    """Names each move's partition and writes Kafka's reassignment entries per cluster. The partitions dataset is
    joined on the moves' partition keys; a move is kept when exactly one partition with its key lists its broker.
    Others are dropped and counted: the snapshot disagrees with itself (Metadata does not list the replica), or,
    far less likely, two partitions of a broker share a key."""
    from pyspark.sql import functions as F

    columns = [*plan_layout.MOVES, "pkey"]
    if moves.empty:
        return {}, pd.DataFrame({c: [] for c in columns}).astype(
            {"broker": "int32", "partition": "int32", "size_bytes": "int64", "step": "int32", "pkey": "int64"}), 0
    local = partitions.local(snap)
    if local is not None:
        listed = local.with_keys(moves["cluster"], moves["pkey"])
    else:
        wanted = session.createDataFrame(moves[["cluster", "pkey"]].drop_duplicates())
        listed = (snap.partitions.select("cluster", "topic", "partition", "replicas",
                                         F.xxhash64("topic", "partition").alias("pkey"))
                  .join(F.broadcast(wanted), ["cluster", "pkey"]).toPandas())
    both = moves.reset_index(names="move").merge(listed, on=["cluster", "pkey"])
    holds = np.array([r is not None and int(b) in list(r)
                      for b, r in zip(both["broker"], both["replicas"], strict=True)], dtype=bool)
    both = both[holds]
    unique = both.groupby("move")["move"].transform("size") == 1
    kept = both[unique].sort_values("move").reset_index(drop=True)
    kept = kept.astype({"broker": "int32", "partition": "int32", "size_bytes": "int64", "step": "int32"})
    out: dict[str, list[dict[str, Any]]] = {}
    order = kept.sort_values(["cluster", "topic", "partition"], kind="mergesort")
    entry: dict[str, Any] | None = None
    for cluster, topic, part, broker, to_dir, replicas in zip(
            order["cluster"], order["topic"], order["partition"], order["broker"], order["to_dir"],
            order["replicas"], strict=True):
        if entry is None or (entry["cluster"], entry["topic"], entry["partition"]) != (cluster, topic, part):
            if entry is not None:
                out.setdefault(entry.pop("cluster"), []).append(_entry(entry))
            entry = {"cluster": str(cluster), "topic": str(topic), "partition": int(part),
                     "replicas": [int(b) for b in replicas], "dest": {}}
        entry["dest"][int(broker)] = str(to_dir)
    if entry is not None:
        out.setdefault(entry.pop("cluster"), []).append(_entry(entry))
    return out, kept[columns], len(moves) - len(kept)


def _entry(e: dict[str, Any]) -> dict[str, Any]:
    """Kafka's reassignment entry: replicas exactly as Metadata lists them, a dir for the brokers that move the
    partition, "any" for the others."""
    return {"topic": e["topic"], "partition": e["partition"], "replicas": e["replicas"],
            "log_dirs": [e["dest"].get(b, ANY_LOG_DIR) for b in e["replicas"]]}


def summary(result: PlanResult, throttle: int) -> dict[str, Any]:
    d, b, m = result.disks, result.brokers, result.moves

    def spread(frame: pd.DataFrame, column: str) -> dict[str, Any]:
        online = frame[frame["online"] & (frame[column] > 0)]
        ratio = online.groupby(["cluster", "broker"])[column].agg(lambda s: s.max() / s.mean())
        return {"max_mean_ratio_median": _num(ratio.median()), "max_mean_ratio_worst": _num(ratio.max())}

    per_broker = m.groupby(["cluster", "broker"])["size_bytes"].sum()
    lb = int(b["lower_bound"].sum()) if len(b) else 0
    moved = int(m["size_bytes"].sum())
    clusters = []
    for cluster, g in m.groupby("cluster"):
        clusters.append({"cluster": str(cluster), "moves": len(g), "bytes": int(g["size_bytes"].sum()),
                         "brokers": int(g["broker"].nunique()),
                         "file": plan_layout.reassignment_file(str(cluster))})
    return {
        "snapshot": str(result.snapshot),
        "thresholds": asdict(result.rules.thresholds),
        "rules": {"headroom": result.rules.headroom, "max_bytes_per_broker": result.rules.max_bytes,
                  "exclude_topics": result.rules.exclude_topics.pattern if result.rules.exclude_topics else None},
        "moves": len(m),
        "bytes_to_move": moved,
        "lower_bound_bytes": lb,
        "moved_over_lower_bound": _num(moved / lb) if lb else None,
        "brokers_planned": int((b["status"] == "planned").sum()) if len(b) else 0,
        "brokers_capacity_unknown": int((b["status"] == "capacity unknown").sum()) if len(b) else 0,
        "brokers_left_out_of_band": int(((b["reason"] != "") & b["status"].isin(["planned", "unchanged"])).sum())
        if len(b) else 0,
        "moves_dropped_not_in_metadata": result.dropped,
        "disks_out_of_band_before": int(d["out_of_band"].sum()),
        "disks_out_of_band_after": int(d["out_of_band_after"].sum()),
        "spread_before": spread(d, "load"),
        "spread_after": spread(d, "load_after"),
        "throttle_bytes_per_second": throttle,
        # Each broker moves at its own throttle, all brokers at once: the busiest broker sets the time.
        "seconds_at_throttle": _num(per_broker.max() / throttle) if len(per_broker) else 0.0,
        "clusters": clusters,
        "notes": [f"{r.cluster} broker {r.broker}: {r.status}{': ' + r.reason if r.reason else ''}"
                  for r in b.itertuples() if r.reason][:1000],
    }


def _num(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def write(result: PlanResult, out: Path, throttle: int) -> None:
    try:
        (out / plan_layout.MOVES_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AuditError(f"cannot create {out}: {e.strerror or e}") from None
    for cluster, entries in result.reassignments.items():
        text = json.dumps({"version": 1, "partitions": entries}, separators=(",", ":"))
        _write_text(out / plan_layout.reassignment_file(cluster), text + "\n")
    plan_layout.write_frame(result.moves, plan_layout.MOVES, out / plan_layout.MOVES_DIR / "part-00000.parquet")
    plan_layout.write_frame(result.disks, plan_layout.DISKS, out / plan_layout.DISKS_FILE)
    plan_layout.write_frame(result.brokers, plan_layout.BROKERS, out / plan_layout.BROKERS_FILE)
    # summary.json last: a plan directory with a summary is complete.
    _write_text(out / plan_layout.SUMMARY_FILE, json.dumps(summary(result, throttle), indent=1) + "\n")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # a reader sees the whole file or none


def print_summary(result: PlanResult, out: Path, throttle: int) -> None:
    s = summary(result, throttle)
    ratio = "" if s["moved_over_lower_bound"] is None else f" ({s['moved_over_lower_bound']:.3f} x the lower bound)"
    print(f"Plan for {result.snapshot}: {s['moves']} moves on {s['brokers_planned']} brokers, "
          f"{format_bytes(s['bytes_to_move'])} to move{ratio}")
    print(f"disks out of band: {s['disks_out_of_band_before']} -> {s['disks_out_of_band_after']}; "
          f"worst max/mean {s['spread_before']['max_mean_ratio_worst'] or 0:.2f} -> "
          f"{s['spread_after']['max_mean_ratio_worst'] or 0:.2f}; "
          f"{s['seconds_at_throttle'] / 60:.1f} min at {format_bytes(throttle)}/s per broker")
    if s["brokers_capacity_unknown"]:
        print(f"not planned: {s['brokers_capacity_unknown']} brokers whose disk sizes are unknown")
    if result.dropped:
        print(f"dropped {result.dropped} moves whose partition the snapshot's Metadata does not list on that broker")
    for c in s["clusters"]:
        print(f"  {out / c['file']}: {c['moves']} moves, {format_bytes(c['bytes'])}")
    print(f"Plan written to {out}")
