"""plan: log-dir moves for every broker of a snapshot that needs them, computed per broker in parallel on Spark.

1. One Spark aggregation gives every disk's usage (as audit does); the brokers with a disk out of band, over the
   capacity threshold or to drain are the ones planned.
2. Only the replicas that can matter are shuffled: those of these brokers' dirs that may give (not below their band)
   and the future copies (a partition being moved must not be moved again), tagged by a broadcast join with a
   broker key and dir index and hash-partitioned by broker key. Each partition's rows are grouped by broker with one
   numpy sort and the planner's array core (mover/audit/planner.py) runs once per broker (mapInPandas); the disks
   (one row each) travel in the function's closure, not through the shuffle.
3. The moves are joined with the partitions dataset to write Kafka's reassignment JSON: replicas exactly as Metadata
   lists them, a log dir for the brokers that move the partition, "any" for the others.

Output in PLANDIR: `<cluster>.reassignment.json` per cluster (for `mover-log-dirs --execute` and
kafka-reassign-partitions.sh), `moves/` (Parquet: cluster, broker, topic, partition, from_dir, to_dir, size_bytes,
step), `disks.parquet` (every disk before and after), `brokers.parquet` and `summary.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import audit, balance, planner, snapshot, spark
from mover.cli.common import CliError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_THROTTLE = 100 * 1024 * 1024  # bytes/s per broker, for the time estimate
ANY_LOG_DIR = "any"  # mover/cli/assignment.py's, spelled as Kafka's tool spells it

UDF_SCHEMA = ("kind string, cluster string, broker int, log_dir string, topic string, partition int, from_dir string, "
              "to_dir string, size_bytes long, step int, online boolean, drained boolean, total_bytes double, "
              "used_before long, used_after long, band_low double, band_high double, capacity_bytes double, "
              "lower_bound long, status string, reason string")
UDF_COLUMNS = [c.strip().split(" ")[0] for c in UDF_SCHEMA.split(",")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--snapshot", required=True, metavar="DIR")
    parser.add_argument("--out", required=True, metavar="PLANDIR", help="a new or empty directory for the plan")
    parser.add_argument("--drain", action="append", default=[], type=_drain, metavar="[CLUSTER/]BROKER:DIR",
                        help="empty this log dir (repeatable); refused if its replicas cannot fit elsewhere")
    parser.add_argument("--exclude-topics", type=_regex, metavar="REGEX", help="never move these topics' replicas")
    parser.add_argument("--max-bytes-per-broker", type=spark.positive_int, metavar="BYTES",
                        help="move at most this many bytes on any broker")
    parser.add_argument("--headroom", type=_headroom, default=planner.Rules().headroom, metavar="F",
                        help="a move must leave this fraction of its destination usable (default 0.05)")
    parser.add_argument("--throttle", type=spark.positive_int, default=DEFAULT_THROTTLE, metavar="BYTES_PER_S",
                        help=f"per-broker move throttle for the time estimate (default {DEFAULT_THROTTLE})")
    balance.add_arguments(parser)
    spark.add_arguments(parser)


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
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CliError(f"{out} exists and is not an empty directory: a plan is written once")
    rules = planner.Rules(balance.from_args(args), args.headroom, args.max_bytes_per_broker, args.exclude_topics)
    session = spark.from_args(args)
    result = compute(session, snapshot.read(session, path), rules, args.drain)
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
    """{(cluster, broker): dirs to drain}; an unknown broker or dir, or an ambiguous broker id, is a CliError."""
    resolved: dict[tuple[str, int], set[str]] = {}
    for cluster, broker, log_dir in drains:
        rows = disks[disks["broker"] == broker]
        if cluster is not None:
            rows = rows[rows["cluster"] == cluster]
        clusters = sorted(rows["cluster"].unique())
        name = f"{cluster + '/' if cluster else ''}{broker}:{log_dir}"
        if not clusters:
            raise CliError(f"--drain {name}: no broker {broker}" + (f" in cluster {cluster}" if cluster else ""))
        if len(clusters) > 1:
            raise CliError(f"--drain {name}: broker {broker} is in clusters {', '.join(clusters)}; "
                           f"say which as CLUSTER/{broker}:{log_dir}")
        if log_dir not in set(rows["log_dir"]):
            raise CliError(f"--drain {name}: broker {broker} of {clusters[0]} has no log dir {log_dir}")
        if not rows.loc[rows["log_dir"] == log_dir, "online"].all():
            raise CliError(f"--drain {name}: {log_dir} is offline: its replicas cannot be read to move them")
        resolved.setdefault((clusters[0], broker), set()).add(log_dir)
    return resolved


# Per broker: (cluster, broker, dir names, online, total, usable, used), keyed by a small integer that replaces the
# (cluster, broker) strings in the shuffle.
DiskArrays = tuple[str, int, list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _disk_arrays(disks: pd.DataFrame) -> tuple[dict[int, DiskArrays], pd.DataFrame]:
    """The planned brokers' dirs as the planner's arrays, by broker key, and a table (cluster, broker, log_dir) ->
    (bkey, dir index) for the join that tags the replicas. Shipped to the UDF in its closure (one row per disk:
    small), so only the replicas are shuffled."""
    out: dict[int, DiskArrays] = {}
    tags = []
    for bkey, ((cluster, broker), g) in enumerate(disks.groupby(["cluster", "broker"], sort=False)):
        out[bkey] = (str(cluster), int(broker), g["log_dir"].tolist(), g["error"].isna().to_numpy(),
                     g["total_bytes"].to_numpy(dtype="float64"), g["usable_bytes"].to_numpy(dtype="float64"),
                     g["used_bytes"].fillna(0).to_numpy(dtype="int64"))
        tags.append(pd.DataFrame({"cluster": str(cluster), "broker": int(broker), "log_dir": g["log_dir"].to_numpy(),
                                  "bkey": bkey, "dir": np.arange(len(g))}))
    tag = pd.concat(tags, ignore_index=True) if tags else pd.DataFrame(
        columns=["cluster", "broker", "log_dir", "bkey", "dir"])
    return out, tag


def _broker_rows(cluster: str, broker: int, names: list[str], online: np.ndarray, drained: np.ndarray,
                 total: np.ndarray, used: np.ndarray, p: planner.ArrayPlan, topics: np.ndarray,
                 partitions: np.ndarray) -> dict[str, np.ndarray]:
    """One broker's output rows, columns built whole: its moves, then one row per dir, then the broker's row."""
    m, d = len(p.rows), len(names)
    rows = m + d + 1
    none = np.full(rows, None, dtype=object)
    names_arr = np.array(names, dtype=object)

    def col(moves: Any, dirs: Any, last: Any) -> np.ndarray:
        out = none.copy()
        if moves is not None:
            out[:m] = moves
        if dirs is not None:
            out[m:m + d] = dirs
        out[rows - 1] = last
        return out

    return {
        "kind": col("move", "disk", "broker"),
        "cluster": np.full(rows, cluster, dtype=object),
        "broker": np.full(rows, broker, dtype="int32"),
        "log_dir": col(None, names_arr, None),
        "topic": col(topics if m else None, None, None),
        "partition": col(partitions if m else None, None, None),
        "from_dir": col(names_arr[p.src] if m else None, None, None),
        "to_dir": col(names_arr[p.dst] if m else None, None, None),
        "size_bytes": col(np.array(p.size, dtype=object) if m else None, None, sum(p.size)),
        "step": col(np.arange(1, m + 1) if m else None, None, None),
        "online": col(None, online, None),
        "drained": col(None, drained, None),
        "total_bytes": col(None, total, None),
        "used_before": col(None, used, None),
        "used_after": col(None, p.used_after.astype("int64"), None),
        "band_low": col(None, p.low, None),
        "band_high": col(None, p.high, None),
        "capacity_bytes": col(None, p.cap, None),
        "lower_bound": col(None, None, p.lower_bound),
        "status": col(None, None, p.status),
        "reason": col(None, None, p.reason),
    }


def _udf(rules: planner.Rules, disks: dict[int, DiskArrays],
         drains: dict[tuple[str, int], set[str]]):  # noqa: ANN202 (a mapInPandas function)
    """Plans every broker of one Spark partition. The rows arrive hash-partitioned by broker key, unsorted: they are
    grouped here with one numpy sort (Spark's own grouping would sort them all in the JVM first, and hand each
    broker over as a separate pandas frame)."""

    def plan_partition(batches: Any) -> Any:
        frames = [b for b in batches if len(b)]
        if not frames:
            return
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        bkeys = df["bkey"].to_numpy(dtype="int64")
        order = np.argsort(bkeys, kind="stable")
        sorted_keys = bkeys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        ends = np.r_[starts[1:], len(order)]
        topic_codes, topics = pd.factorize(df["topic"])
        topics = np.asarray(topics, dtype=object)
        partitions = df["partition"].to_numpy(dtype="int64")
        keys = (topic_codes.astype("int64") << 32) | partitions
        blocked = np.zeros(len(df), dtype=bool)
        if rules.exclude_topics is not None and len(topics):
            bad = np.array([rules.exclude_topics.search(str(tp)) is not None for tp in topics], dtype=bool)
            blocked = bad[topic_codes]
        dirs = df["dir"].to_numpy(dtype="int64")
        sizes = df["size_bytes"].to_numpy(dtype="int64")
        futures = df["is_future"].to_numpy(dtype=bool)
        parts: list[dict[str, np.ndarray]] = []
        for start, end in zip(starts, ends, strict=True):
            rows = order[start:end]
            cluster, broker, names, online, total, usable, used = disks[int(sorted_keys[start])]
            drain = drains.get((cluster, broker), set())
            drained = np.array([n in drain for n in names], dtype=bool)
            p = planner.plan_arrays(names, online, total, usable, used, drained, dirs[rows], keys[rows],
                                    sizes[rows], futures[rows], blocked[rows], rules)
            moved = rows[np.asarray(p.rows, dtype="int64")]
            parts.append(_broker_rows(cluster, broker, names, online, drained, total, used, p,
                                      topics[topic_codes[moved]], partitions[moved]))
        yield pd.DataFrame({c: np.concatenate([part[c] for part in parts]) for c in UDF_COLUMNS})

    return plan_partition


def compute(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
            drains: list[tuple[str | None, int, str]] | None = None) -> PlanResult:
    from pyspark.sql import functions as F

    keys = ["cluster", "broker"]
    disks = balance.assess_disks(audit.disk_usage(snap), rules.thresholds)
    drain_dirs = _resolve_drains(disks, drains or [])
    drained = pd.Series([dr in drain_dirs.get((c, b), set()) for c, b, dr in
                         zip(disks["cluster"], disks["broker"], disks["log_dir"], strict=True)], dtype=bool)
    flagged = disks.groupby(keys)[["out_of_band", "over_capacity"]].transform("any").any(axis=1) | \
        drained.groupby([disks["cluster"], disks["broker"]]).transform("any")
    todo = disks[flagged & disks["online"]].copy()
    # A dir below its band never gives: its replicas stay on the driver's side of the shuffle (5% slack, because
    # moves already running shift the usage the planner starts from).
    todo["source"] = (todo["load"] >= todo["band_low"] * 0.95) | drained[todo.index]
    planned = pd.DataFrame(columns=UDF_COLUMNS)
    if len(todo):
        arrays, tag = _disk_arrays(disks[flagged])
        # Typed as the replicas' columns (broker int), so the join needs no cast on the big side.
        tag = tag.merge(todo[["cluster", "broker", "log_dir", "source"]], on=["cluster", "broker", "log_dir"])
        flags = session.createDataFrame(tag.astype({"broker": "int32", "bkey": "int64", "dir": "int32"}))
        replicas = (snap.replicas.join(F.broadcast(flags), ["cluster", "broker", "log_dir"])
                    .where(F.col("source") | F.col("is_future"))
                    .select("bkey", "dir", "topic", "partition", "size_bytes", "is_future"))
        partitions = int(session.conf.get("spark.sql.shuffle.partitions") or spark.DEFAULT_SHUFFLE_PARTITIONS)
        planned = (replicas.repartition(partitions, "bkey")
                   .mapInPandas(_udf(rules, arrays, drain_dirs), UDF_SCHEMA).toPandas())
    brokers = planned[planned["kind"] == "broker"][["cluster", "broker", "lower_bound", "size_bytes", "status",
                                                    "reason"]].rename(columns={"size_bytes": "moved_bytes"})
    refused = brokers[brokers["status"] == "refused"]
    if len(refused):
        first = refused.iloc[0]
        more = f" (and {len(refused) - 1} more brokers)" if len(refused) > 1 else ""
        raise CliError(f"cannot drain on broker {first['broker']} of {first['cluster']}: {first['reason']}{more}")
    moves = planned[planned["kind"] == "move"][["cluster", "broker", "topic", "partition", "from_dir", "to_dir",
                                                "size_bytes", "step"]].astype(
        {"broker": "int32", "partition": "int32", "size_bytes": "int64", "step": "int32"}).reset_index(drop=True)
    after = planned[planned["kind"] == "disk"][["cluster", "broker", "log_dir", "used_after", "drained"]]
    reassignments, kept, dropped = _reassignments(session, snap.partitions, moves)
    if dropped:
        # The prediction follows the moves that remain: take the dropped ones back out of it.
        after = _undo(after, moves, kept)
    return PlanResult(snap.path, rules, kept, _disks_after(disks, after, rules.thresholds),
                      brokers.reset_index(drop=True), reassignments, dropped)


def _undo(after: pd.DataFrame, moves: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    keys = ["cluster", "broker", "topic", "partition"]
    gone = moves.merge(kept[keys], on=keys, how="left", indicator=True)
    gone = gone[gone["_merge"] == "left_only"]
    delta = pd.concat([gone[["cluster", "broker", "from_dir", "size_bytes"]].rename(columns={"from_dir": "log_dir"}),
                       gone[["cluster", "broker", "to_dir", "size_bytes"]].rename(columns={"to_dir": "log_dir"})
                       .assign(size_bytes=lambda f: -f["size_bytes"])])
    delta = delta.groupby(["cluster", "broker", "log_dir"], as_index=False)["size_bytes"].sum()
    after = after.merge(delta, on=["cluster", "broker", "log_dir"], how="left")
    after["used_after"] = after["used_after"] + after["size_bytes"].fillna(0)
    return after.drop(columns="size_bytes")


def _disks_after(disks: pd.DataFrame, after: pd.DataFrame, t: balance.Thresholds) -> pd.DataFrame:
    """Every disk with its usage before and as predicted after the plan (and the moves already running), judged
    again by the same rules; a drained disk leaves its broker's average."""
    keys = ["cluster", "broker", "log_dir"]
    d = disks[[*keys, "error", "online", "total_bytes", "usable_bytes", "used_bytes", "basis", "avg", "percent",
               "load", "band_low", "band_high", "out_of_band", "over_capacity"]]
    d = d.merge(after[[*keys, "used_after", "drained"]].astype({"broker": "int64"}), on=keys, how="left")
    d["used_after"] = d["used_after"].fillna(d["used_bytes"]).astype("int64")
    d["drained"] = d["drained"].fillna(False).astype(bool)
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


