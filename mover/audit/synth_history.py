"""synth --days: a fleet grown over simulated weeks, one snapshot every few hours, with its truth written beside.

Each partition is written to at its own rate (lognormal across topics) that follows the day (a sine of +-`cycle`),
with bursts (hours of writes at once) and noise in what a snapshot sees. A topic is one of: unlimited (grows all the
time), under retention.bytes (grows to its limit, then holds there with the sawtooth of segment deletions), or under
retention.ms and old (holds what was written in its last retention.ms: a plateau from the start). Early on, some
replicas move to another dir of their broker and some topics are deleted (steps, not growth); brokers miss
snapshots for hours (gaps); a disk that fills goes offline (KAFKA_STORAGE_ERROR), as Kafka takes a full dir offline.
Each disk's size is chosen so that it fills at a known time, spread over and beyond the simulated weeks:
`ROOT/truth.parquet` has, per disk, when it crossed (or, past the end, would cross) 90% and 100%.

The fleets are small (the bench's hundreds of disks): numpy on the driver, pyarrow writes, in the snapshot layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from mover.audit import snapshot
from mover.audit.errors import AuditError

TRUTH_FILE = "truth.parquet"
GIB = float(1 << 30)
OFFLINE_ERROR = "KAFKA_STORAGE_ERROR"


@dataclass(frozen=True)
class GrowthShape:
    clusters: int = 2
    brokers: int = 6
    disks: int = 4
    replicas_per_disk: int = 10
    replication_factor: int = 2
    days: float = 21.0
    every_hours: float = 2.0
    median_rate: float = 40e6  # bytes/hour of a median partition
    cycle: float = 0.5  # the day's swing of the write rate, +-
    bursts: float = 0.01  # chance per partition per snapshot interval of a burst
    noise: float = 0.002  # what a snapshot sees: the size x (1 + this x a normal)
    bytes_retained: float = 0.2  # share of topics under retention.bytes
    time_retained: float = 0.2  # share of topics under retention.ms, at their plateau
    moves: float = 0.05  # share of replicas moved to another dir in the first third
    deleted: float = 0.03  # share of topics deleted in the first third
    outages: float = 0.3  # share of brokers missing from snapshots for 4-16 hours, once
    seed: int = 0


def write_history(shape: GrowthShape, root: Path, end: datetime | None = None) -> list[Path]:
    """Writes the snapshots (oldest first) under `root`, and TRUTH_FILE; returns the snapshot directories."""
    return write_simulation(simulate(shape), root, end)


def write_simulation(sim: Simulation, root: Path, end: datetime | None = None) -> list[Path]:
    """write_history of a simulation already made (a test may shape its sizes first)."""
    end = (end or datetime.now(UTC)).replace(microsecond=0)
    if root.exists() and snapshot.list_snapshots(root):
        raise AuditError(f"{root} has snapshots already: a grown fleet goes into a new root")
    root.mkdir(parents=True, exist_ok=True)
    start = end - timedelta(hours=float(sim.hours[-1]))
    paths = []
    for i, h in enumerate(sim.hours):
        at = start + timedelta(hours=float(h))
        path = root / snapshot.snapshot_name(at)
        _write_snapshot(path, at, *sim.frames(i))
        paths.append(path)
    truth = sim.truth.copy()
    for column in ("at_90", "at_full"):
        truth[column] = [start + timedelta(hours=h) if math.isfinite(h) else pd.NaT for h in truth[column + "_h"]]
    truth.to_parquet(root / TRUTH_FILE, index=False, coerce_timestamps="us")
    return paths


@dataclass
class Simulation:
    hours: np.ndarray  # snapshot times, hours from the start
    replicas: pd.DataFrame  # cluster, broker, k, topic, partition
    sizes: np.ndarray  # [replica, snapshot] bytes; nan where the replica is not on its disk then
    dirs: np.ndarray  # [replica, snapshot] the dir index it is in
    partitions: pd.DataFrame  # cluster, topic, partition, replicas, retention_bytes, retention_ms
    disks: pd.DataFrame  # cluster, broker, k, total_bytes
    down: np.ndarray  # [broker (global), snapshot] missing from the snapshot
    full_at: np.ndarray  # [disk] index of the first snapshot it is offline (len(hours): never)
    truth: pd.DataFrame
    disk_count: int

    def frames(self, i: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        d = self.disks
        gb = d["g"].to_numpy()
        present = ~self.down[gb, i]
        offline = self.full_at <= i
        used = np.zeros(len(d))
        size = self.sizes[:, i]
        on = self.replicas["g"].to_numpy() * self.disk_count + self.dirs[:, i]  # disks are ordered by (g, k)
        keep = ~np.isnan(size) & present[on] & ~offline[on]
        np.add.at(used, on[keep], size[keep])
        log_dirs = pd.DataFrame({
            "cluster": d["cluster"], "broker": d["broker"].astype("int32"), "log_dir": d["log_dir"],
            "error": np.where(offline, OFFLINE_ERROR, None), "total_bytes": d["total_bytes"].astype("int64"),
            "usable_bytes": np.maximum(0, d["total_bytes"] - used).astype("int64")})
        log_dirs.loc[offline, ["total_bytes", "usable_bytes"]] = None
        log_dirs = log_dirs[present].reset_index(drop=True)
        r = self.replicas[keep]
        replicas = pd.DataFrame({
            "cluster": r["cluster"].to_numpy(), "broker": r["broker"].astype("int32").to_numpy(),
            "log_dir": d["log_dir"].to_numpy()[on[keep]], "topic": r["topic"].to_numpy(),
            "partition": r["partition"].astype("int32").to_numpy(), "size_bytes": size[keep].astype("int64"),
            "offset_lag": np.zeros(int(keep.sum()), dtype="int64"), "is_future": np.zeros(int(keep.sum()), bool)})
        alive = self.partitions[self.partitions["deleted_at"] > self.hours[i]]
        return log_dirs, replicas, alive.drop(columns=["deleted_at"]).reset_index(drop=True)


def simulate(shape: GrowthShape) -> Simulation:
    rng = np.random.default_rng(shape.seed)
    hours = np.arange(0.0, shape.days * 24 + 1e-9, shape.every_hours)
    steps = len(hours)
    rf, b_count, d_count = shape.replication_factor, shape.brokers, shape.disks
    per_cluster = math.ceil(b_count * d_count * shape.replicas_per_disk / rf)
    per_topic = 4
    # Partitions: consecutive ones start on consecutive brokers; each replica on a random dir of its broker.
    rows, parts = [], []
    for c in range(shape.clusters):
        topics = math.ceil(per_cluster / per_topic)
        kinds = rng.choice(3, size=topics, p=[1 - shape.bytes_retained - shape.time_retained,
                                              shape.bytes_retained, shape.time_retained])
        topic_rate = shape.median_rate * np.exp(rng.normal(0, 1.0, topics))
        deleted = np.where(rng.random(topics) < shape.deleted, rng.uniform(0, hours[-1] / 3, topics), math.inf)
        phase = rng.uniform(0, 2 * math.pi)
        for j in range(per_cluster):
            t = j // per_topic
            rate = topic_rate[t] * math.exp(rng.normal(0, 0.3))
            start_size = rate * rng.uniform(24, 24 * 20)
            ret_bytes = ret_ms = -1
            if kinds[t] == 1:  # reaches its limit somewhere in (or after) the weeks
                ret_bytes = int(start_size + rate * rng.uniform(0.2, 1.5) * hours[-1])
            elif kinds[t] == 2:
                ret_ms = int(rng.uniform(2, 5) * 24 * 3_600_000)
            brokers = [(j + r) % b_count for r in range(rf)]
            parts.append({"cluster": f"cluster-{c:02d}", "topic": f"topic-{t:03d}", "partition": j % per_topic,
                          "replicas": np.array(brokers, dtype="int32"), "retention_bytes": ret_bytes,
                          "retention_ms": ret_ms, "deleted_at": deleted[t], "rate": rate, "start": start_size,
                          "kind": int(kinds[t]), "phase": phase})
            for b in brokers:
                rows.append({"cluster": f"cluster-{c:02d}", "c": c, "broker": b, "g": c * b_count + b,
                             "k": int(rng.integers(d_count)), "topic": f"topic-{t:03d}", "partition": j % per_topic,
                             "p": len(parts) - 1})
    partitions = pd.DataFrame(parts)
    replicas = pd.DataFrame(rows)
    # Bytes written up to each hour: the day's cycle and the bursts, on a fine grid (the snapshots' own).
    fine = np.arange(-24 * 6.0, hours[-1] + 1e-9, 0.25)
    written = np.empty((len(partitions), len(fine)))
    for i, p in enumerate(partitions.itertuples()):
        flow = p.rate * (1 + shape.cycle * np.sin(2 * math.pi * fine / 24 + p.phase)) * 0.25
        bursts = rng.random(len(fine)) < shape.bursts * 0.25 / shape.every_hours
        flow = flow + bursts * p.rate * rng.uniform(3, 12, len(fine))
        written[i] = np.cumsum(flow)
    at = np.searchsorted(fine, hours)
    size = np.empty((len(partitions), steps))
    for i, p in enumerate(partitions.itertuples()):
        w = written[i, at]
        if p.kind == 2:  # holds what came in its last retention.ms
            back = np.searchsorted(fine, hours - p.retention_ms / 3_600_000)
            size[i] = w - written[i, np.clip(back, 0, None)]
        else:
            size[i] = p.start + w - written[i, at[0]]
            if p.kind == 1:
                seg = max(1.0, p.retention_bytes / 20)
                over = size[i] > p.retention_bytes
                size[i] = np.where(over, p.retention_bytes - (size[i] - p.retention_bytes) % seg, size[i])
        size[i, hours >= p.deleted_at] = np.nan
    sizes = size[replicas["p"].to_numpy()] * (1 + shape.noise * rng.normal(0, 1, (len(replicas), steps)))
    dirs = np.repeat(replicas["k"].to_numpy()[:, None], steps, axis=1)
    moving = rng.random(len(replicas)) < shape.moves
    for r in np.nonzero(moving & (d_count > 1))[0]:
        when = int(rng.integers(1, max(2, steps // 3)))
        dirs[r, when:] = (dirs[r, 0] + int(rng.integers(1, d_count))) % d_count
    down = np.zeros((shape.clusters * b_count, steps), dtype=bool)
    for g in np.nonzero(rng.random(shape.clusters * b_count) < shape.outages)[0]:
        first = int(rng.integers(0, steps))
        down[g, first:first + max(1, int(rng.uniform(4, 16) / shape.every_hours))] = True
    # Disks, and the size that makes each fill at a chosen hour: from a third of the weeks to twice them.
    disk_rows = [{"cluster": f"cluster-{c:02d}", "c": c, "broker": b, "g": c * b_count + b, "k": k,
                  "log_dir": f"/var/lib/kafka/d{k}"} for c in range(shape.clusters) for b in range(b_count)
                 for k in range(d_count)]
    disks = pd.DataFrame(disk_rows)
    usage = np.zeros((len(disks), steps))
    g_of = replicas["g"].to_numpy()
    for s in range(steps):
        on = g_of * d_count + dirs[:, s]
        ok = ~np.isnan(sizes[:, s])
        np.add.at(usage[:, s], on[ok], sizes[ok, s])
    fill_at = rng.uniform(hours[-1] / 3, hours[-1] * 2, len(disks))
    total = np.empty(len(disks))
    for i in range(len(disks)):
        u = usage[i]
        if fill_at[i] <= hours[-1]:
            total[i] = np.interp(fill_at[i], hours, np.maximum.accumulate(u))
        else:
            tail = hours >= hours[-1] - 72
            slope = np.polyfit(hours[tail], u[tail], 1)[0]
            total[i] = u[-1] + max(slope, 0) * (fill_at[i] - hours[-1])
        total[i] = max(total[i], u.max() / 0.999 if fill_at[i] > hours[-1] else total[i], 1.0)
    disks["total_bytes"] = np.ceil(total).astype("int64")

    def crossing(i: int, level: float) -> float:
        above = np.nonzero(usage[i] >= level * total[i])[0]
        if len(above):
            return float(hours[above[0]])
        tail = hours >= hours[-1] - 72
        slope = np.polyfit(hours[tail], usage[i, tail], 1)[0]
        return hours[-1] + (level * total[i] - usage[i, -1]) / slope if slope > 0 else math.inf

    to_90 = np.array([crossing(i, 0.9) for i in range(len(disks))])
    to_full = np.array([crossing(i, 1.0) for i in range(len(disks))])
    full_at = np.array([np.searchsorted(hours, f) + 1 if f <= hours[-1] else steps for f in to_full])
    truth = disks[["cluster", "broker", "log_dir", "total_bytes"]].copy()
    truth["broker"] = truth["broker"].astype("int32")
    truth["at_90_h"], truth["at_full_h"] = to_90, to_full
    return Simulation(hours, replicas, sizes, dirs,
                      partitions[["cluster", "topic", "partition", "replicas", "retention_bytes", "retention_ms",
                                  "deleted_at"]],
                      disks, down, full_at, truth, d_count)


def _write_snapshot(path: Path, at: datetime, log_dirs: pd.DataFrame, replicas: pd.DataFrame,
                    partitions: pd.DataFrame) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit.collect import _arrow_type  # the types collect writes a snapshot with

    stamp = pd.Timestamp(at.astimezone(UTC))
    tmp = path.with_name(f".{path.name}.tmp")
    for name, frame in (("log_dirs", log_dirs), ("replicas", replicas), ("partitions", partitions)):
        declared = {**snapshot.DATASETS[name],
                    **(snapshot.PARTITIONS_RETENTION if name == "partitions" else {})}
        if "collected_at" in declared:
            frame = frame.assign(collected_at=stamp)
        schema = pa.schema([(c, _arrow_type(k)) for c, k in declared.items()])
        (tmp / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(frame[list(declared)], schema=schema, preserve_index=False),
                       tmp / name / "part-00000.parquet")
    tmp.rename(path)
