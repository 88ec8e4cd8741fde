"""Moves between the brokers of a cluster: for a broker whose disks together cannot be brought into band, because
its mean is above the band of its cluster (every disk of it above the cluster's band, or the others would pull the
mean down), replicas go to other brokers (the plan's `to_broker` rows), each into a log dir chosen here.

Pure numpy and Python (no Spark), run on the driver after the per-broker plans (planner.py), on the disks as those
plans leave them; plan/outputs.py gives it the cluster's dirs (between_fleet.over_in_fleet) and the replicas of the
brokers above the band and, once they are known, of those receiving (between_fleet.plan_fleet, replan_receivers);
plan_cluster does it all on pandas frames (the tests).

- The cluster's band: `avg = sum(used) / sum(size)` over the brokers' disks that take part in their own plan
  (online, not drained, not cordoned), `avg x (1 +- (balance - 1) x margin)` as a broker's (balance.py). A broker
  is a source while its mean is above the upper edge; it sheds until its mean is at the edge (the bytes above it
  are what any plan must move), the largest replica that does not overshoot that need, else the smallest that
  covers it, from its fullest disk, never taking a disk below the band the broker's lower mean gives it.
- A receiver is another broker of the cluster, the emptiest (by mean) first, that stays at or below the cluster's
  upper edge. It must not hold a replica of the partition already (replication factor), and, where the brokers'
  racks are known, the partition's replicas must not end in fewer racks than before. Its log dir is, among those
  online, not cordoned, not drained and with room under the hard rules, one that stays within the receiver's band
  (as its mean will be) and, of those (or, when none does, of all), the one that ends emptiest by fraction. Then
  each receiver's own plan is made again with what it receives (replan_receivers), which evens its dirs out.
- Hard rules, as the per-broker planner's: at any step of the plan, whatever the order its moves run in, no disk is
  above CEILING (90%) nor the capacity threshold: a copy holds its bytes on both brokers until its reassignment
  ends, so a destination counts everything the plan moves into it (its own broker's moves too) and nothing the plan
  moves out of it. Every move fits the destination's usable space, leaving `headroom` of it. A replica moves once
  (not one the broker's own plan moves, nor a future copy, nor a partition already moving, nor an excluded topic),
  and no broker moves more than `max_bytes` in all, its own plan's bytes counted.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import planner

# No disk above this fraction of its size at any step of a plan (the capacity threshold, when lower, binds first).
CEILING = 0.9


@dataclass
class ClusterDirs:
    """A cluster's log dirs, one entry each (any order): as the per-broker plans leave them."""

    broker: np.ndarray  # int64
    names: list[str]
    total: np.ndarray  # float64 bytes, NaN when unknown
    usable: np.ndarray  # float64 bytes free on the disk now, NaN when unknown
    used_before: np.ndarray  # int64 bytes now, futures included
    used_after: np.ndarray  # int64 bytes once the per-broker plans are done
    inbound: np.ndarray  # int64 bytes the per-broker plans move into it
    receives: np.ndarray  # bool: online, not drained, not cordoned
    judged: np.ndarray  # bool: counted in its broker's mean (online, and not a cordoned dir left as it is)
    moved: Mapping[int, int] = field(default_factory=dict)  # broker -> bytes its own plan moves
    # Each dir's state, for planning a receiving broker again (replan_receivers).
    online: np.ndarray | None = None  # bool
    drained: np.ndarray | None = None  # bool
    cordoned: np.ndarray | None = None  # bool


@dataclass
class Candidates:
    """Replicas that may move to another broker, one entry each: current copies of the brokers that may be
    sources, none of them moved by their broker's plan."""

    dir: np.ndarray  # int64 index into ClusterDirs
    key: np.ndarray  # int64 partition key
    size: np.ndarray  # int64 bytes
    # Partition key -> the brokers holding a replica of it (Metadata's replicas); updated as the plan moves them.
    holders: dict[int, set[int]] | Holders


@dataclass
class BetweenPlan:
    rows: list[int]  # candidate indexes, in step order
    src: list[int]  # ClusterDirs indexes
    dst: list[int]
    size: list[int]
    used_after: np.ndarray  # int64, every dir once these moves are done too
    low: float  # the cluster's band, as a fraction of size (NaN: not judged, sizes unknown)
    high: float
    left: list[int]  # brokers still above the cluster's band, and why in `reason`
    reason: str = ""


