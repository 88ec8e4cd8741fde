"""The plan for one broker: which replicas to move between its log dirs. Pure pandas and Python, no Spark: the Spark
side (mover/audit/plan/) runs it once per broker in parallel, and the tests call it directly.

Hard rules, never broken by a move:
- no destination ends above the capacity threshold (Cruise Control's IntraBrokerDiskCapacityGoal, 0.8);
- every move fits the destination's usable space and leaves `headroom` of the disk free; the space a move frees on
  its source is not counted on (the moves of a plan may run in any order, and a copy holds both until its swap);
- never to an offline dir, never a future copy, never a partition already being moved on this broker, never a
  topic excluded, never more than `max_bytes` in all; a replica moves at most once.

Soft goal: every disk within the band around the broker's average (balance.py), with the fewest bytes moved.

The greedy: the disk furthest above its upper edge gives to the disk furthest below the average that has room for it
(room within its band; a drained disk's replicas may take a destination past its band, up to the hard rules, since
a drain must empty the disk and the band is only the soft goal: the later moves bring it back where they can);
the replica chosen is the largest that does not overshoot what the source must shed (no byte moved beyond the need),
and only when none is left, the smallest that covers the rest in one move. Then disks still below their lower edge
are filled the same way from the disks with the most to spare. A disk still out of band after both (every single
replica would push it or its receiver past an edge: whole partitions against a narrow band) swaps one of its
replicas for smaller ones of another disk, both ending in band, the cheapest swap first (Cruise Control's
disk-usage goal swaps as well once moves alone do not do). When swaps were needed, or did not do, the phases run
once more with phase 1 moving the largest replica the receiver takes, and the better plan is kept (fewer disks out
of band, then fewer bytes). Every byte taken from a disk above its upper edge, or
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
from typing import NamedTuple

import numpy as np
import pandas as pd

from mover.audit import plan_layout
from mover.audit.balance import Thresholds

# A broker's moves: the plan's columns (plan_layout.MOVES) but its cluster and broker, which plan/outputs.py adds.
MOVE_COLUMNS = plan_layout.move_key_columns()
# A broker's disks as planned; plan/outputs.py judges them again into the plan's disks.parquet (plan_layout.DISKS).
DISK_COLUMNS = ["log_dir", "online", "drained", "total_bytes", "used_before", "used_after", "band_low", "band_high",
                "capacity_bytes"]


@dataclass(frozen=True)
class Rules:
    thresholds: Thresholds = field(default_factory=Thresholds)
    # A move must leave this fraction of its destination's size usable (file-system headroom beyond Kafka's data).
    headroom: float = 0.05
    max_bytes: int | None = None
    exclude_topics: re.Pattern[str] | None = None
    # A broker above its cluster's band may send replicas to other brokers (plan/between.py); False: never.
    between_brokers: bool = True


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
    kinds = {c: "object" if plan_layout.MOVES[c] == "string" else "int64" for c in MOVE_COLUMNS}
    return pd.DataFrame({c: pd.Series(dtype=kind) for c, kind in kinds.items()})


class _Disk:
    """One log dir during planning: bytes now, the band in bytes, and its movable replicas sorted by size."""

    __slots__ = ("name", "total", "used", "free", "low", "high", "cap", "drained", "cordoned", "sizes", "items",
                 "stuck")

    def __init__(self, name: str, total: int, used: int, free: int, drained: bool, cordoned: bool = False) -> None:
        self.name = name
        self.total = total
        self.used = used
        self.free = free  # usable bytes a move may still take (headroom already kept back)
        self.drained = drained
        self.cordoned = cordoned  # KIP-1066: receives nothing
        self.low = self.high = self.cap = 0.0
        self.sizes: list[int] = []  # sorted; items[i] is the replica of sizes[i]
        self.items: list[int] = []  # row positions in the replicas frame
        self.stuck = False

    def room(self) -> float:
        """What this disk may still receive without leaving its band, the capacity threshold or its usable space."""
        return min(self.high - self.used, self.hard_room())

    def hard_room(self) -> float:
        """What this disk may still receive under the hard rules alone (capacity threshold, usable space): the room a
        drain may use, since emptying the drained disk outranks the band."""
        if self.drained or self.cordoned:
            return 0.0
        return min(self.cap - self.used, float(self.free))

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

    def copy(self) -> _Disk:
        c = _Disk(self.name, self.total, self.used, self.free, self.drained, self.cordoned)
        c.low, c.high, c.cap = self.low, self.high, self.cap
        c.sizes, c.items = list(self.sizes), list(self.items)
        return c


def lower_bound(used: np.ndarray, low: np.ndarray, high: np.ndarray) -> int:
    """Bytes any plan ending with every disk in [low, high] must move (a drained disk has low = high = 0)."""
    above = np.clip(used - high, 0, None).sum()
    below = np.clip(low - used, 0, None).sum()
    return int(np.ceil(max(above, below)))


@dataclass
class ArrayPlan:
    """plan_arrays' answer: the moves as replica row numbers and dir indexes, in step order, and every dir after."""

    rows: list[int]
    src: list[int]
    dst: list[int]
    size: list[int]
    used_after: np.ndarray
    low: np.ndarray
    high: np.ndarray
    cap: np.ndarray
    lower_bound: int
    status: str
    reason: str = ""


