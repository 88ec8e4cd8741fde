"""Moves between brokers for the whole fleet: what plan/outputs.py calls once the per-broker plans are in. It finds
the clusters with a broker above its band (over_in_fleet), hands each cluster's replicas and Metadata's replica lists
to between.py's planner, and numbers the moves after each source broker's own steps (plan_fleet). Split from
between.py, which plans one cluster; this module only groups the fleet's rows by cluster and gathers the answers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from mover.audit import planner
from mover.audit.plan.between import (
    BetweenPlan,
    ClusterDirs,
    Holders,
    as_text,
    candidates,
    groups,
    over_brokers,
    plan_between,
)


def over_in_fleet(dirs: pd.DataFrame, drained: np.ndarray, used_before: np.ndarray, used_after: np.ndarray,
                  moves: pd.DataFrame, t: planner.Thresholds) -> dict[str, tuple[ClusterDirs, list[int]]]:
    """Per cluster with a broker above its band: its ClusterDirs and those brokers. `dirs`: the listed dirs
    (encoding.listed_dirs: cluster, broker, log_dir, online, cordoned, total_bytes, usable_bytes), `used_before` and
    `used_after` in the same order; `moves`: the per-broker plans' moves (cluster, broker, to_dir, size_bytes)."""
    inbound_of = (moves.groupby(["cluster", "broker", "to_dir"])["size_bytes"].sum().to_dict() if len(moves)
                  else {})
    moved_of = moves.groupby(["cluster", "broker"])["size_bytes"].sum().to_dict() if len(moves) else {}
    found = {}
    cluster = dirs["cluster"].to_numpy(dtype=object)
    for name in pd.unique(cluster):
        at = np.flatnonzero(cluster == name)
        part = dirs.iloc[at]
        broker = part["broker"].to_numpy(dtype="int64")
        names = part["log_dir"].astype(str).tolist()
        receives = part["online"].to_numpy(dtype=bool) & ~drained[at] & ~part["cordoned"].to_numpy(dtype=bool)
        cd = ClusterDirs(broker, names, part["total_bytes"].to_numpy(dtype="float64", na_value=np.nan),
                         part["usable_bytes"].to_numpy(dtype="float64", na_value=np.nan),
                         used_before[at].astype("int64"), used_after[at].astype("int64"),
                         np.array([int(inbound_of.get((name, int(b), n), 0)) for b, n in zip(broker, names,
                                                                                            strict=True)]),
                         receives, receives.copy(),
                         {int(b): int(v) for (c, b), v in moved_of.items() if c == name},
                         part["online"].to_numpy(dtype=bool), drained[at], part["cordoned"].to_numpy(dtype=bool))
        over = over_brokers(cd, t)
        if over:
            found[str(name)] = (cd, over)
    return found


def _by_cluster(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`frame`'s rows per cluster name, each in the frame's order with its index (as a mask would select them)."""
    return groups(frame, "cluster")


def holders_by_cluster(listed: pd.DataFrame) -> Callable[[str], Holders]:
    """plan_fleet's holders from a frame of (cluster, pkey, replicas): Metadata's lists as Spark's join gives them."""
    of = _by_cluster(listed)

    def holders(name: str) -> Holders:
        mine = of.get(name, listed.iloc[:0])
        return Holders(mine["pkey"].astype("int64").to_numpy(), mine["replicas"].tolist())

    return holders


def plan_fleet(found: dict[str, tuple[ClusterDirs, list[int]]], replicas: pd.DataFrame,
               holders: Callable[[str], Holders], moves: pd.DataFrame, rules: planner.Rules
               ) -> tuple[pd.DataFrame, dict[str, BetweenPlan]]:
    """The moves between brokers of every cluster in `found` (over_in_fleet), as rows of the plan (cluster, broker,
    pkey, from_dir, to_dir, size_bytes, step, to_broker, topic, partition), steps after each source broker's own.
    `replicas`: every copy of the source brokers (cluster, broker, log_dir, topic, partition, size_bytes as planned,
    is_future, key; a move's size is `size_now` where given); `holders`: a cluster's Holders by its name (Metadata's
    replica lists of at least the keys of its rows in `replicas`)."""
    rows, plans = [], {}
    # Each cluster's rows, grouped once: a mask per cluster over the fleet's rows cost seconds with 50 clusters.
    moves_of, replicas_of = _by_cluster(moves), _by_cluster(replicas)
    for name, (cd, over) in found.items():
        mine = moves_of.get(name, moves.iloc[:0])
        moved = set(zip(mine["broker"].astype("int64").tolist(), mine["pkey"].astype("int64").tolist(), strict=True))
        steps = mine.groupby("broker")["step"].max().to_dict() if len(mine) else {}
        frame, cands = candidates(replicas_of.get(name, replicas.iloc[:0]), cd, over, moved, rules.exclude_topics,
                                  holders(name))
        bp = plan_between(cd, cands, rules)
        plans[name] = bp
        if not bp.rows:
            continue
        src = cd.broker[bp.src]
        numbered = []
        for b in src.tolist():
            steps[b] = steps.get(b, 0) + 1
            numbered.append(steps[b])
        picked = frame.iloc[bp.rows]
        rows.append(pd.DataFrame({
            "cluster": name, "broker": src.astype("int32"), "pkey": picked["key"].to_numpy(dtype="int64"),
            "from_dir": [cd.names[i] for i in bp.src], "to_dir": [cd.names[i] for i in bp.dst],
            "size_bytes": (picked["size_now"].to_numpy(dtype="int64") if "size_now" in picked
                           else np.asarray(bp.size, dtype="int64")),
            "step": np.asarray(numbered, dtype="int32"), "to_broker": cd.broker[bp.dst].astype("int32"),
            "topic": np.array([as_text(t) for t in picked["topic"]], dtype=object),
            "partition": picked["partition"].to_numpy(dtype="int32")}))
    columns = ["cluster", "broker", "pkey", "from_dir", "to_dir", "size_bytes", "step", "to_broker", "topic",
               "partition"]
    return (pd.concat(rows, ignore_index=True) if rows else pd.DataFrame({c: [] for c in columns})), plans