def cluster_band(dirs: ClusterDirs, t: planner.Thresholds) -> tuple[float, float, dict[int, tuple[float, float]]]:
    """(low, high, {broker: (used, size)}): the cluster's band as fractions, and each broker's bytes (judged dirs)
    and size (receiving dirs), used_after as the per-broker plans leave them. Brokers with a dir of unknown size are
    left out; NaN band when none is left."""
    brokers, at = np.unique(dirs.broker, return_inverse=True)
    n = len(brokers)
    receiving = np.bincount(at, weights=dirs.receives.astype("float64"), minlength=n)
    unknown = np.bincount(at, weights=(dirs.receives & np.isnan(dirs.total)).astype("float64"), minlength=n)
    used = np.bincount(at, weights=np.where(dirs.judged, dirs.used_after, 0).astype("float64"), minlength=n)
    size = np.bincount(at, weights=np.where(dirs.receives, np.nan_to_num(dirs.total), 0.0), minlength=n)
    known = (receiving > 0) & (unknown == 0)
    per = {int(b): (float(u), float(z)) for b, u, z in zip(brokers[known], used[known], size[known], strict=True)}
    whole = sum(z for _, z in per.values())
    if not per or whole <= 0:
        return float("nan"), float("nan"), per
    low, high = t.band(sum(u for u, _ in per.values()) / whole)
    return float(low), float(high), per


def over_brokers(dirs: ClusterDirs, t: planner.Thresholds) -> list[int]:
    """The brokers whose mean is above the cluster's band."""
    _, high, per = cluster_band(dirs, t)
    return sorted(b for b, (used, size) in per.items() if used > high * size + 0.5)


class _Source:
    """A source dir's candidates, sorted by size (bisect finds the one that fits), with what is still there."""

    def __init__(self, rows: np.ndarray, sizes: np.ndarray) -> None:
        order = np.argsort(sizes, kind="stable")
        self.rows = rows[order].tolist()
        self.sizes = sizes[order].tolist()
        self.alive = [True] * len(self.rows)

    def pick(self, limit: float, need: float, ok: Callable[[int], bool]) -> int | None:
        """Position of the replica to move: the largest of size <= min(need, limit), else the smallest in
        [need, limit]; only those still here for which `ok(row)` holds."""
        if limit <= 0:
            return None
        at = bisect.bisect_right(self.sizes, min(need, limit))
        for i in range(at - 1, -1, -1):
            if self.alive[i] and ok(self.rows[i]):
                return i
        for i in range(bisect.bisect_left(self.sizes, need), len(self.sizes)):
            if self.sizes[i] > limit:
                break
            if self.alive[i] and ok(self.rows[i]):
                return i
        return None