# At most this many replicas come back for one in a swap (phase 3): enough to trade a big replica for a few middling
# ones, few enough that a swap stays a handful of moves.
SWAP_BACK = 8


class _Greedy:
    """One run of the phases (module docstring) over copies of a broker's disks, so that plan_arrays can run them
    twice. `bulky`: phase 1 moves the largest replica the receiver takes (within the source's band), not the largest
    within the source's need."""

    def __init__(self, disks: list[_Disk], budget: float, bulky: bool) -> None:
        self.state = [d.copy() for d in disks]
        self.budget = budget
        self.bulky = bulky
        self.rows: list[int] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.size: list[int] = []
        self.swaps = 0
        self.position = {id(d): i for i, d in enumerate(self.state)}
        self.live = [d for d in self.state if d.total]
        self.receivers = [d for d in self.live if not d.drained and not d.cordoned]
        self.shed()
        self.fill()
        self.exchange()

    @property
    def moved(self) -> int:
        return sum(self.size)

    def outside(self) -> list[str]:
        return [d.name for d in self.receivers if not (d.low * (1 - 1e-9) <= d.used <= d.high * (1 + 1e-9))]

    def move(self, src: _Disk, dst: _Disk, i: int) -> None:
        size, row = src.pop(i)
        src.used -= size
        dst.used += size
        dst.free -= size
        self.budget -= size
        self.rows.append(row)
        self.src.append(self.position[id(src)])
        self.dst.append(self.position[id(dst)])
        self.size.append(size)

    def shed(self) -> None:
        """Phase 1: shed what lies above the upper edges (all of a drained disk), most over first."""
        while self.budget > 0:
            over = [d for d in self.live if not d.stuck and d.used > d.high]
            if not over:
                break
            src = max(over, key=lambda d: (d.used - d.high) / d.total)
            need = src.used - src.high
            give = src.used - src.low  # never push the source below its own band
            for dst in sorted((r for r in self.receivers if r is not src), key=lambda r: r.used / r.total):
                # The emptiest first, so a drain fills the receivers evenly even where it must go past their bands.
                room = dst.hard_room() if src.drained else dst.room()
                limit = min(room, give, self.budget)
                i = src.take(limit, limit if self.bulky else need)
                if i is not None:
                    self.move(src, dst, i)
                    break
            else:
                src.stuck = True

    def fill(self) -> None:
        """Phase 2: fill what lies below the lower edges, from the disks with the most to spare."""
        for d in self.live:
            d.stuck = False
        while self.budget > 0:
            under = [d for d in self.receivers if not d.stuck and d.used < d.low]
            if not under:
                break
            dst = max(under, key=lambda d: (d.low - d.used) / d.total)
            need = dst.low - dst.used
            src: _Disk | None
            for src in sorted((s for s in self.live if s is not dst), key=lambda s: -(s.used - s.low) / s.total):
                give = src.used - src.low
                if give <= 0:
                    src = None
                    break
                i = src.take(min(dst.room(), give, self.budget), need)
                if i is not None:
                    self.move(src, dst, i)
                    break
            else:
                src = None
            if src is None:
                dst.stuck = True

    def swap(self, x: _Disk, y: _Disk) -> tuple[float, int, list[int]] | None:
        """(bytes moved, index of a in x, indexes in y): x gives one replica a, y gives back replicas of b bytes in
        all, a - b within what both need to end in band. The cheapest found (a + b); None if none is found."""
        least = max(x.used - x.high, y.low - y.used, 1.0)  # a - b: what x must shed, what y must gain
        most = min(x.used - x.low, y.high - y.used)
        if most < least or not x.sizes or not y.sizes:
            return None
        a_limit = min(y.hard_room(), self.budget)
        best: tuple[float, int, list[int]] | None = None
        for ia, a in enumerate(x.sizes):
            if a > a_limit or (best is not None and 2 * a - most >= best[0]):
                break  # sizes ascend, and a + b >= 2a - most
            lo, hi = a - most, min(a - least, x.hard_room(), self.budget - a)  # b's range
            if hi < max(lo, 0):
                continue
            ib = bisect.bisect_left(y.sizes, lo)
            if ib < len(y.sizes) and y.sizes[ib] <= hi:
                taken = [ib]  # one replica back: the smallest that is enough
            else:
                # Several back: the largest that fits what is left, until b reaches lo (a subset sum, greedily),
                # each found by bisect below the last (a disk may hold thousands of empty replicas: no walk over
                # them), at most SWAP_BACK of them.
                taken, b, j = [], 0, len(y.sizes)
                while b < lo and len(taken) < SWAP_BACK:
                    j = bisect.bisect_right(y.sizes, hi - b, 0, j) - 1
                    if j < 0 or y.sizes[j] <= 0:
                        break
                    taken.append(j)
                    b += y.sizes[j]
                if b < lo:
                    continue
            cost = a + sum(y.sizes[j] for j in taken)
            if best is None or cost < best[0]:
                best = (cost, ia, taken)
        return best

    def exchange(self) -> None:
        """Phase 3: swaps, for a disk still out of band because every single replica it could give or take would push
        it or its partner past an edge. Its replica a goes to the partner and replicas of b < a bytes come back: each
        ends in band. The cheapest swap of all partners wins."""
        for d in self.live:
            d.stuck = False
        while self.budget > 0:
            out = [d for d in self.receivers if not d.stuck and not d.low <= d.used <= d.high]
            if not out:
                break
            d = max(out, key=lambda d: max(d.used - d.high, d.low - d.used) / d.total)
            found: tuple[float, _Disk, _Disk, int, list[int]] | None = None
            for other in self.receivers:
                if other is d:
                    continue
                x, y = (d, other) if d.used > d.high else (other, d)
                pair = self.swap(x, y)
                if pair is not None and (found is None or pair[0] < found[0]):
                    found = (pair[0], x, y, pair[1], pair[2])
            if found is None:
                d.stuck = True
                continue
            _, x, y, ia, back = found
            self.move(x, y, ia)  # a replica moved in is not in its new disk's list: y's indexes still hold
            for j in sorted(back, reverse=True):  # popped from the end first, so the others keep their places
                self.move(y, x, j)
            self.swaps += 1


