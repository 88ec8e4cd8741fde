"""The forecast on the driver, with no Spark job: for a local master and a fleet whose compact history the driver
holds (fits: DRIVER_CELLS, DRIVER_REPLICA_ROWS, or its estimated peak within half the memory available). The same
answer as forecast.compute's Spark steps (the tests check it), from a kept history of either version (Spark's,
history.py, taken up; its own, columns.py, written). held.py brings the history up to the window and writes it
back: a new snapshot costs its own read (pyarrow, one groupby) and one more file. Here every partition is fitted in
numpy batches (fits.py, forecast.fit_arrays) and every disk's forecast found from its copies (disks.py).

The forecast read from every snapshot with pandas, without the kept history (the tests' and the accuracy bench's
reference) is forecast_reference.compute_local.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import snapshot, threads
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import disks as forecast_disks
from mover.audit.forecast import fits as forecast_fits
from mover.audit.forecast import held as forecast_held
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import layout as layout
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import settings as forecast_settings

if TYPE_CHECKING:
    from mover.audit.forecast import ForecastResult

PARTITION_KEYS, DISK_KEYS = forecast_history.PARTITION_KEYS, forecast_history.DISK_KEYS
# The driver holds the history's sizes as doubles, partitions x snapshots, and reads one snapshot's replicas at a
# time with pandas. Within DRIVER_CELLS sizes (320 MB, about 1.3M partitions over 31 daily snapshots) and
# DRIVER_REPLICA_ROWS replicas it always does; past them, when its peak as estimated (PEAK_*) is within
# MEMORY_SHARE of the memory the system has available (/proc/meminfo's MemAvailable) as the forecast starts; past
# that, the forecast is Spark's. The estimate is above the peaks measured (docs/audit.md, "The driver's memory"):
# 1.0-1.1 GB at 2M replicas x 31 snapshots (estimated 1.17 GB), 8.1-8.4 GB at 20M x 31 (9.45 GB).
DRIVER_CELLS = 40_000_000
DRIVER_REPLICA_ROWS = 4_000_000
PEAK_BASE = 250 << 20  # the interpreter, pandas and pyarrow
PEAK_PER_CELL = 30  # the sizes (8 B), the kept fits, the history read and written
PEAK_PER_REPLICA = 150  # a snapshot's replicas as read, the copies' arrays, the disks' rows
MEMORY_SHARE = 0.5


def fits(paths: list[Path], keep: bool = True, available: int | None = None) -> bool:
    """Whether the driver forecasts the window `paths` itself: every snapshot it would read is one it reads with
    pyarrow (snapshot.driver_readable), and the history it would hold and the replicas it would read are within
    DRIVER_CELLS and DRIVER_REPLICA_ROWS, or its estimated peak (peak_bytes) within MEMORY_SHARE of the memory
    `available` (default: the system's now)."""
    from mover.audit import partitions

    step = forecast_history.plan(paths, keep, forecast_held.stored_snapshots)
    reading = {*(paths if step.how in ("in memory", "rebuilt") else step.new), paths[-1]}
    rows = snapshot.dataset_rows(paths[-1] / "partitions")
    replicas = [snapshot.dataset_rows(p / "replicas") for p in reading]
    if rows is None or any(r is None for r in replicas):
        return False
    cells, most = rows * len(paths), max(r for r in replicas if r is not None)
    if cells > DRIVER_CELLS or most > DRIVER_REPLICA_ROWS:
        room = memory_available() if available is None else available
        if peak_bytes(cells, most) > MEMORY_SHARE * room:
            return False
    return all(snapshot.driver_readable(p, max(most, DRIVER_REPLICA_ROWS), partitions.LOCAL_ROWS) for p in reading)


def peak_bytes(cells: int, replica_rows: int) -> int:
    """The driver's peak memory, as estimated, for a history of `cells` sizes and snapshots of `replica_rows`."""
    return PEAK_BASE + PEAK_PER_CELL * cells + PEAK_PER_REPLICA * replica_rows


def memory_available() -> int:
    """The memory the system has available now (MemAvailable), in bytes; 0 when it does not say (Linux does)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def compute(paths: list[Path], since_hours: float | None = None, moves: pd.DataFrame | None = None,
            keep_history: bool = True, meanwhile: Callable[[ForecastResult], None] | None = None) -> ForecastResult:
    """forecast.compute on the driver (fits() says when): the kept history brought up to `paths`, every partition
    fitted in batches (from its kept fit where that still holds: forecast_kept.reused), each disk's residual sums
    by bincounts over its current copies; the history written back with the fits. The fleet root's kept history is
    held from the read to the write (forecast_columns.locked): a second forecast of it at once is refused.
    `meanwhile` (forecast.compute's) is called with the answer while the history is being written."""
    with forecast_columns.locked(paths[0].parent) if keep_history else contextlib.nullcontext(), _no_cyclic_gc():
        return _compute(paths, since_hours, moves, keep_history, meanwhile)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cycle collector paused for the forecast: its arrays are not containers, but the disks' rows are
    lists by the 100,000 (forecast_disks.disk_rows), and each full collection walked every object held: 0.35 s of
    a 20M-replica append (perf). What cycles the forecast makes are collected when it is done."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _compute(paths: list[Path], since_hours: float | None, moves: pd.DataFrame | None,
             keep_history: bool, meanwhile: Callable[[ForecastResult], None] | None = None) -> ForecastResult:
    held = forecast_held.update(paths, keep_history)
    # The new columns of sizes (and a new replica map: 400 MB at 20M replicas when the copies changed) written on a
    # thread of their own while the copies and the fits are found (threads: they only read them), where the
    # history's write after the fits waited for them: 54 MB an append of 20M replicas, 1.7 GB a cold forecast.
    # forecast_held.keep waits for them first.
    columns_written = (threads.ahead(forecast_columns.write_columns, paths[0].parent, held.sizes, held.replica_map)
                       if forecast_held.writes(held) else None)
    try:
        return _forecast_held(paths, since_hours, moves, held, columns_written, meanwhile)
    finally:
        if columns_written is not None:  # not left writing once the root's lock is let go (an error before keep)
            with contextlib.suppress(Exception):
                columns_written.result()


def _forecast_held(paths: list[Path], since_hours: float | None, moves: pd.DataFrame | None,
                   held: forecast_held.Held, columns_written: Future[None] | None,
                   meanwhile: Callable[[ForecastResult], None] | None = None) -> ForecastResult:
    """_compute's forecast of the history `held` brought up to `paths`, written back (keep) once its fits are
    found, after `columns_written` (forecast_columns.write_columns, on its thread) has ended; `meanwhile` called
    with the answer while it is written."""
    from mover.audit import forecast as fc

    hours = dict(zip((p.name for p in paths), forecast_held.hours_of(paths).tolist(), strict=True))
    t = np.array([hours[n] for n in held.snapshots])
    # The dirs as a block per snapshot where they are (forecast_members.block_rows): each block's hours repeated,
    # not each row's snapshot looked up (0.2 s for 1.2M dirs).
    block = forecast_members.block_rows(held.dirs)
    dir_hours = (np.repeat([hours[s] for s in held.dirs["snapshot"].iloc[::block]], block) if block
                 else held.dirs["snapshot"].map(hours))
    # Their hours added to a shallow copy, not to a copy of every column (assign: 64 MB of memory touched afresh at
    # 40,000 dirs x 31 snapshots).
    log_dirs = held.dirs.copy(deep=False)
    log_dirs["hours"] = dir_hours
    disks, as_of = forecast_members.disks_as_of(log_dirs, block)
    wanted = set(as_of["as_of"].tolist())
    chosen = [p for p in paths if hours[p.name] in wanted] or [paths[-1]]
    # The partitions' settings found on the other thread while the copies are (threads): the kept ones when the
    # newest snapshot's partitions have their fingerprint and the keys are the ones they were found for.
    entry = held.stored.get("retention") if held.stored is not None and not (held.upgrade or held.renumbered) \
        else None
    settings = threads.ahead(forecast_settings.find, paths[-1], held.keys, forecast_history.where(paths[0].parent),
                             entry, held.key_files if held.key_files and len(held.keys) == held.key_rows else None,
                             held.partitions)
    copies = forecast_members.members_of(held.keys, chosen, hours, as_of, disks, moves,
                         held.newest if chosen[-1] == paths[-1] else None, held.ahead)
    held.newest, held.ahead = None, {}
    current = ~copies.future & (copies.partition >= 0)
    every = bool(current.all())  # nearly always: then no copy of the copies' arrays (160 MB each at 20M)
    names_of = copies.disk_names
    disk_keys = pd.DataFrame({"cluster": names_of["cluster"].to_numpy(dtype=object),
                              "broker": names_of["broker"].astype(int).to_numpy(),
                              "log_dir": names_of["log_dir"].to_numpy(dtype=object)})
    retention = settings.result()
    found, errors = forecast_fits.fitted(
        held, t, (retention.bytes, retention.ms), copies.partition if every else copies.partition[current],
        copies.disk if every else copies.disk[current], disk_keys)
    # The disks' residual sums (an append's changed rows: 0.5 s of its wall at 20M, on one thread) found on
    # another thread while the disks' rows are found from the fits, which take the rate errors only at their end;
    # the history's write waits for them (they make the state it writes).
    disk_se = threads.ahead(errors)
    del errors  # the append's sums hold its moved counts (200 MB at 20M): let go with them once found
    # Held for the write (let go once written: _keep_then_let_go): read afresh, they are written; kept, their file
    # is named again (their pages are the file's, mapped).
    held.retention = retention
    del settings, retention
    # The history written on the other thread while the disks' rows are found from the fits (it only reads what
    # they read; 0.6-1 s of a 20M append, its fsyncs included) and while the caller writes its outputs
    # (`meanwhile`: in five of eight 20M appends the write, its fsyncs most of it, ended 0.2-0.5 s after the
    # disks' rows, and the outputs waited for it); waited for before its outcome (held.how) is.
    try:
        with threads.behind(_keep_then_let_go, paths[0].parent, held, columns_written, disk_se):
            result, drawn = _disks(t, log_dirs, block, disks, copies, found, disk_se.result, disk_keys)
            answer = fc.ForecastResult(paths, since_hours, result, drawn)
            if meanwhile is not None:
                meanwhile(answer)
    finally:  # not left running past the root's lock (an error before the write waited for it)
        with contextlib.suppress(Exception):
            disk_se.result()
    answer.kept = held.how
    return answer


def _keep_then_let_go(root: Path, held: forecast_held.Held, columns_written: Future[None] | None = None,
                      state_found: Future[Any] | None = None) -> None:
    """forecast_held.keep once `columns_written` and `state_found` (what sets held.state) have ended, then what
    only the write needed let go while the disks' rows are still being found: the state, the new column, the kept
    fits' and map's pages (at 20M replicas the state alone is 270 MB, held past the write to the end of the
    forecast, at its peak of memory: every page of it one more faulted in afresh)."""
    try:
        for future in (columns_written, state_found):
            if future is not None:
                future.result()
        forecast_held.keep(root, held)
    finally:
        held.state = held.prior = held.replica_map = held.retention = None
        held.sizes = forecast_columns.Grid([], 0)
        held.kept = np.zeros((0, len(forecast_kept.KEPT)))


def _disks(t: np.ndarray, log_dirs: pd.DataFrame, block: int | None, disks: pd.DataFrame,
           copies: forecast_members.Copies, found: dict[str, np.ndarray], disk_se: Callable[[], np.ndarray],
           disk_keys: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every disk's forecast, the flagged disks' history to draw) from the partitions' fits and the disks' rate
    errors `disk_se` gives (once their copies' sums are found: forecast_disks.disk_rows)."""
    from mover.audit import forecast as fc

    # Each partition's rate, cap and rate error (a copy of no fitted partition, row -1, takes the last: 0, inf,
    # nan, as forecast_group's left join leaves it); a nan rate or cap as forecast_group fills it. Taken per copy
    # by disk_rows a chunk at a time: three arrays of every copy were memory touched afresh.
    # nan_to_num's answer (nan 0, an infinity the largest double of its sign) in two passes, not its six (6.7M
    # rates: 0.19 -> 0.08 s in a probe).
    # In place: forecast_fits.fitted's arrays are its own (made with the absent row), read by nothing after this.
    rate, cap = found["rate"], found["cap"]
    rate[np.isnan(rate)] = 0.0
    np.clip(rate, -np.finfo(float).max, np.finfo(float).max, out=rate)
    cap[np.isnan(cap)] = math.inf  # nan_to_num would make inf the largest double
    disks_count = len(disk_keys)
    # Nearly always no copy is a future one: then every copy is its own, with no index of all 20M copies made in
    # memory touched afresh (docs/forecast-performance.md, "Fewer fresh pages").
    at = np.flatnonzero(~copies.future) if copies.future.any() else None

    def names(picked: np.ndarray) -> list[str]:  # only the few named (each disk's top partitions)
        return copies.labels(picked if at is None else at[picked])

    def of_mine(values: np.ndarray) -> np.ndarray:
        return values if at is None else values[at]

    columns = forecast_disks.disk_rows(
        of_mine(copies.disk), disks_count, forecast_disks.run_sums(copies.disk, copies.size, disks_count),
        copies.total, disk_se, of_mine(copies.partition), rate,
        of_mine(copies.size), cap, found["se"], names)
    rows = {**{c: disk_keys[c].to_numpy() for c in DISK_KEYS}, **columns}
    found_frame = pd.DataFrame(rows, columns=[c.split(" ")[0] for c in fc._DISK_SCHEMA.split(", ")])
    # Its list columns as disk_rows made them (lists and float arrays), not checked again value by value: the
    # check was 0.06 s of a 20M append's serial end (160,000 projections).
    result = fc.finish(disks, found_frame, declared=True)
    flagged = layout.flagged(result)[DISK_KEYS].astype({"broker": log_dirs["broker"].dtype})
    if block:  # the flagged disks' places in a block, then their rows of every block: no merge of 1.2M dirs' names
        place = log_dirs.iloc[:block][DISK_KEYS].reset_index(drop=True).reset_index().merge(flagged, on=DISK_KEYS)
        at = (np.arange(0, len(log_dirs), block)[:, None] + place["index"].to_numpy()[None, :]).ravel()
        drawn = log_dirs.iloc[at][list(layout.HISTORY)]
    else:
        drawn = log_dirs.merge(flagged, on=DISK_KEYS)[list(layout.HISTORY)]
    return result, drawn.sort_values([*DISK_KEYS, "hours"]).reset_index(drop=True)