def plan_between(dirs: ClusterDirs, cands: Candidates, rules: planner.Rules,
                 racks: Mapping[int, str | None] | None = None) -> BetweenPlan:
    """The moves between brokers of one cluster (module docstring), in step order."""
    t = rules.thresholds
    low, high, per = cluster_band(dirs, t)
    used_after = dirs.used_after.astype("int64").copy()
    plan = BetweenPlan([], [], [], [], used_after, low, high, [])
    if np.isnan(high):
        return plan
    hw = t.half_width
    ceiling = min(t.capacity, CEILING)
    total = np.nan_to_num(dirs.total)
    # What each dir may still receive at any step: its bytes now and everything moved into it, never what leaves.
    hard = np.minimum(ceiling * total - dirs.used_before - dirs.inbound,
                      np.nan_to_num(dirs.usable) - rules.headroom * total - dirs.inbound)
    hard[~dirs.receives] = 0.0
    used = {b: u for b, (u, _) in per.items()}
    size = {b: s for b, (_, s) in per.items()}
    budget = {b: (float(rules.max_bytes) - dirs.moved.get(b, 0)) if rules.max_bytes is not None else float("inf")
              for b in per}
    dirs_of = {b: np.flatnonzero(dirs.broker == b) for b in per}
    sources: dict[int, _Source] = {}
    # Each dir's candidates in their order (a stable sort by dir, cut where the dir changes), not a pass over all
    # of them per dir.
    # (by radix when the dirs' indexes fit 16 bits, as a cluster's do: a stable sort of 400K int64 took 40 ms)
    by_dir = np.argsort(cands.dir.astype(np.uint16) if len(dirs.names) < 1 << 16 else cands.dir, kind="stable")
    dirs_in, starts = np.unique(cands.dir[by_dir], return_index=True)
    ends = [*starts[1:].tolist(), len(by_dir)] if len(starts) else []
    for d, lo, hi in zip(dirs_in.tolist(), starts.tolist(), ends, strict=True):
        mine = by_dir[lo:hi]
        sources[int(d)] = _Source(mine, cands.size[mine])
    rack = dict(racks or {})
    # The brokers' used bytes and budgets as arrays too (the dicts' order, updated with them): which broker sends
    # next and the receivers in order are picked by numpy, not a Python pass over every broker per move (at 20M
    # replicas 19,000 moves in clusters of 1,000 brokers: docs/audit.md#performance).
    state = _Brokers(per, used, size, budget)

    def racks_ok(key: int, src: int, dst: int) -> bool:
        have = cands.holders.get(key, {src})
        if not rack or any(rack.get(b) is None for b in have | {dst}):
            return True  # racks unknown: only the replication factor is checked
        return len({rack[b] for b in (have - {src}) | {dst}}) >= len({rack[b] for b in have})

    while True:
        src = state.next_source(high)
        if src is None:
            break
        need = used[src] - high * size[src]
        found = _one_move(src, need, dirs, sources, dirs_of, used, size, budget, high, hw, hard, used_after,
                          cands, racks_ok, state.receivers(src, high))
        if found is None:
            state.stuck[state.at[src]] = True
            continue
        d_src, pos, r, d_dst = found
        s = sources[d_src]
        row, nbytes = s.rows[pos], s.sizes[pos]
        s.alive[pos] = False
        used[src] -= nbytes
        used[r] += nbytes
        budget[src] -= nbytes
        budget[r] -= nbytes
        state.update(src, r)
        used_after[d_src] -= nbytes
        used_after[d_dst] += nbytes
        hard[d_dst] -= nbytes
        key = int(cands.key[row])
        cands.holders.setdefault(key, {src}).discard(src)
        cands.holders[key].add(r)
        plan.rows.append(row)
        plan.src.append(d_src)
        plan.dst.append(d_dst)
        plan.size.append(nbytes)
    plan.left = sorted(b for b in per if used[b] > high * size[b] + 0.5)
    if plan.left:
        def smallest(b: int) -> float:
            return min((z for d in dirs_of[b] if int(d) in sources
                        for z, alive in zip(sources[int(d)].sizes, sources[int(d)].alive, strict=True) if alive),
                       default=float("inf"))

        plan.reason = ("the byte budget ran out" if any(budget[b] < smallest(b) for b in plan.left)
                       else "no replica fits another broker")
    return plan


class _Brokers:
    """plan_between's used bytes and budgets per broker as arrays, in `per`'s order, kept equal to its dicts."""

    def __init__(self, per: Mapping[int, tuple[float, float]], used: dict[int, float], size: dict[int, float],
                 budget: dict[int, float]) -> None:
        self.ids = np.array(list(per), dtype="int64")
        self.at = {b: i for i, b in enumerate(per)}
        self._used_of, self._budget_of = used, budget
        self.used = np.array([used[b] for b in per], dtype="float64")
        self.size = np.array([size[b] for b in per], dtype="float64")
        self.budget = np.array([budget[b] for b in per], dtype="float64")
        self.stuck = np.zeros(len(self.ids), dtype=bool)

    def update(self, *brokers: int) -> None:
        for b in brokers:
            self.used[self.at[b]], self.budget[self.at[b]] = self._used_of[b], self._budget_of[b]

    def next_source(self, high: float) -> int | None:
        """The broker furthest above the band (the first of equals), not stuck, with budget left; None if none."""
        over = ~self.stuck & (self.used > high * self.size + 0.5) & (self.budget > 0)
        if not over.any():
            return None
        at = np.flatnonzero(over)
        return int(self.ids[at[np.argmax(self.used[at] / self.size[at] - high)]])

    def receivers(self, src: int, high: float) -> list[int]:
        """The brokers that may receive from `src`, the emptiest (by mean) first, equals in `per`'s order."""
        at = np.flatnonzero((self.ids != src) & (self.used < high * self.size) & (self.budget > 0))
        return self.ids[at[np.argsort(self.used[at] / self.size[at], kind="stable")]].tolist()