# by_dir_and_size packs (dir, size) in one int64, the size in the low bits: sizes below 128 TiB.
PACKED_SIZE_BITS = 47


def by_dir_and_size(rows: np.ndarray, r_dir: np.ndarray, r_size: np.ndarray, dirs: int) -> np.ndarray:
    """`rows` in the order of lexsort((size, dir)), stable. As one stable argsort of dir and size packed in one
    int64 when they fit: 2x faster than two stable argsorts and 4.8x than lexsort on a broker's 4,000 rows (numpy 2);
    it runs once per broker out of band (14% of the plan's Python workers at 20M, py-spy)."""
    sizes = r_size[rows]
    if (len(rows) and sizes.dtype.kind == "i" and dirs < 1 << 16
            and 0 <= sizes.min() <= sizes.max() < 1 << PACKED_SIZE_BITS):
        return rows[np.argsort((r_dir[rows].astype(np.int64) << PACKED_SIZE_BITS) | sizes, kind="stable")]
    rows = rows[np.argsort(sizes, kind="stable")]
    return rows[np.argsort(r_dir[rows], kind="stable")]


# plan_arrays' inputs are NamedTuples, not dataclasses: made once per broker (5,000 at 20M rows), a tuple is the
# cheapest to build, and plan_arrays unpacks it into its locals at once.
class BrokerDirs(NamedTuple):
    """plan_arrays' first input: a broker's log dirs, an entry each, numbered as BrokerReplicas.dir numbers them."""

    names: list[str]
    online: np.ndarray  # bool: the dir answered (its error is null); an offline dir neither gives nor takes
    total: np.ndarray  # float64 bytes of the disk, NaN when unknown
    usable: np.ndarray  # float64 bytes the disk still has free, NaN when unknown
    used: np.ndarray  # int64 bytes of every copy in the dir, futures included
    drained: np.ndarray  # bool: to be emptied
    cordoned: np.ndarray | None = None  # bool (KIP-1066), never a destination; None: the broker reports no cordons