def _reassignments(session: SparkSession, partitions: DataFrame, moves: pd.DataFrame
                   ) -> tuple[dict[str, list[dict[str, Any]]], pd.DataFrame, int]:
    """Kafka's reassignment entries per cluster; moves whose partition Metadata does not list with that broker
    are dropped (the snapshot disagrees with itself) and counted."""
    from pyspark.sql import functions as F

    if moves.empty:
        return {}, moves, 0
    keys = moves[["cluster", "topic", "partition"]].drop_duplicates()
    wanted = session.createDataFrame(keys)
    listed = partitions.join(F.broadcast(wanted), ["cluster", "topic", "partition"]).toPandas()
    replicas_of = {(c, t, int(p)): [int(b) for b in r] for c, t, p, r in
                   zip(listed["cluster"], listed["topic"], listed["partition"], listed["replicas"], strict=True)}
    ok = [replicas_of.get((c, t, int(p))) is not None and int(b) in replicas_of[(c, t, int(p))]
          for c, t, p, b in zip(moves["cluster"], moves["topic"], moves["partition"], moves["broker"], strict=True)]
    kept = moves[ok].reset_index(drop=True)
    out: dict[str, list[dict[str, Any]]] = {}
    grouped = kept.groupby(["cluster", "topic", "partition"], sort=True)
    for (cluster, topic, part), g in grouped:
        replicas = replicas_of[(cluster, topic, int(part))]
        dest = dict(zip(g["broker"].astype(int), g["to_dir"], strict=True))
        out.setdefault(str(cluster), []).append({
            "topic": str(topic), "partition": int(part), "replicas": replicas,
            "log_dirs": [dest.get(b, ANY_LOG_DIR) for b in replicas]})
    return out, kept, len(moves) - len(kept)


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
                         "file": f"{cluster}.reassignment.json"})
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
        (out / "moves").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"cannot create {out}: {e.strerror or e}") from None
    for cluster, entries in result.reassignments.items():
        text = json.dumps({"version": 1, "partitions": entries}, separators=(",", ":"))
        _write_text(out / f"{cluster}.reassignment.json", text + "\n")
    result.moves.to_parquet(out / "moves" / "part-00000.parquet", index=False)
    result.disks.to_parquet(out / "disks.parquet", index=False)
    result.brokers.to_parquet(out / "brokers.parquet", index=False)
    # summary.json last: a plan directory with a summary is complete.
    _write_text(out / "summary.json", json.dumps(summary(result, throttle), indent=1) + "\n")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # a reader sees the whole file or none