def _one_move(src: int, need: float, dirs: ClusterDirs, sources: dict[int, _Source], dirs_of: dict[int, np.ndarray],
              used: dict[int, float], size: dict[int, float], budget: dict[int, float], high: float, hw: float,
              hard: np.ndarray, used_after: np.ndarray, cands: Candidates,
              racks_ok: Callable[[int, int, int], bool], receivers: list[int]
              ) -> tuple[int, int, int, int] | None:
    """(source dir, position in it, receiver, receiving dir) of the next move off `src`, or None."""
    total = dirs.total
    # The source's fullest dir first; none taken below the band its mean will have once it is at the edge.
    src_dirs = sorted((int(d) for d in dirs_of[src] if int(d) in sources and dirs.judged[d]),
                      key=lambda d: -used_after[d] / total[d])
    for d_src in src_dirs:
        give = used_after[d_src] - (1 - hw) * high * total[d_src]
        for r in receivers:
            room = {int(d): float(hard[d]) for d in dirs_of[r] if dirs.receives[d]}
            limit = min(max(room.values(), default=0.0), give, budget[src], budget[r], high * size[r] - used[r])
            if limit <= 0:
                continue

            def ok(row: int, r: int = r) -> bool:
                key = int(cands.key[row])
                return r not in cands.holders.get(key, set()) and racks_ok(key, src, r)

            pos = sources[d_src].pick(limit, need, ok)
            if pos is None:
                continue
            nbytes = sources[d_src].sizes[pos]
            fits = [d for d, room_d in room.items() if room_d >= nbytes]
            # Within r's band (as its mean will be) where a dir can, else the dir that ends emptiest: a whole
            # replica may be big against a disk; r's own plan evens it out at the next plan.
            mean = (used[r] + nbytes) / size[r]
            d_dst = min(fits, key=lambda d: ((used_after[d] + nbytes) / total[d] > (1 + hw) * mean,
                                             (used_after[d] + nbytes) / total[d], d))
            return d_src, pos, r, d_dst
    return None


def replan_receivers(dirs: ClusterDirs, plan: BetweenPlan, replicas: pd.DataFrame, rules: planner.Rules
                     ) -> dict[int, tuple[pd.DataFrame, np.ndarray, planner.ArrayPlan]]:
    """Each broker that receives a replica planned again on its own, so that its disks end in its band with what it
    receives: the incoming bytes count in their dir (they do not move again) and are taken from its usable space,
    and the capacity threshold is at most CEILING, so its own moves keep every disk at most 90% at any step too.
    `replicas`: the receivers' copies (broker, log_dir, topic, partition, size_bytes, is_future, key). Per
    receiver: its copies as planned (the frame's rows), its dirs (ClusterDirs indexes) and its plan; a receiver
    whose plan is refused (a drain that the incoming bytes leave no room for) keeps its first plan."""
    assert dirs.online is not None and dirs.drained is not None and dirs.cordoned is not None
    t = rules.thresholds
    capped = replace(rules, thresholds=replace(t, capacity=min(t.capacity, CEILING)))
    incoming = np.zeros(len(dirs.names), dtype="int64")
    np.add.at(incoming, np.asarray(plan.dst, dtype="int64"), np.asarray(plan.size, dtype="int64"))
    out = {}
    # Each receiver's rows, grouped once (a mask over the cluster's replicas per receiver cost seconds at 20M).
    theirs = groups(replicas, "broker")
    for r in sorted({int(b) for b in dirs.broker[plan.dst]}):
        at = np.flatnonzero(dirs.broker == r)
        names = [dirs.names[i] for i in at]
        kept, arrays = planner.replica_arrays(names, dirs.online[at], theirs.get(r, replicas.iloc[:0]),
                                              rules.exclude_topics)
        p = planner.plan_arrays(planner.BrokerDirs(
            names, dirs.online[at], dirs.total[at], dirs.usable[at] - incoming[at],
            dirs.used_before[at] + incoming[at], dirs.drained[at], dirs.cordoned[at]), arrays, capped)
        if p.status != "refused":
            out[r] = (kept.reset_index(drop=True), at, p)
    return out


