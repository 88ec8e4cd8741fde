"""The plan's outputs: the planned rows of the pass (replica_pass.py) made into the brokers, the moves named by
partition and every disk before and after (finish, a PlanResult), the summary, and the files written to PLANDIR as
mover/audit/plan_layout.py declares them: `<cluster>.reassignment.json` per cluster (for `mover-log-dirs --execute`
and kafka-reassign-partitions.sh), `moves/`, `disks.parquet` (every disk before and after), `brokers.parquet` and
`summary.json`. The moves' partitions are named by a join with the partitions dataset, which also gives Kafka's
reassignment JSON: replicas exactly as Metadata lists them, a log dir for the brokers that move the partition, "any"
for the others."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.admin.assignment import ANY_LOG_DIR
from mover.admin.common import format_bytes
from mover.audit import balance, columns, partitions, plan_layout, planner, snapshot, spark, spark_hash
from mover.audit.errors import AuditError, make_dir
from mover.audit.plan import between, between_fleet, horizon
from mover.audit.plan.encoding import DIR_KEYS, KEPT_REPLICAS
from mover.audit.plan.steps import KIND_BROKER, KIND_DISK, KIND_MOVE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mover.audit.plan.replica_pass import PlanPass


class PlanResult:
    def __init__(self, snapshot_path: Path, rules: planner.Rules, moves: pd.DataFrame, disks: pd.DataFrame,
                 brokers: pd.DataFrame, reassignments: dict[str, list[dict[str, Any]]], dropped: int,
                 horizon_hours: float | None = None) -> None:
        self.snapshot = snapshot_path
        self.rules = rules
        self.moves = moves
        self.disks = disks
        self.brokers = brokers
        self.reassignments = reassignments
        self.dropped = dropped
        # plan --horizon: planned for the disks as the forecast gives them then (disks.parquet's bytes are then's).
        self.horizon_hours = horizon_hours


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
    moves["to_broker"] = pd.Series(pd.NA, index=moves.index, dtype="Int32")
    found = (between_fleet.over_in_fleet(dirs, drained, used_before, used_after, moves, t) if rules.between_brokers
             else {})
    if found:
        moves, brokers = _between_brokers(session, snap, rules, found, dirs, used_after, moves, brokers, p.growth)
        moves = moves.sort_values(["cluster", "broker", "step"], kind="mergesort").reset_index(drop=True)
    snap.local.pop(KEPT_REPLICAS, None)  # the scan's replicas, kept for the moves between brokers only
    usage = dirs[[*DIR_KEYS, "error", "total_bytes", "usable_bytes"]].assign(used_bytes=used_before)
    disks = balance.assess_disks(usage, t)
    after = dirs[DIR_KEYS].assign(used_after=used_after, drained=drained, cordoned=dirs["cordoned"].to_numpy())

    reassignments, kept, dropped = _reassignments(session, snap, moves)
    if dropped:
        # The prediction follows the moves that remain: take the dropped ones back out of it.
        after = _undo(after, moves, kept)
    kept = kept[[*plan_layout.MOVES, *plan_layout.MOVES_OPTIONAL]]
    return PlanResult(snap.path, rules, kept, _disks_after(disks, after, t), brokers, reassignments, dropped,
                      p.growth.hours if p.growth is not None else None)


def _between_brokers(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules,
                     found: dict[str, tuple[between.ClusterDirs, list[int]]], dirs: pd.DataFrame,
                     used_after: np.ndarray, moves: pd.DataFrame, brokers: pd.DataFrame,
                     growth: horizon.Growth | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The moves between brokers of the clusters with a broker above their band (plan/between.py), added to the
    per-broker plans' moves, and the receiving brokers' own moves planned again with what they receive
    (between.replan_receivers); `used_after` and `brokers` follow them. With `growth`, the replicas are planned at
    the horizon as the pass planned them, and each move's size is its replica's now."""
    pairs = pd.DataFrame([(c, b) for c, (_, over) in found.items() for b in over], columns=["cluster", "broker"])
    # Both reads below (the brokers above the band, then the receivers) take their rows from one read of the
    # replicas, kept for this call only.
    source = _ReplicaSource(session, snap)
    replicas = _with_growth(_replicas_of(source, pairs), growth)
    cross, plans = between_fleet.plan_fleet(found, replicas, _holders(session, snap, replicas), moves, rules)
    cluster = dirs["cluster"].to_numpy(dtype=object)
    brokers = brokers.copy()
    # A broker's rows by (cluster, broker), found once: a mask over every broker per update cost seconds with
    # hundreds of brokers above their band (docs/audit.md#performance).
    rows_of: dict[tuple[str, int], list[int]] = {}
    for i, key in enumerate(zip(brokers["cluster"].tolist(), brokers["broker"].astype("int64").tolist(),
                                strict=True)):
        rows_of.setdefault(key, []).append(i)

    def put(name: str, b: int, column: str, value: Any, add: bool = False) -> None:
        j = brokers.columns.get_loc(column)
        for i in rows_of.get((name, int(b)), []):
            brokers.iat[i, j] = brokers.iat[i, j] + value if add else value

    for name, bp in plans.items():
        used_after[np.flatnonzero(cluster == name)] = bp.used_after
    for (name, b), g in cross.groupby(["cluster", "broker"]):
        put(name, b, "moved_bytes", int(g["size_bytes"].sum()), add=True)
        put(name, b, "status", "planned")
    receivers = pd.DataFrame(sorted(set(zip(cross["cluster"], cross["to_broker"].astype(int), strict=True))),
                             columns=["cluster", "broker"])
    if len(receivers):
        theirs = _with_growth(_replicas_of(source, receivers), growth)
        theirs_of = between.groups(theirs, "cluster")
        # The receivers' new moves, column by column, made one frame at the end (a frame per receiver cost
        # seconds with hundreds of them).
        own: dict[str, list[Any]] = {c: [] for c in ("cluster", "broker", "from_dir", "to_dir", "size_bytes",
                                                      "step", "key")}
        replanned = set()
        for name, bp in plans.items():
            at_cluster = np.flatnonzero(cluster == name)
            cd = found[name][0]
            for r, (kept, at, again) in between.replan_receivers(cd, bp, theirs_of.get(name, theirs.iloc[:0]),
                                                                 rules).items():
                mine = between.own_columns(kept, [cd.names[i] for i in at], again)
                for column, values in mine.items():
                    own[column].append(values)
                own["cluster"].append([name] * len(mine["key"]))
                own["broker"].append(np.full(len(mine["key"]), r, dtype="int32"))
                replanned.add((name, int(r)))
                used_after[at_cluster[at]] = again.used_after
                for column, value in (("lower_bound", again.lower_bound), ("status", again.status),
                                      ("moved_bytes", int(mine["size_bytes"].sum())), ("reason", again.reason)):
                    put(name, r, column, value)
        # The receivers' first moves give way to their new plans (one pass over the moves, not one per receiver).
        mine_before = np.array([(c, int(b)) in replanned for c, b in zip(moves["cluster"].tolist(),
                                                                           moves["broker"].tolist(), strict=True)],
                               dtype=bool)
        if own["key"]:
            count = sum(len(k) for k in own["key"])
            new = pd.DataFrame({
                "cluster": np.array([c for part in own["cluster"] for c in part], dtype=object),
                "broker": np.concatenate(own["broker"]), "pkey": np.concatenate(own["key"]),
                "from_dir": np.array([d for part in own["from_dir"] for d in part], dtype=object),
                "to_dir": np.array([d for part in own["to_dir"] for d in part], dtype=object),
                "size_bytes": np.concatenate(own["size_bytes"]),
                "step": np.concatenate(own["step"]).astype("int32"),
                "to_broker": pd.array([pd.NA] * count, dtype="Int32")})
            moves = pd.concat([moves[~mine_before], new], ignore_index=True)
        else:
            moves = moves[~mine_before].reset_index(drop=True)
    for name, bp in plans.items():
        for b in bp.left:
            for i in rows_of.get((name, int(b)), []):
                j = brokers.columns.get_loc("reason")
                brokers.iat[i, j] = (str(brokers.iat[i, j]) + "; ").lstrip("; ") + \
                    f"above its cluster's band ({bp.reason})"
    if not len(cross):
        return moves, brokers  # (an empty frame's columns would make the keys floats)
    cross = cross.drop(columns=["topic", "partition"]).astype({"to_broker": "Int32"})
    return pd.concat([moves, cross], ignore_index=True), brokers