def print_summary(result: PlanResult, out: Path, throttle: int) -> None:
    s = summary(result, throttle)
    ratio = "" if s["moved_over_lower_bound"] is None else f" ({s['moved_over_lower_bound']:.3f} x the lower bound)"
    print(f"Plan for {result.snapshot}: {s['moves']} moves on {s['brokers_planned']} brokers, "
          f"{audit._size(s['bytes_to_move'])} to move{ratio}")
    print(f"disks out of band: {s['disks_out_of_band_before']} -> {s['disks_out_of_band_after']}; "
          f"worst max/mean {s['spread_before']['max_mean_ratio_worst'] or 0:.2f} -> "
          f"{s['spread_after']['max_mean_ratio_worst'] or 0:.2f}; "
          f"{s['seconds_at_throttle'] / 60:.1f} min at {audit._size(throttle)}/s per broker")
    if s["brokers_capacity_unknown"]:
        print(f"not planned: {s['brokers_capacity_unknown']} brokers whose disk sizes are unknown")
    if result.dropped:
        print(f"dropped {result.dropped} moves whose partition the snapshot's Metadata does not list on that broker")
    for c in s["clusters"]:
        print(f"  {out / c['file']}: {c['moves']} moves, {audit._size(c['bytes'])}")
    print(f"Plan written to {out}")