def candidates(replicas: pd.DataFrame, dirs: ClusterDirs, sources: list[int], moved: set[tuple[int, int]],
               exclude: re.Pattern[str] | None, holders: dict[int, set[int]] | Holders
               ) -> tuple[pd.DataFrame, Candidates]:
    """The replicas of `sources` that may move to another broker, and the frame's rows they are. `replicas`: broker,
    log_dir, topic, key (the partition's), size_bytes, is_future; `moved`: (broker, key) of what the brokers' own
    plans move; `holders`: key -> the brokers Metadata lists for the partition. A partition with a future copy on
    its broker is moving already: none of its copies there moves."""
    r = replicas[replicas["broker"].isin(sources)].reset_index(drop=True)
    index = {(int(b), str(n)): i for i, (b, n) in enumerate(zip(dirs.broker.tolist(), dirs.names, strict=True))}
    # Each distinct (broker, log dir) looked up once (a few per broker), not each replica.
    broker = r["broker"].astype("int64").to_numpy()
    # The names as read (strings, or categoricals from the driver's read: plan/outputs.py); a null one is a name no
    # dir has.
    name_code, name = pd.factorize(r["log_dir"], use_na_sentinel=False)
    pair_code, pair = pd.factorize((broker << 32) | (name_code.astype("int64") & 0xFFFFFFFF))
    at = np.array([index.get((int(p >> 32), as_text(name[p & 0xFFFFFFFF])), -1) for p in pair.tolist()],
                  dtype="int64")[pair_code] if len(r) else np.zeros(0, dtype="int64")
    future = r["is_future"].astype("boolean").fillna(True).to_numpy(dtype=bool)
    keys = r["key"].astype("int64").to_numpy()
    # A partition Metadata does not list cannot be checked for a second replica on the receiver (and its move would
    # be dropped, unnamed): it stays.
    keep = (at >= 0) & ~future & (holders.contains(keys) if isinstance(holders, Holders)
                                  else np.array([k in holders for k in keys.tolist()], dtype=bool))
    # Neither a partition moving already on its broker (a future copy there) nor one the broker's own plan moves:
    # checked in Python only for the rows whose key is one of those.
    moving = set(zip(broker[future].tolist(), keys[future].tolist(), strict=True))
    taken = moving | moved
    # (hashed: np.isin sorts the cluster's keys)
    maybe = np.flatnonzero(keep & pd.Series(keys).isin(np.array([k for _, k in taken], dtype="int64")).to_numpy())
    keep[maybe] = [(b, k) not in taken for b, k in zip(broker[maybe].tolist(), keys[maybe].tolist(), strict=True)]
    keep[keep] = dirs.judged[at[keep]]
    if exclude is not None and len(r):
        topic_code, topics = pd.factorize(r["topic"], use_na_sentinel=False)
        keep &= ~np.array([exclude.search(as_text(t)) is not None for t in topics], dtype=bool)[topic_code]
    r = r[keep].reset_index(drop=True)
    return r, Candidates(at[keep], r["key"].to_numpy(dtype="int64"), r["size_bytes"].to_numpy(dtype="int64"),
                         holders)


def as_text(name: Any) -> str:
    """A name as the regexes and the dirs' names see it: a null one as str(None), as a Python None always was."""
    return "None" if pd.isna(name) else str(name)


@dataclass
class ClusterPlan:
    """plan_cluster's answer: every move (a log-dir move has `to_broker` None) and every dir before and after."""

    moves: pd.DataFrame  # broker, topic, partition, from_dir, to_dir, size_bytes, step, to_broker
    disks: pd.DataFrame  # broker, log_dir, total_bytes, used_before, used_after
    brokers: dict[int, planner.BrokerPlan]
    between: BetweenPlan