class BrokerReplicas(NamedTuple):
    """plan_arrays' second input: a broker's copies in its online dirs, an entry each, in any order."""

    dir: np.ndarray  # int64: the copy's dir, an index into BrokerDirs
    key: np.ndarray  # int64 naming the partition: equal for its current and its future copy
    size: np.ndarray  # int64 bytes
    future: np.ndarray  # bool: the future copy of a move already running
    blocked: np.ndarray  # bool: its topic is excluded


def plan_arrays(dirs: BrokerDirs, replicas: BrokerReplicas, rules: Rules) -> ArrayPlan:
    """The planner on plain arrays (what the Spark UDF calls: no pandas per broker).

    A cordoned dir (KIP-1066) is never a destination. Unless drained it is left as it is: no band, out of its
    broker's average, neither giving nor taking; drained, it is emptied like any drained dir."""
    names, online, total, usable, used0, drained, cordoned = dirs
    r_dir, r_key, r_size, r_future, r_blocked = replicas
    t = rules.thresholds
    n = len(names)
    nan = np.full(n, np.nan)
    used_i = np.asarray(used0, dtype="int64")

    def refuse(status: str, reason: str, low: np.ndarray = nan, high: np.ndarray = nan, cap: np.ndarray = nan,
               lb: int = 0) -> ArrayPlan:
        return ArrayPlan([], [], [], [], used_i.astype("float64"), low, high, cap, lb, status, reason)

    offline_drain = [names[i] for i in range(n) if drained[i] and not online[i]]
    if offline_drain:
        return refuse("refused", f"{offline_drain[0]} is offline: its replicas cannot be read to move them")
    if np.isnan(total[online]).any() or np.isnan(usable[online]).any() or (total[online] <= 0).any():
        return refuse("capacity unknown", "the size of its disks is unknown: nothing can be checked to fit")
    cordoned = np.zeros(n, dtype=bool) if cordoned is None else np.asarray(cordoned, dtype=bool)
    frozen = online & cordoned & ~drained  # kept as it is
    targets = online & ~drained & ~cordoned
    if not targets.any():
        if not drained.any():
            # Every online dir cordoned and none to drain: nothing may move, nothing needs to.
            return ArrayPlan([], [], [], [], used_i.astype("float64"), nan, nan, nan, 0, "cordoned")
        return refuse("refused", "no online log dir would be left" if not cordoned.any()
                      else "no online log dir would be left that is not cordoned")

    used = used_i.astype("float64")
    moving_mask = np.zeros(len(r_key), dtype=bool)
    if r_future.any():
        # Moves already running end with the whole partition in the future copy's dir and none in the current one.
        moving_mask = np.isin(r_key, r_key[r_future])
        now = {int(r_key[j]): (int(r_dir[j]), int(r_size[j])) for j in np.flatnonzero(moving_mask & ~r_future)}
        for j in np.flatnonzero(r_future):
            found = now.get(int(r_key[j]))
            if found is not None:
                src, full = found
                used[r_dir[j]] += max(0, full - int(r_size[j]))
                used[src] -= full

    judged = online & ~frozen
    avg = used[judged].sum() / total[targets].sum()
    low_frac, high_frac = t.band(avg)
    low = np.where(targets, low_frac * total, 0.0)
    high = np.where(targets, high_frac * total, 0.0)
    cap = np.where(online, t.capacity * total, 0.0)
    low[~judged] = high[~judged] = np.nan
    lb = lower_bound(used[judged], low[judged], high[judged])
    whole = np.trunc(used)  # the greedy counts whole bytes
    if not drained.any() and not ((whole[judged] > high[judged]).any() or (whole[judged] < low[judged]).any()):
        # Every disk in band: neither phase below would move anything (most brokers of a fleet; skip the sorting).
        return ArrayPlan([], [], [], [], np.where(online, whole, used_i).round(), low, high, cap, lb, "balanced")

    state = [_Disk(names[i], int(total[i]) if online[i] else 0, int(used[i]),
                   int(usable[i] - rules.headroom * total[i]) if online[i] else 0, bool(drained[i]), bool(cordoned[i]))
             for i in range(n)]
    for i, d in enumerate(state):
        if frozen[i]:
            # Neither over its band (phase 1) nor with anything to spare (phase 2): left as it is.
            d.low, d.high, d.cap = float(d.used), float("inf"), float(cap[i])
        elif online[i]:
            d.low, d.high, d.cap = float(low[i]), float(high[i]), float(cap[i])
    blocked = moving_mask | r_blocked | r_future
    if drained.any():
        blocked_on_drain = int((blocked & ~r_future & drained[r_dir]).sum()) if len(r_dir) else 0
        drain_bytes = sum(d.used for d in state if d.drained)
        space = sum(max(0.0, d.hard_room()) for d in state if not d.drained and d.total)
        if blocked_on_drain:
            return refuse("refused", f"{blocked_on_drain} replicas on the drained dirs cannot move (a move is "
                          "running or the topic is excluded)", low, high, cap, lb)
        if drain_bytes > space:
            return refuse("refused", f"draining needs {drain_bytes} bytes and the other dirs can take {int(space)} "
                          "within the capacity threshold and their usable space", low, high, cap, lb)
    # Sorted by size per dir, as plain lists: bisect finds the replica that fits in O(log n).
    candidates = np.flatnonzero(~blocked)
    candidates = by_dir_and_size(candidates, r_dir, r_size, n)
    dirs_sorted = r_dir[candidates]
    # Equal sizes in one dir (empty partitions, a topic's even partitions) would keep the rows' read order, which
    # differs between the driver's scan and Spark's tasks: ordered by partition key too, every path plans the same
    # moves. Only when such ties exist (the extra sort is a third of this one's cost).
    sizes_sorted = r_size[candidates]
    if len(candidates) > 1 and ((dirs_sorted[1:] == dirs_sorted[:-1]) & (sizes_sorted[1:] == sizes_sorted[:-1])).any():
        candidates = candidates[np.lexsort((r_key[candidates], sizes_sorted, dirs_sorted))]
        dirs_sorted = r_dir[candidates]
    bounds = np.searchsorted(dirs_sorted, np.arange(n + 1))
    for i, d in enumerate(state):
        rows = candidates[bounds[i]:bounds[i + 1]]
        d.sizes = r_size[rows].tolist()
        d.items = rows.tolist()

    budget = float(rules.max_bytes) if rules.max_bytes is not None else float("inf")
    run = _Greedy(state, budget, bulky=False)
    if run.swaps or run.outside():
        # Whole partitions against a narrow band: phase 1's thrifty choice (nothing moved beyond the need) can strand a
        # disk that only a swap fixes, at a cost, or nothing does. The phases again, phase 1 moving the largest replica
        # the receiver takes, and the better plan kept: fewer disks out of band, then fewer bytes moved.
        other = _Greedy(state, budget, bulky=True)
        if (len(other.outside()), other.moved) < (len(run.outside()), run.moved):
            run = other
    state, budget = run.state, run.budget

    used_after = np.array([d.used if online[i] else float(used_i[i]) for i, d in enumerate(state)])
    left = [d for d in state if d.drained and d.used > 0]
    if left:
        return refuse("refused", f"{left[0].name} cannot be emptied: its replicas do not fit the other dirs' room",
                      low, high, cap, lb)
    outside = run.outside()
    reason = ""
    if outside:
        why = "the byte budget ran out" if budget <= 0 else "no replica fits"
        reason = f"{len(outside)} dirs stay out of band ({why})"
    status = "planned" if run.rows else "balanced" if not outside else "unchanged"
    return ArrayPlan(run.rows, run.src, run.dst, run.size, used_after.round(), low, high, cap, lb, status, reason)


