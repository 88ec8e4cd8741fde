"""The planner's task: the function Spark's Python workers run per partition (mapInArrow) and the driver runs on
its own pass. Its rows are sorted by dir (_dir_order), grouped by broker into steps of about columns.STEP_ROWS rows
and planned a step at a time (steps.py): in this process, or, for a big task in the driver, some steps in a spawned
helper process (_plan_steps)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mover.audit import columns, partitions, planner, spark
from mover.audit.plan import horizon, options
from mover.audit.plan.encoding import DIR_BITS, MAX_DIRS, SIZE_SHIFT
from mover.audit.plan.steps import USAGE_COLUMNS, Step, TaskDirs, TaskRows, plan_step
from mover.audit.threads import cores  # a helper process only pays where there are two

# Below this many listed dirs, the planner's task sorts its rows by each dir's place in the list (16 bits, one more for
# the unlisted dirs): numpy sorts those by radix (planner_task).
RADIX_SORT_DIRS = (1 << 16) - 1


def planner_task(rules: planner.Rules, dirs: pd.DataFrame, drained: np.ndarray,  # noqa: ANN202 (mapInArrow's)
                 plan: bool = True, growth: horizon.Growth | None = None):
    """Plans every broker of one Spark partition (only sums each dir when not `plan`). The rows arrive
    hash-partitioned by broker key, unsorted: one numpy sort by dir groups them by broker and, within it, by dir
    (Spark's own grouping would sort them in the JVM and hand each broker over as a separate frame). A broker's disk
    usage is summed here from its rows, so the snapshot is read once. The brokers are planned a step of about
    columns.STEP_ROWS rows at a time; called with `helper` (the driver's own pass), a second process plans some of
    the steps of a big task (HELPER_ROWS, options.py). With `growth` (plan --horizon), the brokers are planned at
    the horizon (horizon.py)."""
    known = TaskDirs(dirs["log_dir"].to_numpy(dtype=object), dirs["online"].to_numpy(dtype=bool),
                     dirs["cordoned"].to_numpy(dtype=bool),
                     dirs["total_bytes"].to_numpy(dtype="float64", na_value=np.nan),
                     dirs["usable_bytes"].to_numpy(dtype="float64", na_value=np.nan), drained,
                     np.searchsorted(dirs["bkey"].to_numpy(),
                                     np.arange(int(dirs["bkey"].max()) + 2 if len(dirs) else 1)),
                     rules, plan, growth.arrays(dirs) if growth is not None else None)
    if not plan:
        return _summing_task(known)

    def plan_partition(batches: Any, helper: bool | Helper = False) -> Any:
        arrays = _keyed_arrays(batches)
        if arrays is None:
            return
        code, sf, pkey = arrays
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
        steps: list[Step] = [[]]
        for i, broker in enumerate(brokers):
            steps[-1].append(broker)
            if i + 1 < len(brokers) and brokers[i + 1][2] - steps[-1][0][1] > columns.STEP_ROWS:
                steps.append([])

        def rows_of(step: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            rows = order[step[0][1]:step[-1][2]] if step else order[:0]
            return code[rows], sf[rows], pkey[rows]

        outs = _plan_steps(known, steps, rows_of,
                           helper if isinstance(helper, Helper) else helper and len(code) >= options.HELPER_ROWS)
        out = TaskRows()
        for part in outs:
            out.extend(part)
        out.strays = int(counts[0])
        batch = out.batch()
        yield batch
        if out.strays:
            yield out.stray_batch(batch)

    plan_partition.known = known  # type: ignore[attr-defined]  (for Helper)
    return plan_partition


class Helper:
    """_plan_steps' second process, started ahead by the driver's own pass while it reads the replicas: a spawned
    interpreter takes about a second to import what it needs and read its arguments, which the pass's thread
    otherwise waited for (0.7 s of the 20M plan, docs/audit.md#performance) while the other core was idle. Started
    from a thread of its own (the executor starts its process at the first submit, which waits for the child to read
    its arguments). `close` stops it, used or not."""

    def __init__(self, task: Any) -> None:
        import multiprocessing
        import threading
        from concurrent.futures import ProcessPoolExecutor

        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_helper_start, initargs=(task.known,))
        threading.Thread(target=self._start, name="planner-helper-start", daemon=True).start()

    def _start(self) -> None:
        try:
            self.pool.submit(int)
        except RuntimeError:  # closed before it started
            pass

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _summing_task(known: TaskDirs) -> Any:
    """planner_task without the planning (`audit` alone: plan.driver_usage): the same disk rows (steps.py's
    KIND_DISK, a row for every listed dir of a broker with rows) and stray count, with each dir's sums counted
    straight into its slot (numpy's bincount), a step of rows at a time: no sort of the rows by dir, no gathering
    of them in that order, no helper process (whose pickled steps cost more than the sums). At 10M replicas, 0.3 s
    of CPU against 1.7 s sorted, 2.7 s with the helper (docs/audit.md#performance)."""
    starts = known.starts
    listed = int(starts[-1])

    def sum_partition(batches: Any, helper: bool = False) -> Any:  # noqa: ARG001 (planner_task's signature)
        arrays = _keyed_arrays(batches)
        if arrays is None:
            return
        code, sf, pkey = arrays
        # Slot `listed` holds the rows of dirs log_dirs does not list (code -1): counted, then left out.
        sums = {c: np.zeros(listed + 1, dtype=np.int64) for c in ("used", "rows", *USAGE_COLUMNS)}
        for at in range(0, len(code), columns.STEP_ROWS):
            part = code[at:at + columns.STEP_ROWS]
            slot = starts[np.maximum(part >> DIR_BITS, 0)] + (part & (MAX_DIRS - 1))
            slot[part < 0] = listed
            flags = sf[at:at + columns.STEP_ROWS]
            raw = flags >> SIZE_SHIFT
            current = (flags & 6) == 0
            futures = (flags & 2) != 0
            sums["rows"] += np.bincount(slot, minlength=listed + 1)
            negative = bool((raw < 0).any())
            used = _slot_sums(slot, np.maximum(raw, 0) if negative else raw, listed + 1)
            sums["used"] += used
            sums["used_bytes"] += _slot_sums(slot, raw, listed + 1) if negative else used
            # Counts and 32-bit hashes as float64 weights: a step's sums stay below 2**53, exact.
            sums["replicas"] += np.bincount(slot, weights=current, minlength=listed + 1).astype(np.int64)
            hashes = pkey[at:at + columns.STEP_ROWS] & partitions.HASH_MASK
            hashes[~current] = 0
            sums["partition_hash"] += np.bincount(slot, weights=hashes, minlength=listed + 1).astype(np.int64)
            if futures.any():
                sums["future_replicas"] += np.bincount(slot[futures], minlength=listed + 1)
                sums["future_bytes"] += _slot_sums(slot[futures], raw[futures], listed + 1)
        out = TaskRows()
        per_broker = np.add.reduceat(sums["rows"][:listed], starts[:-1]) if listed else np.zeros(0, np.int64)
        # (reduceat gives a broker without dirs the next dir's count: such brokers have no slot, none is listed)
        for bkey in np.flatnonzero((per_broker > 0) & (starts[1:] > starts[:-1])).tolist():
            lo, hi = int(starts[bkey]), int(starts[bkey + 1])
            used = sums["used"][lo:hi]
            nan = np.full(hi - lo, np.nan)
            out.disks.append((bkey, used, planner.ArrayPlan([], [], [], [], used.astype("float64"), nan, nan, nan, 0,
                                                             "balanced")))
            out.usage.append([sums[c][lo:hi] for c in USAGE_COLUMNS])
        out.strays = int(sums["rows"][listed])
        batch = out.batch()
        yield batch
        if out.strays:
            yield out.stray_batch(batch)

    return sum_partition


def _slot_sums(slot: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """The int64 sums of `values` (int64) per slot, wrapping as int64 addition does (np.add.reduceat's), by two
    float64 bincounts of the values' 32-bit halves: exact while `values` has at most 2**20 entries (columns.STEP_ROWS),
    each half's sum staying below 2**53."""
    assert len(values) <= 1 << 20
    high = np.bincount(slot, weights=values >> 32, minlength=length).astype(np.int64)
    low = np.bincount(slot, weights=values & 0xFFFFFFFF, minlength=length).astype(np.int64)
    with np.errstate(over="ignore"):
        return (high << 32) + low


def _dir_order(known: TaskDirs, code: np.ndarray) -> np.ndarray:
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


def _plan_steps(known: TaskDirs, steps: list[Step], rows_of: Any, helper: bool | Helper) -> list[TaskRows]:
    """Each step's output, in the steps' order. With `helper`, once no JVM is starting here (spark.starting: its
    start keeps the cores busy) and while HELPER_ROWS rows or more are left to plan, a second process (spawned: the
    driver holds a JVM gateway and pyarrow's threads, which a fork would copy half-alive) plans a step whenever it
    has fewer than two waiting, and this one plans the others: the planning is Python, a core per process, and on a
    local master the JVM has nothing to do meanwhile. A step the helper could not plan (the process died, or would
    not start) is planned here; an error of the planner itself is raised here too, as without a helper. As with any
    spawned process, the child imports the program's main module: mover-audit's entry points guard theirs (`if
    __name__ == "__main__"`), and so must a program that calls compute() or scan() on a local master. A Helper
    already started is used from the first step; its caller closes it."""
    outs: list[Any] = [None] * len(steps)
    pool = helper.pool if isinstance(helper, Helper) else None
    may_start = not isinstance(helper, Helper) and helper and cores() > 1
    own = None  # a pool started here, shut down here
    try:
        waiting: list[Any] = []
        for i, step in enumerate(steps):
            left = steps[-1][-1][2] - step[0][1] if step else 0
            if (may_start and left >= options.HELPER_ROWS and i + 1 < len(steps) and not spark.starting()):
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                may_start = False
                pool = own = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_helper_start, initargs=(known,))
            waiting = [f for f in waiting if not f.done()]
            if pool is not None and len(waiting) < 2 and i + 1 < len(steps):
                try:
                    outs[i] = pool.submit(_helper_plan, step, *rows_of(step))
                    waiting.append(outs[i])
                    continue
                except RuntimeError:  # its process died (BrokenProcessPool): the rest planned here
                    pool = None
            outs[i] = plan_step(known, step, *rows_of(step))
        for i, step in enumerate(steps):
            if not isinstance(outs[i], TaskRows):
                try:
                    outs[i] = outs[i].result()
                except Exception:  # noqa: BLE001 (planned here instead: a planner error is raised here as well)
                    outs[i] = plan_step(known, step, *rows_of(step))
    finally:
        if own is not None:
            own.shutdown(wait=True, cancel_futures=True)
    return outs


_helper_dirs: TaskDirs | None = None


def _helper_start(known: TaskDirs) -> None:
    global _helper_dirs
    _helper_dirs = known


def _helper_plan(step: Step, code: np.ndarray, sf: np.ndarray, pkey: np.ndarray) -> TaskRows:
    assert _helper_dirs is not None
    return plan_step(_helper_dirs, step, code, sf, pkey)


def _keyed_arrays(batches: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A task's Arrow batches as its (code, sf, pkey) columns; None when they hold no row."""
    import pyarrow as pa

    full = [b for b in batches if b.num_rows]
    if not full:
        return None
    table = pa.Table.from_batches(full)
    return tuple(table.column(c).to_numpy() for c in ("code", "sf", "pkey"))  # type: ignore[return-value]