def plan_cluster(disks: pd.DataFrame, replicas: pd.DataFrame, partitions: pd.DataFrame,
                 rules: planner.Rules | None = None, racks: Mapping[int, str | None] | None = None) -> ClusterPlan:
    """A whole cluster planned as `plan` plans it, on pandas frames (tests, small clusters): each broker's log-dir
    moves (planner.plan_broker), then the moves between brokers. disks: broker and plan_broker's columns;
    replicas: broker and plan_broker's columns; partitions: topic, partition, replicas (Metadata's)."""
    rules = rules or planner.Rules()
    keys, _ = pd.factorize(pd.MultiIndex.from_arrays([replicas["topic"], replicas["partition"]]))
    replicas = replicas.assign(key=keys.astype("int64"))
    key_of = {(t, int(p)): int(k) for t, p, k in zip(replicas["topic"], replicas["partition"], replicas["key"],
                                                     strict=True)}
    plans, parts, moved = {}, [], set()
    cordoned = disks["cordoned"] if "cordoned" in disks else pd.Series(False, index=disks.index)
    for b in sorted(disks["broker"].unique().tolist()):
        p = planner.plan_broker(disks[disks["broker"] == b], replicas[replicas["broker"] == b], rules)
        plans[int(b)] = p
        parts.append(p.disks.assign(broker=int(b)))
        moved |= {(int(b), key_of[(t, int(q))]) for t, q in zip(p.moves["topic"], p.moves["partition"], strict=True)}
    after = pd.concat(parts, ignore_index=True)
    inbound = np.zeros(len(after), dtype="int64")
    at = {(b, n): i for i, (b, n) in enumerate(zip(after["broker"], after["log_dir"], strict=True))}
    for b, p in plans.items():
        for d, s in zip(p.moves["to_dir"], p.moves["size_bytes"], strict=True):
            inbound[at[(b, d)]] += int(s)
    frozen = disks.set_index(["broker", "log_dir"])[[]].assign(c=cordoned.to_numpy(dtype=bool))["c"]
    cord = np.array([bool(frozen.get((b, n), False)) for b, n in zip(after["broker"], after["log_dir"], strict=True)])
    usable = disks.set_index(["broker", "log_dir"])["usable_bytes"]
    dirs = ClusterDirs(after["broker"].to_numpy(dtype="int64"), after["log_dir"].tolist(),
                       after["total_bytes"].to_numpy(dtype="float64"),
                       np.array([usable.get((b, n), np.nan) for b, n in zip(after["broker"], after["log_dir"],
                                                                            strict=True)], dtype="float64"),
                       after["used_before"].to_numpy(dtype="int64"), after["used_after"].to_numpy(dtype="int64"),
                       inbound, (after["online"] & ~after["drained"]).to_numpy(dtype=bool) & ~cord,
                       (after["online"] & ~after["drained"]).to_numpy(dtype=bool) & ~cord,
                       {b: p.moved_bytes for b, p in plans.items()}, after["online"].to_numpy(dtype=bool),
                       after["drained"].to_numpy(dtype=bool), cord)
    holders = {key_of[(t, int(p))]: {int(x) for x in reps} for t, p, reps in
               zip(partitions["topic"], partitions["partition"], partitions["replicas"], strict=True)
               if (t, int(p)) in key_of}
    over = over_brokers(dirs, rules.thresholds) if rules.between_brokers else []
    frame, cands = candidates(replicas, dirs, over, moved, rules.exclude_topics, holders)
    bp = plan_between(dirs, cands, rules, racks)
    used_after = bp.used_after.copy()
    for r, (kept, at, again) in replan_receivers(dirs, bp, replicas, rules).items():
        names = [dirs.names[i] for i in at]
        own = own_moves(kept, names, again)
        plans[r] = replace(plans[r], moves=own.drop(columns="key"))
        used_after[at] = again.used_after
    rows = [p.moves.assign(broker=b, to_broker=None) for b, p in plans.items() if len(p.moves)]
    if bp.rows:
        src_broker = dirs.broker[bp.src]
        last = {b: len(p.moves) for b, p in plans.items()}
        steps = []
        for b in src_broker.tolist():
            last[b] += 1
            steps.append(last[b])
        picked = frame.iloc[bp.rows]
        rows.append(pd.DataFrame({
            "broker": src_broker, "topic": picked["topic"].to_numpy(), "partition": picked["partition"].to_numpy(),
            "from_dir": [dirs.names[i] for i in bp.src], "to_dir": [dirs.names[i] for i in bp.dst],
            "size_bytes": np.asarray(bp.size, dtype="int64"), "step": np.asarray(steps, dtype="int64"),
            "to_broker": dirs.broker[bp.dst].astype(object)}))
    columns = ["broker", *planner.MOVE_COLUMNS, "to_broker"]
    moves = pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame({c: [] for c in columns})
    out = after[["broker", "log_dir", "total_bytes", "used_before"]].assign(used_after=used_after)
    return ClusterPlan(moves, out, plans, bp)