def _holders(session: SparkSession, snap: snapshot.Snapshot, replicas: pd.DataFrame
             ) -> Callable[[str], between.Holders]:
    """plan_fleet's holders: each cluster's from the partitions the driver read (its keys and Metadata's lists as
    read: a frame of 2M lists cost 3 s at 20M replicas, docs/audit.md#performance), else the partitions of the
    replicas' keys, as Spark's join gives them."""
    local = partitions.local(snap)
    if local is None:
        return between_fleet.holders_by_cluster(_listed(session, snap, replicas[["cluster", "key"]].astype(
            {"cluster": object}).rename(columns={"key": "pkey"}).drop_duplicates()))
    # The rows of the replicas' keys, then a cluster's among them (its keys may be another cluster's too).
    rows = local.rows_with(replicas["key"].unique())
    codes = local.cluster[rows]

    def of(name: str) -> between.Holders:
        mine = rows[codes == local.code_of(name)]
        return between.Holders(local.pkey[mine], local.replica_lists(mine))

    return of


def _with_growth(replicas: pd.DataFrame, growth: horizon.Growth | None) -> pd.DataFrame:
    """`replicas` (with their partition's `key`) at the horizon, as the pass planned them: each current copy's
    `size_bytes` plus its partition's growth, its size now in `size_now`. As they are without `growth`."""
    if growth is None:
        return replicas
    now = replicas["size_bytes"].fillna(0).astype("int64")
    grows = replicas[["cluster", "key"]].merge(
        growth.partitions[["cluster", "pkey", "added"]].drop_duplicates(["cluster", "pkey"], keep=False)
        .rename(columns={"pkey": "key"}), on=["cluster", "key"], how="left")["added"].fillna(0).astype("int64")
    current = ~replicas["is_future"].astype("boolean").fillna(True).to_numpy(dtype=bool)
    return replicas.assign(size_bytes=now + np.where(current, grows.to_numpy(), 0), size_now=now)


