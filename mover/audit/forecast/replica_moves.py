"""A snapshot holding the kept map's copies in its order, some moved to other dirs of their brokers (replica_map's
PLACED fingerprint the map's, its whole one not): the moves an operator makes between the disks of a broker, which
collect writes in place (it lists each broker's copies by partition: docs/audit.md, "The copies kept"). Its append
reads only the sizes and the log dirs, as dictionary codes, and takes every copy whose dir's code is its map disk's
from the map (nearly all of them); only the moved copies are looked up by name. The new map is the old one patched:
the same rows, the moved copies' groups changed, and their places in the order by disk moved (taken out of their
old disks' runs, put into their new disks' in the snapshot's order), not found again by a sort of every copy. At
20M replicas with 1,000 moved, reading such a snapshot whole (every column, each copy's partition and disk found
again, the copies sorted by disk) made the append 4x the audit (docs/forecast-performance.md, "The append of a
snapshot whose copies changed").

The answer is the one a read of the whole snapshot gives: the same rows, each copy's disk, disks with no copy left
out and the groups numbered again without them, the order by disk stable (tests/audit/test_forecast_replica_moves.py
compares them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import threads
from mover.audit.forecast.members import Read, by_disk_order
from mover.audit.forecast.replica_map import ReplicaMap, disks_named, fingerprints

# Past this many copies moved, the order by disk is found again whole (by_disk_order), not patched a copy at a time.
PATCHED_MOVES = 1 << 16


def read_as_moved(path: Path, rows: int, kept: ReplicaMap, prints: tuple[str | None, ...] | None = None,
                  medians_of: Callable[[np.ndarray], np.ndarray | None] | None = None) -> Read | None:
    """Snapshot `path`'s replicas as the module's docstring reads them: a Read without its frame, as
    replica_map.read_as_found's, whose `found` is the new map (its files None: to write). None where that does not
    apply: another PLACED fingerprint (or none kept), another count, a null size or dir, a row past `rows`.
    `prints`: its fingerprints() when found already. `medians_of`: called with the sizes (in the snapshot's order)
    while the order by disk is patched on another thread, its answer the Read's medians."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kept.placed is None or len(kept.rows) and int(kept.rows.max()) >= rows:
        return None
    whole, placed = prints or fingerprints(path)
    if whole is None or placed != kept.placed:
        return None
    try:
        # One dictionary for every chunk: each copy's dir is then its code, compared with its map disk's.
        table = pq.read_table(path / "replicas", columns=["log_dir", "size_bytes"],
                              read_dictionary=["log_dir"]).unify_dictionaries()
    except (OSError, pa.ArrowException):
        return None
    dirs, size = table.column("log_dir"), table.column("size_bytes")
    if (table.num_rows != len(kept.rows) or size.null_count or dirs.null_count
            or not pa.types.is_integer(size.type) or not pa.types.is_dictionary(dirs.type)):
        return None
    names = dirs.chunk(0).dictionary.to_pylist() if dirs.num_chunks else []
    at, now = _moved(dirs, names, kept)
    del dirs, table
    sizes = size.to_numpy()
    del size
    group, disks = _regrouped(kept, at, now)
    count = len(disks)
    # Each disk's copies: the map's, less those moved off it, more those moved on (no count of every copy's).
    before = np.zeros(count, dtype=np.int64)
    before[:len(kept.disks)] = kept.per_disk()
    after = before - np.bincount(kept.group[at], minlength=count) + np.bincount(group[at], minlength=count)
    group_by_disk, patched = None, None
    if not len(at):  # the same dirs written otherwise (another encoding): the map's order stands
        by_disk, rows_by_disk, group_by_disk = kept.by_disk, kept.rows_by_disk, kept.group_by_disk
    elif len(at) > PATCHED_MOVES:
        by_disk, rows_by_disk = by_disk_order(group, count), None
    else:
        # Patched on a thread of its own while the medians are found (both mostly memory read: the reading thread
        # waited for each in turn, and the main thread for it).
        patched = threads.ahead(_patched_order, kept, at, group, before)
    medians = medians_of(sizes) if medians_of is not None else None
    if patched is not None:
        by_disk, rows_by_disk = patched.result()
    keep = after > 0
    if not keep.all():  # a dir left with no copy: not a disk of the copies, as a read of every copy finds them
        number = (np.cumsum(keep) - 1).astype(np.int32)
        group, disks, after = number[group], disks[keep].reset_index(drop=True), after[keep]
    if len(at) and len(by_disk):  # the groups in the disks' order: each one's number its count of times
        group_by_disk = np.repeat(np.arange(len(disks), dtype=np.int32), after)
    # The map it came from, for the append's copies compared (forecast_append.moved_in_place), without the one that
    # map came from in turn: no chain of patched arrays held through an append of several snapshots. The copies'
    # rows and order are the map's: so are their places by row, and the file that keeps them.
    found = ReplicaMap(path.name, whole, kept.rows, group, by_disk, disks, None, rows_by_disk, group_by_disk, placed,
                       (dataclasses.replace(kept, moved_from=None), at), kept.by_row, kept.by_row_file)
    return Read(None, (group, disks), rows=kept.rows, by_disk=by_disk, sizes=sizes, path=path, medians=medians,
                found=found)


def _moved(dirs: Any, names: list[str], kept: ReplicaMap) -> tuple[np.ndarray, list[str]]:
    """(the places of the copies whose dir is not their map disk's, their dirs now), a chunk at a time: each map
    disk's dir as a code of the read's dictionary, compared with every copy's code (no array of every copy made)."""
    code_of = {name: i for i, name in enumerate(names)}
    expected = np.array([code_of.get(str(d), -1) for d in kept.disks["log_dir"]], dtype=np.int64)
    at, now, lo = [], [], 0
    for chunk in dirs.chunks:
        codes = chunk.indices.to_numpy(zero_copy_only=False)
        here = np.flatnonzero(codes != expected.take(kept.group[lo:lo + len(codes)]))
        at.append(here + lo)
        now += [names[c] for c in codes[here].tolist()]
        lo += len(codes)
    return (np.concatenate(at) if at else np.zeros(0, dtype=np.int64)), now


def _regrouped(kept: ReplicaMap, at: np.ndarray, now: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """(each copy's disk group, the groups' names): the map's, the copies `at` put on the disk of their cluster
    and broker and the dir `now`, a group added for a dir the map has no copy on."""
    disks = kept.disks
    if not len(at):  # the map's own (read only: nothing below changes it), not a copy of every copy's group
        return kept.group, disks
    group = np.array(kept.group, dtype=np.int32)
    cluster, broker = disks["cluster"].tolist(), disks["broker"].tolist()
    olds = group[at].tolist()
    group[at], disks = disks_named(disks, [(cluster[g], broker[g], d) for g, d in zip(olds, now, strict=True)])
    return group, disks


def _patched_order(kept: ReplicaMap, at: np.ndarray, group: np.ndarray, before: np.ndarray,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(the copies' order by disk, their rows in it) with `group` their disks now: the map's order with the copies
    `at` taken out of their old disks' runs and put into their new disks' runs in the snapshot's order (a disk's
    run is its copies in the snapshot's order: by_disk_order is stable), the rows the same way; `before`: each
    group `group` numbers' count of the map's copies. Each moved copy's places found in its runs by a search, and
    each answer made in one pass (_spliced): no other array of every copy."""
    old, ordered, disks = kept.group, not len(kept.by_disk), len(before)
    starts = np.concatenate([[0], np.cumsum(before)[:-1]]).astype(np.int64)

    def run_of(g: int) -> np.ndarray | None:  # a disk's copies in the map's order (None: in the snapshot's)
        return None if ordered else kept.by_disk[starts[g]:starts[g] + before[g]]

    def below(g: int, copy: int) -> int:  # how many of a disk's map copies come before `copy` in the snapshot
        run = run_of(g)
        return int(np.clip(copy - starts[g], 0, before[g])) if run is None else int(np.searchsorted(run, copy))

    olds = old[at].tolist()
    out = np.sort(np.array([starts[g] + below(g, c) for g, c in zip(olds, at.tolist(), strict=True)],
                           dtype=np.int64))
    gone: dict[int, list[int]] = {}  # each old disk's moved copies, in the snapshot's order
    for g, c in sorted(zip(olds, at.tolist(), strict=True)):
        gone.setdefault(g, []).append(c)
    stayed = before - np.bincount(old[at], minlength=disks)
    start = np.concatenate([[0], np.cumsum(stayed)[:-1]]).astype(np.int64)
    # The moved copies by their new disk, then by their place in the snapshot (the stable order's), each put in its
    # new disk's run among the copies that stayed there before it.
    moved = at[np.lexsort((at, group[at]))]
    into = np.array([start[g] + below(g, c) - int(np.searchsorted(gone.get(g, []), c))
                     if g < len(before) and before[g] else start[g]
                     for g, c in zip(group[moved].tolist(), moved.tolist(), strict=True)], dtype=np.int64)
    dtype = np.int32 if len(old) < 1 << 31 else np.int64
    order = _spliced(None if ordered else kept.by_disk, len(old), out, into, moved, dtype)
    rows_in_order = kept.rows if ordered else kept.ordered_rows()[0]
    return order, _spliced(rows_in_order, len(old), out, into, kept.rows[moved], rows_in_order.dtype)


STEP = 1 << 20  # the places made at once where the source is 0, 1, 2, ... (_spliced)


def _spliced(source: np.ndarray | None, length: int, out: np.ndarray, into: np.ndarray, values: np.ndarray,
             dtype: Any) -> np.ndarray:
    """np.insert(np.delete(source, out), into, values) (`source` None: np.arange(length)), made in one array of
    `dtype`: its pieces copied once, no array between (each 80 MB at 20M copies, memory touched afresh). `out`
    sorted, `into` nondecreasing."""
    result = np.empty(length - len(out) + len(values), dtype=dtype)
    # Each insert's place in the source: the element it goes before (one past the last: at the end), found from
    # how many places out come before it (out[i] - i elements stay before out[i]).
    before = into + np.searchsorted(out - np.arange(len(out)), into, side="right")
    src = dst = i = j = 0
    while i < len(out) or j < len(into):
        next_out = int(out[i]) if i < len(out) else length + 1
        next_in = int(before[j]) if j < len(into) else length + 1
        end = min(next_out, next_in)
        dst = _copy(source, src, end, result, dst)
        src = end
        if next_in <= next_out:
            result[dst] = values[j]
            dst, j = dst + 1, j + 1
        else:
            src, i = src + 1, i + 1
    _copy(source, src, length, result, dst)
    return result


def _copy(source: np.ndarray | None, lo: int, hi: int, into: np.ndarray, at: int) -> int:
    """source[lo:hi] put at into[at:]; the place after it."""
    if source is not None:
        into[at:at + hi - lo] = source[lo:hi]
        return at + hi - lo
    for a in range(lo, hi, STEP):
        b = min(a + STEP, hi)
        into[at:at + b - a] = np.arange(a, b, dtype=into.dtype)
        at += b - a
    return at