def own_moves(kept: pd.DataFrame, names: list[str], p: planner.ArrayPlan) -> pd.DataFrame:
    """A broker's plan (plan_arrays on `kept`, its copies) as moves: topic, partition, from_dir, to_dir,
    size_bytes (the copy's `size_now` where the frame has it: plan --horizon), step, key."""
    rows = np.asarray(p.rows, dtype="int64")
    return pd.DataFrame({"topic": kept["topic"].to_numpy()[rows],
                         "partition": kept["partition"].to_numpy(dtype="int64")[rows], **own_columns(kept, names, p)})


def own_columns(kept: pd.DataFrame, names: list[str], p: planner.ArrayPlan) -> dict[str, Any]:
    """own_moves' columns but the partition's names (from_dir, to_dir, size_bytes, step, key): what plan/outputs.py
    keeps of hundreds of receivers, joined into one frame (a frame each cost seconds at 20M replicas)."""
    rows = np.asarray(p.rows, dtype="int64")
    size = (kept["size_now"].to_numpy(dtype="int64")[rows] if "size_now" in kept
            else np.asarray(p.size, dtype="int64"))
    return {"from_dir": [names[i] for i in p.src], "to_dir": [names[i] for i in p.dst], "size_bytes": size,
            "step": np.arange(1, len(rows) + 1, dtype="int64"), "key": kept["key"].to_numpy(dtype="int64")[rows]}


class Holders:
    """Partition key -> the brokers Metadata lists for it (the union where two partitions share a key), as
    Candidates.holders: each key's set made on first use (plan_between looks at a few of a cluster's million), and
    kept there as the plan updates it."""

    def __init__(self, keys: np.ndarray, replicas: Sequence[Any]) -> None:
        self._order = np.argsort(keys)  # equal keys' lists are joined into one set: their order does not matter
        self._keys = keys[self._order]
        self._replicas = replicas
        self._made: dict[int, set[int]] = {}

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Whether each of `keys` is listed (a bool per key)."""
        if not len(self._keys):
            return np.zeros(len(keys), dtype=bool)
        if len(keys) > 4096:  # a cluster's candidates: hashed (a search per key cost twice as much at 400K keys)
            return pd.Series(keys).isin(self._keys).to_numpy(dtype=bool)
        return self._keys[np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)] == keys

    def __contains__(self, key: int) -> bool:
        return key in self._made or bool(self.contains(np.array([key], dtype="int64"))[0])

    def get(self, key: int, default: set[int] | None = None) -> set[int] | None:
        found = self._made.get(key)
        if found is None:
            lo, hi = np.searchsorted(self._keys, key, "left"), np.searchsorted(self._keys, key, "right")
            if lo == hi:
                return default
            found = self._made[key] = {b for i in self._order[lo:hi].tolist() for b in _ints(self._replicas[i])}
        return found

    def setdefault(self, key: int, default: set[int]) -> set[int]:
        found = self.get(key)
        if found is None:
            found = self._made[key] = default
        return found

    def __getitem__(self, key: int) -> set[int]:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found


def _ints(replicas: object) -> list[int]:
    """Metadata's replica list of a partition as Python ints (none for a null list)."""
    if replicas is None:
        return []
    if isinstance(replicas, np.ndarray) and replicas.dtype.kind in "iu":
        return replicas.tolist()
    return [int(b) for b in replicas]  # type: ignore[attr-defined]


def groups(frame: pd.DataFrame, column: str) -> dict[Any, pd.DataFrame]:
    """`frame`'s rows per value of `column` (nulls left out), each in the frame's order with its index, as
    groupby(sort=False) gives them. The replicas' frames come sorted by cluster, then broker (plan/outputs.py): each
    value's rows are then one run, taken as a slice (a view), not gathered; groupby's take of every column of 2M
    rows cost most of a second at 20M replicas (docs/audit.md#performance). Treat the frames as read-only."""
    if not len(frame):
        return {}
    if frame[column].isna().any():
        return dict(tuple(frame.groupby(column, sort=False, observed=True)))
    values = frame[column].to_numpy()
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    firsts = values[starts]
    if len(pd.unique(firsts)) != len(firsts):  # a value in two runs: not sorted
        return dict(tuple(frame.groupby(column, sort=False, observed=True)))
    ends = np.append(starts[1:], len(values))
    return {v: frame.iloc[a:e] for v, a, e in zip(firsts.tolist(), starts.tolist(), ends.tolist(), strict=True)}