def replica_arrays(names: list[str], online: np.ndarray, replicas: pd.DataFrame, exclude: re.Pattern[str] | None
                   ) -> tuple[pd.DataFrame, BrokerReplicas]:
    """A broker's replicas frame as plan_arrays' replicas (rows of dirs unknown or offline dropped), and the frame's
    rows kept (BrokerReplicas' order)."""
    # Factorize (a hash of each distinct dir, a handful per broker), then map the few distinct names to indexes.
    dir_codes, dir_names = pd.factorize(replicas["log_dir"])
    index = {n: i for i, n in enumerate(names)}
    codes = np.array([index.get(n, -1) for n in dir_names], dtype="int64")[dir_codes] if len(dir_names) else \
        np.zeros(0, dtype="int64")
    keep = codes >= 0
    keep[keep] = online[codes[keep]]
    if not keep.all():
        replicas, codes = replicas[keep], codes[keep]
    topic_codes, topics = pd.factorize(replicas["topic"])
    partitions = replicas["partition"].to_numpy(dtype="int64")
    key = (topic_codes.astype("int64") << 32) | partitions
    blocked = np.zeros(len(replicas), dtype=bool)
    if exclude is not None and len(topics):
        bad = np.array([exclude.search(str(tp)) is not None for tp in topics], dtype=bool)
        blocked = bad[topic_codes]
    return replicas, BrokerReplicas(codes.astype("int64"), key, replicas["size_bytes"].to_numpy(dtype="int64"),
                                    replicas["is_future"].to_numpy(dtype=bool), blocked)