_SOURCE_COLUMNS = ["cluster", "broker", "log_dir", "topic", "partition", "size_bytes", "is_future"]


class _ReplicaSource:
    """The snapshot's replicas for _replicas_of: on a local master whose footers vouch for the layout, one pyarrow
    read (the names as dictionaries) that each call takes its brokers' rows from, the scan's own when it kept it
    (encoding.KEPT_REPLICAS); else Spark, per call. Lives for one _between_brokers call: what it holds is the
    snapshot's own rows, read again by the next plan."""

    def __init__(self, session: SparkSession, snap: snapshot.Snapshot) -> None:
        self.session, self.snap = session, snap
        self._table: Any = None
        where = snap.path / "replicas"
        self._local = spark.is_local(session) and snapshot.footer_schema(where, snapshot.REPLICAS) is not None

    def table(self) -> Any:
        """The pyarrow table of _SOURCE_COLUMNS, None where Spark reads them."""
        if self._local and self._table is None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            self._table = self.snap.local.pop(KEPT_REPLICAS, None)
            if self._table is None:
                try:
                    self._table = pq.read_table(self.snap.path / "replicas", columns=_SOURCE_COLUMNS,
                                                read_dictionary=["cluster", "log_dir", "topic"])
                except (pa.ArrowException, OSError, ValueError):
                    self._local = False
        return self._table if self._local else None


