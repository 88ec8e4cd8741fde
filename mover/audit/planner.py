"""The plan for one broker: which replicas to move between its log dirs. Pure pandas and Python, no Spark: the Spark
side (mover/audit/plan.py) runs it once per broker in parallel, and the tests call it directly.

Hard rules, never broken by a move:
- no destination ends above the capacity threshold (Cruise Control's IntraBrokerDiskCapacityGoal, 0.8);
- every move fits the destination's usable space and leaves `headroom` of the disk free; the space a move frees on
  its source is not counted on (the moves of a plan may run in any order, and a copy holds both until its swap);
- never to an offline dir, never a future copy, never a partition already being moved on this broker, never a
  topic excluded, never more than `max_bytes` in all; a replica moves at most once.

Soft goal: every disk within the band around the broker's average (balance.py), with the fewest bytes moved.

The greedy: the disk furthest above its upper edge gives to the disk furthest below the average that has room for it;
the replica chosen is the largest that does not overshoot what the source must shed (no byte moved beyond the need),
and only when none is left, the smallest that covers the rest in one move. Then disks still below their lower edge
are filled the same way from the disks with the most to spare. Every byte taken from a disk above its upper edge, or
put into a disk below its lower edge, is a byte any plan must move, so
`lower_bound = max(sum of bytes above the upper edges, sum of bytes below the lower edges)` (a drained disk: all of
its bytes) bounds every plan that ends in band; bench/audit_plan.py measures how close the greedy comes.

Moves already running are assumed to finish: their future copy's dir gains the rest of the partition, and its current
dir loses it, before anything is planned.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mover.audit.balance import Thresholds

MOVE_COLUMNS = ["topic", "partition", "from_dir", "to_dir", "size_bytes", "step"]
DISK_COLUMNS = ["log_dir", "online", "drained", "total_bytes", "used_before", "used_after", "band_low", "band_high",
                "capacity_bytes"]


@dataclass(frozen=True)
class Rules:
    thresholds: Thresholds = field(default_factory=Thresholds)
    # A move must leave this fraction of its destination's size usable (file-system headroom beyond Kafka's data).
    headroom: float = 0.05
    max_bytes: int | None = None
    exclude_topics: re.Pattern[str] | None = None


@dataclass
class BrokerPlan:
    moves: pd.DataFrame  # MOVE_COLUMNS, in the order they were planned (step 1, 2, ...)
    disks: pd.DataFrame  # DISK_COLUMNS: bytes before and after, the band in bytes
    lower_bound: int
    status: str  # "planned", "balanced", "capacity unknown", "refused"
    reason: str = ""  # why it was refused, or what could not be fixed

    @property
    def moved_bytes(self) -> int:
        return int(self.moves["size_bytes"].sum()) if len(self.moves) else 0


def _empty_moves() -> pd.DataFrame:
    return pd.DataFrame({"topic": pd.Series(dtype="object"), "partition": pd.Series(dtype="int64"),
                         "from_dir": pd.Series(dtype="object"), "to_dir": pd.Series(dtype="object"),
                         "size_bytes": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64")})


class _Disk:
    """One log dir during planning: bytes now, the band in bytes, and its movable replicas sorted by size."""

    __slots__ = ("name", "total", "used", "free", "low", "high", "cap", "drained", "sizes", "items", "stuck")

    def __init__(self, name: str, total: int, used: int, free: int, drained: bool) -> None:
        self.name = name
        self.total = total
        self.used = used
        self.free = free  # usable bytes a move may still take (headroom already kept back)
        self.drained = drained
        self.low = self.high = self.cap = 0.0
        self.sizes: list[int] = []  # sorted; items[i] is the replica of sizes[i]
        self.items: list[int] = []  # row positions in the replicas frame
        self.stuck = False

    def room(self) -> float:
        """What this disk may still receive without leaving its band, the capacity threshold or its usable space."""
        if self.drained:
            return 0.0
        return min(self.high - self.used, self.cap - self.used, float(self.free))

    def take(self, limit: float, need: float) -> int | None:
        """Index of the replica to move: the largest of size <= min(need, limit) (nothing moved beyond the need),
        else the smallest of size in [need, limit] (one move covers the rest). None if neither exists."""
        if limit <= 0 or not self.sizes:
            return None
        below = bisect.bisect_right(self.sizes, min(need, limit))
        if below > 0:
            return below - 1
        at_least = bisect.bisect_left(self.sizes, need)
        if at_least < len(self.sizes) and self.sizes[at_least] <= limit:
            return at_least
        return None

    def pop(self, i: int) -> tuple[int, int]:
        return self.sizes.pop(i), self.items.pop(i)


def lower_bound(used: np.ndarray, low: np.ndarray, high: np.ndarray) -> int:
    """Bytes any plan ending with every disk in [low, high] must move (a drained disk has low = high = 0)."""
    above = np.clip(used - high, 0, None).sum()
    below = np.clip(low - used, 0, None).sum()
    return int(np.ceil(max(above, below)))


def plan_broker(disks: pd.DataFrame, replicas: pd.DataFrame, rules: Rules | None = None,
                drain: frozenset[str] | set[str] = frozenset()) -> BrokerPlan:
    """disks: one row per log dir of the broker (log_dir, error null when online, total_bytes, usable_bytes,
    used_bytes = bytes of every copy in it, futures included). replicas: the broker's copies (log_dir, topic,
    partition, size_bytes, is_future); those of dirs that cannot give (below their band) may be left out."""
    rules = rules or Rules()
    t = rules.thresholds
    disks = disks.reset_index(drop=True)
    online_mask = disks["error"].isna().to_numpy()
    names = disks["log_dir"].tolist()
    drained_mask = np.array([n in drain for n in names], dtype=bool)

    def result(moves: pd.DataFrame, used_after: np.ndarray, low: np.ndarray, high: np.ndarray, cap: np.ndarray,
               lb: int, status: str, reason: str = "") -> BrokerPlan:
        frame = pd.DataFrame({
            "log_dir": names, "online": online_mask, "drained": drained_mask,
            "total_bytes": disks["total_bytes"].to_numpy(dtype="float64"),
            "used_before": disks["used_bytes"].to_numpy(dtype="int64"),
            "used_after": used_after.astype("int64"), "band_low": low, "band_high": high, "capacity_bytes": cap})
        return BrokerPlan(moves, frame, lb, status, reason)

    nan = np.full(len(names), np.nan)
    used0 = disks["used_bytes"].fillna(0).to_numpy(dtype="int64")
    unknown_drain = sorted(drain - set(names))
    if unknown_drain:
        return result(_empty_moves(), used0, nan, nan, nan, 0, "refused",
                      f"no log dir {unknown_drain[0]} on this broker")
    offline_drain = [n for n, on, dr in zip(names, online_mask, drained_mask, strict=True) if dr and not on]
    if offline_drain:
        return result(_empty_moves(), used0, nan, nan, nan, 0, "refused",
                      f"{offline_drain[0]} is offline: its replicas cannot be read to move them")
    total = disks["total_bytes"].to_numpy(dtype="float64")
    usable = disks["usable_bytes"].to_numpy(dtype="float64")
    if np.isnan(total[online_mask]).any() or np.isnan(usable[online_mask]).any() or (total[online_mask] <= 0).any():
        return result(_empty_moves(), used0, nan, nan, nan, 0, "capacity unknown",
                      "the size of its disks is unknown: nothing can be checked to fit")
    targets = online_mask & ~drained_mask
    if not targets.any():
        return result(_empty_moves(), used0, nan, nan, nan, 0, "refused", "no online log dir would be left")

    index = {n: i for i, n in enumerate(names)}
    used = used0.astype("float64")
    replicas = replicas[replicas["log_dir"].isin([n for n, on in zip(names, online_mask, strict=True) if on])]
    is_future = replicas["is_future"].to_numpy(dtype=bool)
    moving_mask = np.zeros(len(replicas), dtype=bool)
    if is_future.any():
        # Moves already running end with the whole partition in the future copy's dir and none in the current one.
        keys = pd.MultiIndex.from_arrays([replicas["topic"], replicas["partition"]])
        moving_mask = keys.isin(keys[is_future])
        involved = replicas[moving_mask]
        now = involved[~involved["is_future"]].drop_duplicates(["topic", "partition"]).set_index(
            ["topic", "partition"])
        for tp, p, d, s in involved.loc[involved["is_future"], ["topic", "partition", "log_dir", "size_bytes"]] \
                .itertuples(index=False):
            if (tp, p) in now.index:
                src, full = now.at[(tp, p), "log_dir"], int(now.at[(tp, p), "size_bytes"])
                used[index[d]] += max(0, full - s)
                used[index[src]] -= full

    avg = used[online_mask].sum() / total[targets].sum()
    low_frac, high_frac = t.band(avg)
    low = np.where(targets, low_frac * total, 0.0)
    high = np.where(targets, high_frac * total, 0.0)
    cap = np.where(online_mask, t.capacity * total, 0.0)
    low[~online_mask] = high[~online_mask] = np.nan
    lb = lower_bound(used[online_mask], low[online_mask], high[online_mask])

    state = [_Disk(n, int(total[i]) if online_mask[i] else 0, int(used[i]),
                   int(usable[i] - rules.headroom * total[i]) if online_mask[i] else 0, bool(drained_mask[i]))
             for i, n in enumerate(names)]
    for i, d in enumerate(state):
        if online_mask[i]:
            d.low, d.high, d.cap = float(low[i]), float(high[i]), float(cap[i])
    blocked = moving_mask
    if rules.exclude_topics is not None:
        pattern = rules.exclude_topics
        bad = [tp for tp in replicas["topic"].unique() if pattern.search(tp) is not None]
        if bad:
            blocked = blocked | replicas["topic"].isin(bad).to_numpy()
    blocked_on_drain = int((blocked & replicas["log_dir"].isin(drain).to_numpy()).sum()) if drain else 0
    # Sorted by size per dir, as plain lists: bisect finds the replica that fits in O(log n).
    size_col = replicas["size_bytes"].to_numpy(dtype="int64")
    candidates = np.flatnonzero(~blocked)
    candidates = candidates[np.argsort(size_col[candidates], kind="stable")]
    dir_codes = pd.Categorical(replicas["log_dir"].to_numpy()[candidates], categories=names).codes
    for i, d in enumerate(state):
        rows = candidates[dir_codes == i]
        d.sizes = size_col[rows].tolist()
        d.items = rows.tolist()

    if drain:
        drain_bytes = sum(d.used for d in state if d.drained)
        space = sum(max(0.0, d.room()) for d in state if not d.drained and d.total)
        if blocked_on_drain:
            return result(_empty_moves(), used0, low, high, cap, lb, "refused",
                          f"{blocked_on_drain} replicas on the drained dirs cannot move (a move is running or the "
                          "topic is excluded)")
        if drain_bytes > space:
            return result(_empty_moves(), used0, low, high, cap, lb, "refused",
                          f"draining needs {drain_bytes} bytes and the other dirs can take {int(space)} within "
                          f"the capacity threshold and their usable space")

    budget = float(rules.max_bytes) if rules.max_bytes is not None else float("inf")
    moves: list[tuple[int, str, str, int]] = []
    live = [d for d in state if d.total]
    receivers = [d for d in live if not d.drained]

    def move(src: _Disk, dst: _Disk, i: int) -> None:
        nonlocal budget
        size, row = src.pop(i)
        src.used -= size
        dst.used += size
        dst.free -= size
        budget -= size
        moves.append((row, src.name, dst.name, size))

    # Phase 1: shed what lies above the upper edges (all of a drained disk), most over first.
    for d in live:
        d.stuck = False
    while budget > 0:
        over = [d for d in live if not d.stuck and d.used > d.high]
        if not over:
            break
        src = max(over, key=lambda d: (d.used - d.high) / d.total)
        need = src.used - src.high
        give = src.used - src.low  # never push the source below its own band
        done = False
        for dst in sorted((r for r in receivers if r is not src), key=lambda r: r.used / r.total):
            i = src.take(min(dst.room(), give, budget), need)
            if i is not None:
                move(src, dst, i)
                done = True
                break
        if not done:
            src.stuck = True

    # Phase 2: fill what lies below the lower edges, from the disks with the most to spare.
    for d in live:
        d.stuck = False
    while budget > 0:
        under = [d for d in receivers if not d.stuck and d.used < d.low]
        if not under:
            break
        dst = max(under, key=lambda d: (d.low - d.used) / d.total)
        need = dst.low - dst.used
        done = False
        for src in sorted((s for s in live if s is not dst), key=lambda s: -(s.used - s.low) / s.total):
            give = src.used - src.low
            if give <= 0:
                break
            i = src.take(min(dst.room(), give, budget), need)
            if i is not None:
                move(src, dst, i)
                done = True
                break
        if not done:
            dst.stuck = True

    used_after = np.array([d.used if on else u for d, on, u in zip(state, online_mask, used0, strict=True)])
    left = [d for d in state if d.drained and d.used > 0]
    if left:
        return result(_empty_moves(), used0, low, high, cap, lb, "refused",
                      f"{left[0].name} cannot be emptied: its replicas do not fit the other dirs' room")
    frame = _empty_moves()
    if moves:
        rows = [m[0] for m in moves]
        frame = pd.DataFrame({
            "topic": replicas["topic"].to_numpy()[rows],
            "partition": replicas["partition"].to_numpy(dtype="int64")[rows],
            "from_dir": [m[1] for m in moves], "to_dir": [m[2] for m in moves],
            "size_bytes": np.array([m[3] for m in moves], dtype="int64"),
            "step": np.arange(1, len(moves) + 1, dtype="int64")})
    outside = [d.name for d in receivers if not (d.low * (1 - 1e-9) <= d.used <= d.high * (1 + 1e-9))]
    reason = ""
    if outside:
        why = "the byte budget ran out" if budget <= 0 else "no replica fits"
        reason = f"{len(outside)} dirs stay out of band ({why})"
    status = "planned" if moves else "balanced" if not outside else "unchanged"
    return result(frame, used_after.round(), low, high, cap, lb, status, reason)