def plan_broker(disks: pd.DataFrame, replicas: pd.DataFrame, rules: Rules | None = None,
                drain: frozenset[str] | set[str] = frozenset()) -> BrokerPlan:
    """disks: one row per log dir of the broker (log_dir, error null when online, total_bytes, usable_bytes,
    used_bytes = bytes of every copy in it, futures included; optionally cordoned). replicas: the broker's copies
    (log_dir, topic, partition, size_bytes, is_future); those of dirs that cannot give (below their band) may be left
    out."""
    rules = rules or Rules()
    disks = disks.reset_index(drop=True)
    online = disks["error"].isna().to_numpy()
    names = disks["log_dir"].tolist()
    drained = np.array([n in drain for n in names], dtype=bool)
    total = disks["total_bytes"].to_numpy(dtype="float64")
    used0 = disks["used_bytes"].fillna(0).to_numpy(dtype="int64")
    unknown_drain = sorted(set(drain) - set(names))
    if unknown_drain:
        p = ArrayPlan([], [], [], [], used0.astype("float64"), np.full(len(names), np.nan),
                      np.full(len(names), np.nan), np.full(len(names), np.nan), 0, "refused",
                      f"no log dir {unknown_drain[0]} on this broker")
        kept = replicas.iloc[:0]
    else:
        kept, arrays = replica_arrays(names, online, replicas, rules.exclude_topics)
        cordoned = (disks["cordoned"].astype("boolean").fillna(False).to_numpy(dtype=bool)
                    if "cordoned" in disks.columns else None)
        p = plan_arrays(BrokerDirs(names, online, total, disks["usable_bytes"].to_numpy(dtype="float64"), used0,
                                   drained, cordoned), arrays, rules)
    moves = _empty_moves()
    if p.rows:
        moves = pd.DataFrame({
            "topic": kept["topic"].to_numpy()[p.rows],
            "partition": kept["partition"].to_numpy(dtype="int64")[p.rows],
            "from_dir": [names[i] for i in p.src], "to_dir": [names[i] for i in p.dst],
            "size_bytes": np.array(p.size, dtype="int64"),
            "step": np.arange(1, len(p.rows) + 1, dtype="int64")})
    frame = pd.DataFrame({
        "log_dir": names, "online": online, "drained": drained, "total_bytes": total,
        "used_before": used0, "used_after": p.used_after.astype("int64"), "band_low": p.low, "band_high": p.high,
        "capacity_bytes": p.cap})
    return BrokerPlan(moves, frame, p.lower_bound, p.status, p.reason)