def _replicas_of(source: _ReplicaSource, pairs: pd.DataFrame) -> pd.DataFrame:
    """Every copy on the (cluster, broker) `pairs`, with its partition's key (Spark's xxhash64(topic, partition)), in
    one order whoever read them (equal sizes are then chosen alike: the same moves on any master)."""
    frame, ordered = _read_replicas_of(source, pairs)
    frame = frame.astype({"broker": "int64", "partition": "int64"})
    if ordered:
        return frame
    return frame.sort_values(_REPLICA_ORDER, kind="mergesort").reset_index(drop=True)


# pandas' stable sort (nulls last, names by code point) and Arrow's sort_indices (stable, nulls at the end, UTF-8
# bytes: code point order) put the rows in this order alike.
_REPLICA_ORDER = ["cluster", "broker", "log_dir", "topic", "partition", "is_future"]


def _read_replicas_of(source: _ReplicaSource, pairs: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """_replicas_of's rows, taken by the driver from the pyarrow read (no Spark job) and sorted there (True), else
    read by Spark (False: not sorted yet)."""
    table = source.table()
    if table is not None:
        import pyarrow as pa

        # A filter keeps each row group's chunk (a take of a chunked column joins its chunks first).
        taken = table.filter(pa.array(_rows_of_pairs(table, pairs)))
        # Ordered by the names' ranks in their dictionaries, as sort_by orders the strings (columns.sort_order).
        taken = taken.take(pa.array(columns.sort_order(taken, _REPLICA_ORDER)))
        # The names stay dictionaries, pandas categoricals: a frame of Python strings cost 0.4 s per 2M rows, and
        # between.py factorizes them faster (docs/audit.md#performance). Spark's toPandas gives strings: between.py
        # takes either.
        frame = taken.to_pandas()
        if "key" not in frame:  # else the scan's keys
            frame["key"] = spark_hash.partition_keys(taken.column("topic"), taken.column("partition").cast(pa.int32()))
        return frame, True
    from pyspark.sql import functions as F

    wanted = source.session.createDataFrame(pairs.astype({"broker": "int32"}))
    return (source.snap.replicas.join(F.broadcast(wanted), ["cluster", "broker"])
            .select(*_SOURCE_COLUMNS, F.xxhash64("topic", "partition").alias("key")).toPandas()), False


# The largest broker id looked up in a table (a byte per cluster and id up to it); above it, a search.
_TABLE_BROKERS = 1 << 20


def _rows_of_pairs(table: Any, pairs: pd.DataFrame) -> np.ndarray:
    """Whether each row of `table` has a (cluster, broker) of `pairs`, a step at a time (columns.py): each row's
    (cluster code, broker) looked up in a table of them, or packed into one int64 and searched among the pairs'."""
    import pyarrow.compute as pc

    clusters = columns.Names(table.column("cluster"))
    code = {name: i for i, name in enumerate(clusters.dictionary.to_pylist())}
    want = np.unique(np.array([code[c] << 32 | (int(b) & 0xFFFFFFFF) for c, b in zip(
        pairs["cluster"].tolist(), pairs["broker"].tolist(), strict=True) if c in code], dtype=np.int64))
    found = np.zeros(table.num_rows, dtype=bool)
    if not len(want):
        return found
    # Broker ids as Kafka's tools hand them out are small: then a row's (cluster, broker) is looked up in a table of
    # every (cluster code, broker id) up to the largest wanted, one gather per row (a search of the sorted pairs cost
    # 0.4 s per 20M rows, docs/audit.md#performance); else searched.
    width = int((want & 0xFFFFFFFF).max()) + 1
    lookup = None
    if width <= _TABLE_BROKERS:
        lookup = np.zeros((len(clusters.dictionary) + 1) * width + 1, dtype=bool)  # the last: out of range
        lookup[(want >> 32) * width + (want & 0xFFFFFFFF)] = True
    for at, batch in columns.steps(table.select(["cluster", "broker"])):
        cluster, broker = batch.columns
        if lookup is not None:
            b = pc.fill_null(broker, -1).to_numpy(zero_copy_only=False).astype(np.int64)
            slot = clusters.rows(cluster, at) * width + b
            slot[(b < 0) | (b >= width)] = len(lookup) - 1
            found[at:at + batch.num_rows] = lookup[slot]
            continue
        key = clusters.rows(cluster, at) << 32
        key |= pc.fill_null(broker, 0).to_numpy(zero_copy_only=False).astype(np.int64) & 0xFFFFFFFF
        hit = want[np.minimum(np.searchsorted(want, key), len(want) - 1)] == key
        if broker.null_count:  # a null broker is no broker of the pairs
            hit &= ~np.asarray(broker.is_null(), dtype=bool)
        found[at:at + batch.num_rows] = hit
    return found


def _undo(after: pd.DataFrame, moves: pd.DataFrame, kept: pd.DataFrame) -> pd.DataFrame:
    keys = ["cluster", "broker", "pkey"]
    gone = moves.merge(kept[keys], on=keys, how="left", indicator=True)
    gone = gone[gone["_merge"] == "left_only"]
    # A move between brokers lands on its to_broker.
    landing = gone.assign(broker=gone["to_broker"].fillna(gone["broker"]).astype("int64"))
    delta = pd.concat([gone[["cluster", "broker", "from_dir", "size_bytes"]].rename(columns={"from_dir": "log_dir"}),
                       landing[["cluster", "broker", "to_dir", "size_bytes"]].rename(columns={"to_dir": "log_dir"})
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
    columns = [*plan_layout.MOVES, *plan_layout.MOVES_OPTIONAL, "pkey"]
    if moves.empty:
        return {}, pd.DataFrame({c: [] for c in columns}).astype(
            {"broker": "int32", "partition": "int32", "size_bytes": "int64", "step": "int32", "pkey": "int64",
             "to_broker": "Int32"}), 0
    listed = _listed(session, snap, moves[["cluster", "pkey"]])
    both = moves.reset_index(names="move").merge(listed, on=["cluster", "pkey"])
    holds = np.array([r is not None and int(b) in list(r)
                      for b, r in zip(both["broker"], both["replicas"], strict=True)], dtype=bool)
    both = both[holds]
    unique = both.groupby("move")["move"].transform("size") == 1
    kept = both[unique].sort_values("move").reset_index(drop=True)
    kept = kept.astype({"broker": "int32", "partition": "int32", "size_bytes": "int64", "step": "int32",
                        "to_broker": "Int32"})
    out: dict[str, list[dict[str, Any]]] = {}
    order = kept.sort_values(["cluster", "topic", "partition"], kind="mergesort")
    entry: dict[str, Any] | None = None
    for cluster, topic, part, broker, to_dir, to_broker, replicas in zip(
            order["cluster"], order["topic"], order["partition"], order["broker"], order["to_dir"],
            order["to_broker"], order["replicas"], strict=True):
        if entry is None or (entry["cluster"], entry["topic"], entry["partition"]) != (cluster, topic, part):
            if entry is not None:
                out.setdefault(entry.pop("cluster"), []).append(_entry(entry))
            entry = {"cluster": str(cluster), "topic": str(topic), "partition": int(part),
                     "replicas": [int(b) for b in replicas], "dest": {}}
        if pd.notna(to_broker):
            # The replica leaves `broker` for `to_broker`, at the same place in the list, created in `to_dir`.
            entry["replicas"] = [int(to_broker) if b == int(broker) else b for b in entry["replicas"]]
            broker = to_broker
        entry["dest"][int(broker)] = str(to_dir)
    if entry is not None:
        out.setdefault(entry.pop("cluster"), []).append(_entry(entry))
    return out, kept[columns], len(moves) - len(kept)


def _listed(session: SparkSession, snap: snapshot.Snapshot, wanted: pd.DataFrame) -> pd.DataFrame:
    """(cluster, topic, partition, replicas, pkey) of the partitions whose (cluster, pkey) is in `wanted`."""
    from pyspark.sql import functions as F

    local = partitions.local(snap)
    if local is not None:
        return local.with_keys(wanted["cluster"], wanted["pkey"])
    keys = session.createDataFrame(wanted[["cluster", "pkey"]].drop_duplicates())
    return (snap.partitions.select("cluster", "topic", "partition", "replicas",
                                   F.xxhash64("topic", "partition").alias("pkey"))
            .join(F.broadcast(keys), ["cluster", "pkey"]).toPandas())


def _entry(e: dict[str, Any]) -> dict[str, Any]:
    """Kafka's reassignment entry: replicas exactly as Metadata lists them, a dir for the brokers that move the
    partition, "any" for the others."""
    return {"topic": e["topic"], "partition": e["partition"], "replicas": e["replicas"],
            "log_dirs": [e["dest"].get(b, ANY_LOG_DIR) for b in e["replicas"]]}


def summary(result: PlanResult, throttle: int) -> dict[str, Any]:
    d, b, m = result.disks, result.brokers, result.moves

    def spread(frame: pd.DataFrame, column: str) -> dict[str, Any]:
        online = frame[frame["online"] & (frame[column] > 0)]
        # Each broker's max / mean as Series.max() / Series.mean() compute it, a numpy slice per broker: a lambda
        # per group through pandas cost 2 s at 40,000 disks.
        groups = online.groupby(["cluster", "broker"], sort=False).ngroup().to_numpy()
        order = np.argsort(groups, kind="stable")
        values = online[column].to_numpy(dtype="float64")[order]
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        ratio = pd.Series([v.max() / (v.sum(dtype="float64") / len(v)) for v in np.split(values, cuts) if len(v)],
                          dtype="float64")
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
                  "between_brokers": result.rules.between_brokers,
                  "exclude_topics": result.rules.exclude_topics.pattern if result.rules.exclude_topics else None},
        "horizon_hours": result.horizon_hours,
        "moves": len(m),
        "moves_between_brokers": int(m["to_broker"].notna().sum()) if "to_broker" in m else 0,
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
    make_dir(out / plan_layout.MOVES_DIR, out)
    for cluster, entries in result.reassignments.items():
        text = json.dumps({"version": 1, "partitions": entries}, separators=(",", ":"))
        _write_text(out / plan_layout.reassignment_file(cluster), text + "\n")
    plan_layout.write_frame(result.moves, {**plan_layout.MOVES, **plan_layout.MOVES_OPTIONAL},
                            out / plan_layout.MOVES_DIR / "part-00000.parquet")
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
    then = f" at {result.horizon_hours:g} h from it (the forecast's usage)" if result.horizon_hours else ""
    print(f"Plan for {result.snapshot}{then}: {s['moves']} moves on {s['brokers_planned']} brokers, "
          f"{format_bytes(s['bytes_to_move'])} to move{ratio}")
    print(f"disks out of band: {s['disks_out_of_band_before']} -> {s['disks_out_of_band_after']}; "
          f"worst max/mean {s['spread_before']['max_mean_ratio_worst'] or 0:.2f} -> "
          f"{s['spread_after']['max_mean_ratio_worst'] or 0:.2f}; "
          f"{s['seconds_at_throttle'] / 60:.1f} min at {format_bytes(throttle)}/s per broker")
    if s["moves_between_brokers"]:
        print(f"{s['moves_between_brokers']} of the moves go to another broker (brokers above their cluster's band)")
    if s["brokers_capacity_unknown"]:
        print(f"not planned: {s['brokers_capacity_unknown']} brokers whose disk sizes are unknown")
    if result.dropped:
        print(f"dropped {result.dropped} moves whose partition the snapshot's Metadata does not list on that broker")
    for c in s["clusters"]:
        print(f"  {out / c['file']}: {c['moves']} moves, {format_bytes(c['bytes'])}")
    print(f"Plan written to {out}")
