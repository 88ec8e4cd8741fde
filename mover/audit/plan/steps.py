"""One step of the planner's task, and what the task hands back. A step is a few brokers' rows (code, sf, pkey:
encoding.py), sorted by dir: each broker's disks are summed from them and planned (planner.plan_arrays on the
broker's BrokerDirs and BrokerReplicas), and the answers kept as TaskRows, the task's output rows (UDF_SCHEMA, one
of the kinds below each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mover.audit import partitions, planner
from mover.audit.plan import horizon
from mover.audit.plan.encoding import MAX_DIRS, SIZE_SHIFT

# A step's brokers, as (bkey, first row, end row) in the task's sorted order.
Step = list[tuple[int, int, int]]

KIND_MOVE, KIND_DISK, KIND_BROKER, KIND_STRAY = 0, 1, 2, 3
# The audit's sums per dir ride on the disk rows (audit_usage), so `audit --plan` reads the replicas once: used_bytes
# (raw sizes), replicas (current copies), future_replicas, future_bytes, partition_hash (audit._partition_hash).
# A KIND_STRAY row counts, in size_bytes, the replicas of a task in dirs log_dirs does not list.
USAGE_COLUMNS = ["used_bytes", "replicas", "future_replicas", "future_bytes", "partition_hash"]
UDF_SCHEMA = ("kind byte, bkey long, dir int, dst int, pkey long, size_bytes long, step int, used_before long, "
              "used_after long, band_low double, band_high double, capacity_bytes double, lower_bound long, "
              + "".join(f"{c} long, " for c in USAGE_COLUMNS) + "status string, reason string")


class TaskRows:
    """One task's output rows, kept as column arrays per kind and joined once at the end."""

    def __init__(self) -> None:
        self.moves: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.disks: list[tuple[int, np.ndarray, planner.ArrayPlan]] = []
        self.usage: list[list[np.ndarray]] = []  # per disks entry: the USAGE_COLUMNS arrays
        self.brokers: list[tuple[int, planner.ArrayPlan]] = []
        self.strays = 0

    def extend(self, other: TaskRows) -> None:
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
class TaskDirs:
    """What the planner's task knows of the listed dirs (a row each, `dirs`' order): sent once to a helper."""

    names: np.ndarray  # object: the dirs' paths
    online: np.ndarray  # bool
    cordoned: np.ndarray  # bool
    total: np.ndarray  # float64, NaN when unknown
    usable: np.ndarray  # float64, NaN when unknown
    drained: np.ndarray  # bool
    starts: np.ndarray  # a broker key's first row, for every key and one past the last
    rules: planner.Rules
    plan: bool
    growth: horizon.GrowthArrays | None = None  # plan --horizon: what each partition adds by then


def plan_step(known: TaskDirs, step: Step, code: np.ndarray, sf: np.ndarray, pkey: np.ndarray) -> TaskRows:
    """Plans the brokers of one step, given their rows (code, sf, pkey) sorted by dir code."""
    out = TaskRows()
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
        planned = sizes[s:e]
        if known.plan and known.growth is not None:
            # Planned at the horizon: every current copy at its size now and what its partition adds by then.
            planned = planned + np.where(current[s:e], horizon.added(known.growth, bkey, pkey[s:e]), 0)
        used = np.zeros(hi - lo, dtype="int64")
        used[d[heads]] = np.add.reduceat(planned, heads)
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
        p = planner.plan_arrays(
            planner.BrokerDirs(names=known.names[lo:hi].tolist(), online=on, total=known.total[lo:hi],
                               usable=known.usable[lo:hi], used=used, drained=known.drained[lo:hi],
                               cordoned=known.cordoned[lo:hi]),
            planner.BrokerReplicas(dir=d[keep], key=pkey[s:e][keep], size=planned[keep],
                                   future=futures[s:e][keep], blocked=blocked[s:e][keep]),
            known.rules)
        if p.rows:
            moved = np.asarray(p.rows, dtype="int64")
            # A move's size is the replica's now (what execute copies), whatever it was planned at.
            out.moves.append((bkey, np.asarray(p.src), np.asarray(p.dst), pkey[s:e][keep][moved],
                              sizes[s:e][keep][moved]))
        out.disks.append((bkey, used, p))
        out.brokers.append((bkey, p))
    return out

