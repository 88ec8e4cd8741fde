"""A snapshot holding the kept map's copies in its order with some copies added or gone: partitions created or
deleted, replicas reassigned to or from a broker. collect lists each broker's copies by partition, so such copies
come in or leave at a few places and every other copy keeps its order (docs/audit.md, "The copies kept"). Neither
of replica_map's fingerprints then matches, and the append read the snapshot whole: every copy's partition and
disk found again by name, its copies sorted by disk, their places by row found again; at 20M replicas with 1,000
partitions added, 2x the audit of that snapshot (docs/forecast-performance.md, "Copies added").

Here the snapshot's names are read as dictionary codes (read_codes, on the reading thread), each copy's partition
and disk packed into two integers in the codes' space, and the map's copies packed the same way from its rows and
disks (aligned, on the main thread, once the history's keys are read): the two lists are walked side by side, a
chunk at a time, and where they differ the nearest place where they meet again is searched for. A copy of the
snapshot equal to one of the map in every name is that copy (a snapshot lists a copy once), so it takes the map's
row and disk; only the copies between (added) are looked up by name, and the map's copies left over are gone.
The new map is the old one patched: the copies' order by disk and their places by row moved with them.

The answer is the one a read of the whole snapshot gives: the same rows, the partitions new to the history after
the keys as they first appear, each copy's disk, disks with no copy left out (tests/audit/test_forecast_replica_adds.py
compares them). Where the lists differ at more than MOST_EDITS places, or the names do not pack, the snapshot is
read whole, as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import threads
from mover.audit.forecast.members import Read
from mover.audit.forecast.partition_sizes import (
    PARTITION_KEYS,
    copies_by_row,
    group_medians,
    key_codes,
    medians_by_row,
)
from mover.audit.forecast.replica_map import ReplicaMap, disks_named

STEP = 1 << 20  # copies compared at once where the lists run alike
FIRST_STEP = 1 << 12  # the first compare past a place where they differed (doubled while they run alike)
WINDOWS = (1 << 10, 1 << 14, 1 << 18)  # how far ahead a place where they meet again is searched for
MOST_EDITS = 1 << 14  # places where the lists differ past which the snapshot is read whole
MOST_ADDED = 1 << 16  # copies added past which the snapshot is read whole (each looked up by name)
LOW_BITS = (1 << 20) - 1  # the packed keys' bits that _rows_of's table is of
PACK_STEP = 1 << 18  # history rows packed at once (_packed_map)
MIX = np.uint64(0x9E3779B97F4A7C15)  # a copy's two integers made one for the search (then compared exactly)


@dataclass
class Codes:
    """A snapshot's replicas as read_codes finds them without the history: each copy's partition `key` and disk
    `disk` packed in the codes' space of its dictionaries, its size, the columns to look up the copies added."""
    path: Path
    prints: tuple[str | None, ...]
    key: np.ndarray  # (R,) int64: (cluster * topics + topic) * partitions + partition, in the dictionaries' codes
    disk: np.ndarray  # (R,) int64: (cluster * brokers + broker - least broker) * dirs + dir
    sizes: np.ndarray  # (R,) int64
    table: Any  # the pyarrow Table of cluster, topic, log_dir (one dictionary each), broker, partition
    names: dict[str, np.ndarray]  # cluster, topic, log_dir: the dictionaries (object arrays of str)
    spans: tuple[int, int, int]  # partitions, least broker, brokers


def read_codes(path: Path, prints: tuple[str | None, ...]) -> Codes | None:
    """The module's first step, on the reading thread: snapshot `path`'s names as codes of one dictionary per column
    and its sizes, each copy's two integers packed. None where that does not apply (a future copy, a null, a
    negative partition or broker, names that do not pack in 62 bits); the snapshot is then read whole."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = ("cluster", "log_dir", "topic")
    if not prints or prints[0] is None:
        return None
    try:
        table = pq.read_table(path / "replicas", columns=["cluster", "broker", "log_dir", "topic", "partition",
                                                          "size_bytes", "is_future"],
                              read_dictionary=list(names)).unify_dictionaries()
    except (OSError, pa.ArrowException):
        return None
    if not table.num_rows or any(table.column(c).null_count for c in table.column_names):
        return None
    if not all(pa.types.is_dictionary(table.column(n).type) for n in names) or not all(
            pa.types.is_integer(table.column(c).type) for c in ("broker", "partition", "size_bytes")):
        return None
    future = table.column("is_future")
    if not pa.types.is_boolean(future.type) or any(chunk.true_count for chunk in future.chunks):
        return None
    dictionaries = {name: np.asarray(table.column(name).chunk(0).dictionary.to_pylist(), dtype=object)
                    for name in names}
    broker, partition = table.column("broker"), table.column("partition")
    if pc.min(partition).as_py() < 0 or pc.min(broker).as_py() < 0:
        return None
    least = pc.min(broker).as_py()
    spans = (pc.max(partition).as_py() + 1, least, pc.max(broker).as_py() - least + 1)
    clusters, topics, dirs = (len(dictionaries[n]) for n in ("cluster", "topic", "log_dir"))
    if clusters * topics * spans[0] >= 1 << 62 or clusters * spans[2] * dirs >= 1 << 62:
        return None
    key = np.empty(table.num_rows, dtype=np.int64)
    disk = np.empty(table.num_rows, dtype=np.int64)
    at = 0
    # A row group at a time, from Arrow's buffers as they are (no array of every copy per column made first).
    for batch in table.select(["cluster", "topic", "log_dir", "broker", "partition"]).to_batches():
        c, t, d = (batch.column(k).indices.to_numpy(zero_copy_only=False) for k in range(3))
        b, p = (batch.column(k).to_numpy(zero_copy_only=False) for k in (3, 4))
        part = slice(at, at + batch.num_rows)
        cluster = c.astype(np.int64)
        np.multiply(cluster, topics, out=key[part])
        key[part] += t
        key[part] *= spans[0]
        key[part] += p
        np.multiply(cluster, spans[2], out=disk[part])
        disk[part] += b
        disk[part] -= least
        disk[part] *= dirs
        disk[part] += d
        at += batch.num_rows
    sizes = table.column("size_bytes").to_numpy().astype(np.int64, copy=False)
    return Codes(path, prints, key, disk, sizes, table.select(["cluster", "topic", "log_dir", "broker",
                                                                "partition"]), dictionaries, spans)


def frame_of(codes: Codes) -> pd.DataFrame | None:
    """The snapshot's replicas as forecast_members.read_replicas reads them (its columns, the names as
    categoricals), made from what read_codes read, where as_read did not apply: not read again (1.2-1.8 s at 20M
    replicas, on the main thread). None once as_read let them go."""
    import pyarrow as pa

    from mover.audit import forecast as fc

    if codes.table is None:
        return None
    table = codes.table.append_column("size_bytes", pa.array(codes.sizes)).append_column(
        "is_future", pa.array(np.zeros(len(codes.sizes), dtype=bool)))  # read_codes read none (else no codes)
    return table.select(fc._REPLICA_COLUMNS).to_pandas(split_blocks=True)


def _code_of(dictionary: np.ndarray, values: Any) -> np.ndarray:
    """Each of `values` (strings) as a code of `dictionary`; -1 where it has none."""
    return pd.Index(dictionary).get_indexer(pd.Index(np.asarray(values, dtype=object)))


def _packed_map(codes: Codes, kept: ReplicaMap, keys: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(each history row's partition packed as codes.key packs a copy's, each map disk's as codes.disk does): -1
    for one the snapshot has no names for (no copy of the snapshot packs to it)."""
    topics, dirs = len(codes.names["topic"]), len(codes.names["log_dir"])
    partitions, least, brokers = codes.spans
    kc, kt = key_codes(keys, pd.Index(codes.names["cluster"]), pd.Index(codes.names["topic"]))
    kp = keys["partition"].to_numpy(np.int64)
    key = np.empty(len(keys), dtype=np.int64)
    # A step of rows at a time: the temporaries of 6.7M rows each were memory touched afresh (0.3-0.7 s in all).
    for lo in range(0, len(keys), PACK_STEP):
        c, t, p = kc[lo:lo + PACK_STEP], kt[lo:lo + PACK_STEP], kp[lo:lo + PACK_STEP]
        key[lo:lo + PACK_STEP] = np.where((c >= 0) & (t >= 0) & (p >= 0) & (p < partitions),
                                          (c * topics + t) * partitions + p, -1)
    disks = kept.disks
    dc = _code_of(codes.names["cluster"], disks["cluster"].astype(str))
    dd = _code_of(codes.names["log_dir"], disks["log_dir"].astype(str))
    db = disks["broker"].to_numpy(np.int64) - least
    disk = np.where((dc >= 0) & (dd >= 0) & (db >= 0) & (db < brokers), (dc * brokers + db) * dirs + dd, -1)
    return key, disk.astype(np.int64)


def _runs(codes: Codes, kept: ReplicaMap, key_of_row: np.ndarray, disk_of_group: np.ndarray,
          ) -> list[tuple[int, int, int]] | None:
    """The map's copies found in the snapshot: runs of (snapshot place, map place, length) alike in both, in order,
    the places between and after them added (snapshot) or gone (map). None past MOST_EDITS places where they
    differ or MOST_ADDED copies passed over. A copy of each run is the map's own (equal in every name), whatever
    the runs: only how many are looked up by name (as_read: at most MOST_ADDED) depends on them."""
    new_key, new_disk = codes.key, codes.disk
    rows, group = kept.rows, kept.group
    size_new, size_old = len(new_key), len(rows)

    def old(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        return key_of_row.take(rows[lo:hi]), disk_of_group.take(group[lo:hi])

    runs: list[tuple[int, int, int]] = []
    i = j = edits = skipped = 0  # skipped: the snapshot's copies passed over so far (added)
    step = STEP
    while i < size_new and j < size_old:
        n = min(step, size_new - i, size_old - j)
        ok, od = old(j, j + n)
        differ = np.flatnonzero((new_key[i:i + n] != ok) | (new_disk[i:i + n] != od))
        alike = int(differ[0]) if len(differ) else n
        if alike:
            runs.append((i, j, alike))
            i, j = i + alike, j + alike
        if alike == n:
            step = min(2 * step, STEP)
            continue
        edits += 1
        if edits > MOST_EDITS:
            return None
        met = _met(codes, old, i, j, size_old)
        if met is None:  # no place where they meet again near: the rest of the snapshot's added, of the map's gone
            break
        i, j = i + met[0], j + met[1]
        skipped += met[0]
        # Copies listed in another order (most of them out of place) stop here, not at MOST_EDITS searches: the
        # snapshot is read whole.
        if skipped > MOST_ADDED:
            return None
        step = FIRST_STEP
    return runs


def _met(codes: Codes, old: Any, i: int, j: int, size_old: int) -> tuple[int, int] | None:
    """(a, b) of least a + b with snapshot copy i + a equal to map copy j + b in both integers, searched for in
    each of WINDOWS in turn; None where none is found (a list's end reached: its rest is added or gone)."""
    for window in WINDOWS:
        a_key, a_disk = codes.key[i:i + window], codes.disk[i:i + window]
        b_key, b_disk = old(j, min(j + window, size_old))
        mixed_a = a_key.view(np.uint64) * MIX ^ a_disk.view(np.uint64)
        mixed_b = b_key.view(np.uint64) * MIX ^ b_disk.view(np.uint64)
        order = np.argsort(mixed_b, kind="stable")
        sorted_b = mixed_b[order]
        at = np.minimum(np.searchsorted(sorted_b, mixed_a), len(sorted_b) - 1)
        hit = np.flatnonzero(sorted_b[at] == mixed_a) if len(sorted_b) else np.zeros(0, dtype=np.intp)
        if len(hit):
            b = order[at[hit]]
            for k in np.argsort(hit + b, kind="stable")[:64].tolist():  # the mix may collide: the names compared
                a, bb = int(hit[k]), int(b[k])
                if a_key[a] == b_key[bb] and a_disk[a] == b_disk[bb]:
                    return a, bb
        if len(a_key) < window and j + window >= size_old:
            break
    return None


@dataclass
class Added:
    """What as_read found: the snapshot's copies as a Read without its frame, with its map (Read.found), and the
    partitions new to the history (the keys' rows after `keys`' own, as they first appear)."""
    read: Read
    new: pd.DataFrame


def as_read(codes: Codes, kept: ReplicaMap, keys: pd.DataFrame) -> Added | None:
    """The module's second step, on the main thread once the history's `keys` are read. None where it does not
    apply (the caller then reads the snapshot whole)."""
    if len(kept.rows) and int(kept.rows.max()) >= len(keys):
        return None
    key_of_row, disk_of_group = _packed_map(codes, kept, keys)
    runs = _runs(codes, kept, key_of_row, disk_of_group)
    if runs is None:
        return None
    size_new, size_old = len(codes.key), len(kept.rows)
    # The places between the runs: added (the snapshot's), gone (the map's).
    added = _between([(i, n) for i, _, n in runs], size_new)
    if len(added) > MOST_ADDED or 2 * len(added) > size_new:  # most of them other copies: a whole read costs less
        return None
    gone = _between([(j, n) for _, j, n in runs], size_old)
    found = _looked_up(codes, kept, keys, added, key_of_row)
    if found is None:
        return None
    added_rows, added_groups, new, disks = found
    rows = np.empty(size_new, dtype=np.int32)
    group = np.empty(size_new, dtype=np.int32)
    for i, j, n in runs:
        rows[i:i + n] = kept.rows[j:j + n]
        group[i:i + n] = kept.group[j:j + n]
    rows[added], group[added] = added_rows, added_groups
    count = len(keys) + len(new)
    # Each copy of the map's new place (-1: gone), one more for a place by row of none (copies_by_row's count).
    # None where every copy kept its place (copies only added, past the last of the map's).
    new_of_old: np.ndarray | None = None
    if len(gone) or any(i != j for i, j, _ in runs):
        new_of_old = np.full(size_old + 1, -1, dtype=np.int32 if size_new < 1 << 31 else np.int64)
        for i, j, n in runs:
            new_of_old[j:j + n] = np.arange(i, i + n, dtype=new_of_old.dtype)
        new_of_old[size_old] = size_new
    # Each disk's copies: the map's (counted on its groups in the disks' order, sorted: a search per disk, not a
    # pass over every copy), less the gone, more the added.
    per_disk = np.zeros(len(disks), dtype=np.int64)
    per_disk[:len(kept.disks)] = kept.per_disk()
    per_disk -= np.bincount(kept.group[gone], minlength=len(disks))
    per_disk += np.bincount(added_groups, minlength=len(disks))
    # Disks left with no copy: not a disk of the copies, as a read of every copy finds them; the rest numbered
    # again in order (a disk's copies keep their places in the order by disk).
    keep = per_disk > 0
    if not keep.all():
        number = (np.cumsum(keep) - 1).astype(np.int32)
        group, disks, per_disk = number[group], disks[keep].reset_index(drop=True), per_disk[keep]
    # The order by disk found on the other thread while the places by row and the medians are (threads).
    ordered = threads.ahead(_order_by_disk, kept, new_of_old, added, rows, group, per_disk)
    by_row = _places_by_row(kept, new_of_old, rows, added, gone, count)
    sizes = codes.sizes
    medians = medians_by_row(by_row, sizes) if by_row is not None else group_medians(rows, sizes, count)
    if medians is None:
        return None
    whole, placed = codes.prints[0], codes.prints[1] if len(codes.prints) > 1 else None
    # The copies gone and those added, by their rows, for the append's copies compared (forecast_append.
    # moved_in_place), with the map they came from (without its own: no chain held through several snapshots).
    moved_from = (dataclasses.replace(kept, moved_from=None), gone, rows[added])
    by_disk, rows_by_disk = ordered.result()
    # The snapshot's names let go (the read's future holds `codes` to the end of the update): 0.9 GB at 20M.
    codes.key = codes.disk = np.zeros(0, dtype=np.int64)
    codes.table = None
    found_map = ReplicaMap(codes.path.name, str(whole), rows, group, by_disk, disks, None, rows_by_disk,
                           None if rows_by_disk is None else np.repeat(np.arange(len(disks), dtype=np.int32),
                                                                       per_disk), placed, moved_from, by_row)
    read = Read(None, (group, disks), rows=rows, by_disk=by_disk, sizes=sizes, path=codes.path, medians=medians,
                found=found_map)
    # In the disks' order here (its rows and groups as the map has them, its sizes gathered on both threads):
    # members_of then gathers nothing.
    return Added(read.in_disk_order(), new)


def _between(runs: list[tuple[int, int]], size: int) -> np.ndarray:
    """The places of 0 .. size-1 in none of `runs` (start, length), in order."""
    gaps, at = [], 0
    for start, n in runs:
        if start > at:
            gaps.append(np.arange(at, start))
        at = start + n
    if at < size:
        gaps.append(np.arange(at, size))
    return np.concatenate(gaps).astype(np.int64) if gaps else np.zeros(0, dtype=np.int64)


def _rows_of(wanted: np.ndarray, key_of_row: np.ndarray) -> np.ndarray:
    """Each of the packed partitions `wanted` (a few) as a row of the history (-1: none): the rows' packed keys
    whose low bits are some wanted one's (a byte each in a table that stays in the cache), then those few searched
    for among them sorted. A hash of the 6.7M keys (partition_rows) took 1.2 s at 20M replicas."""
    rows = np.full(len(wanted), -1, dtype=np.int64)
    if not len(wanted) or not len(key_of_row):
        return rows
    values, back = np.unique(wanted, return_inverse=True)
    low = np.zeros(LOW_BITS + 1, dtype=bool)
    low[values & LOW_BITS] = True
    maybe = np.flatnonzero(low[key_of_row & LOW_BITS])
    at = np.minimum(np.searchsorted(values, key_of_row[maybe]), len(values) - 1)
    hit = np.flatnonzero(values[at] == key_of_row[maybe])  # a history key is there once: one row a value
    row_of_value = np.full(len(values), -1, dtype=np.int64)
    row_of_value[at[hit]] = maybe[hit]
    return row_of_value[back]


def _looked_up(codes: Codes, kept: ReplicaMap, keys: pd.DataFrame, added: np.ndarray, key_of_row: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, pd.DataFrame] | None:
    """(the added copies' rows, their disks' groups, the partitions new to the history as they first appear, the
    disks: the map's then those new to it as they first appear), by name."""
    from mover.audit.forecast.codes import decoded, pack

    names = codes.names
    taken = codes.table.take(added) if len(added) else codes.table.slice(0, 0)
    column = {name: (np.asarray(taken.column(name).combine_chunks().indices, dtype=np.int64)
                     if name in names else taken.column(name).to_numpy().astype(np.int64))
              for name in ("cluster", "topic", "log_dir", "broker", "partition")}
    frame = pd.DataFrame({
        "cluster": pd.Categorical.from_codes(column["cluster"], categories=names["cluster"]),
        "topic": pd.Categorical.from_codes(column["topic"], categories=names["topic"]),
        "partition": column["partition"]})
    rows = _rows_of(codes.key[added], key_of_row)
    fresh = np.flatnonzero(rows < 0)
    new = pd.DataFrame({"cluster": pd.Categorical([], categories=names["cluster"]),
                        "topic": pd.Categorical([], categories=names["topic"]), "partition": np.zeros(0, np.int64)})
    if len(fresh):
        packed = pack(frame.iloc[fresh], PARTITION_KEYS)
        if packed is None:
            return None
        values, parts, _ = packed
        number, uniques = pd.factorize(values)
        rows[fresh] = len(keys) + number
        new = decoded(uniques, PARTITION_KEYS, parts, frame)
    cluster, log_dir = names["cluster"], names["log_dir"]
    groups, disks = disks_named(kept.disks, [(cluster[c], b, log_dir[d]) for c, b, d in zip(
        column["cluster"].tolist(), column["broker"].tolist(), column["log_dir"].tolist(), strict=True)])
    return rows, groups, new, disks


def _order_by_disk(kept: ReplicaMap, new_of_old: np.ndarray | None, added: np.ndarray, rows: np.ndarray,
                   group: np.ndarray, per_disk: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the copies' order by disk: forecast_members.by_disk_order of `group`, a disk's run its copies in the
    snapshot's order; their `rows` in it), from the map's: its copies' new places in its order (each disk's run
    stays in the snapshot's order), those gone taken out, the added put into their disks' runs; the rows the same
    way, from the map's own in its order (copied, not gathered from 20M places at random). Empty (and None) when in
    disk order already."""
    if not len(group) or (not len(kept.by_disk) and (group[1:] >= group[:-1]).all()):
        return np.zeros(0, dtype=np.intp), None
    size_old = len(kept.rows)
    if new_of_old is None:  # every copy of the map at its place: its order stands (none gone)
        old_order = kept.by_disk if len(kept.by_disk) else np.arange(size_old)
    else:
        old_order = new_of_old[:size_old] if not len(kept.by_disk) else new_of_old.take(kept.by_disk)
    old_rows = kept.ordered_rows()[0]
    if new_of_old is not None and (old_order < 0).any():
        stays = old_order >= 0
        stayed, stayed_rows = old_order[stays], old_rows[stays]
    else:
        stayed, stayed_rows = old_order, old_rows
    small = np.int32 if len(group) < 1 << 31 else np.int64
    if not len(added):
        return stayed.astype(small), np.array(stayed_rows, dtype=np.int32)
    # Each added copy's place: its disk's run's start among the copies that stayed, plus those of its run before it.
    kept_per_disk = per_disk - np.bincount(group[added], minlength=len(per_disk))
    starts = np.concatenate([[0], np.cumsum(kept_per_disk)[:-1]]).astype(np.int64)
    by = np.lexsort((added, group[added]))
    added, their = added[by], group[added[by]]
    into = np.array([starts[g] + int(np.searchsorted(stayed[starts[g]:starts[g] + kept_per_disk[g]], p))
                     for g, p in zip(their.tolist(), added.tolist(), strict=True)], dtype=np.int64)
    return (np.insert(stayed, into, added).astype(small, copy=False),
            np.insert(np.asarray(stayed_rows, dtype=np.int32), into, rows[added]))


def _places_by_row(kept: ReplicaMap, new_of_old: np.ndarray | None, rows: np.ndarray, added: np.ndarray,
                   gone: np.ndarray, count: int) -> np.ndarray | None:
    """Each of the `count` rows' copies' places (forecast_partition_sizes.copies_by_row of `rows`): the map's moved
    to their new places, the rows of copies added or gone found again; copies_by_row where the map has none."""
    size_new = len(rows)
    old_by_row = kept.by_row
    if old_by_row is None or old_by_row.shape[1] > count:
        return copies_by_row(rows, count)
    width = old_by_row.shape[1]
    by_row = np.full((3, count), size_new, dtype=np.int32)
    for k in range(3):
        if new_of_old is None:  # every copy of the map at its place: a place of none is the new count
            by_row[k, :width] = old_by_row[k]
            by_row[k, :width][old_by_row[k] == len(kept.rows)] = size_new
        else:
            by_row[k, :width] = new_of_old.take(old_by_row[k])
    changed = np.unique(np.concatenate([kept.rows[gone].astype(np.int64), rows[added].astype(np.int64)]))
    if not len(changed):
        return by_row
    # The changed rows' copies: the map's that stayed (its places, all of a row's: none has more than three) and the
    # added, then each row's first three in the snapshot's order.
    within = changed[changed < width]
    stayed = by_row[:, within]
    row_of = np.broadcast_to(within, stayed.shape)
    # A place of none, a gone copy's (-1), or the first copy standing in again (copies_by_row): not a copy.
    real = (stayed >= 0) & (stayed < size_new)
    real[1:] &= stayed[1:] != stayed[0]
    place = np.concatenate([stayed[real].astype(np.int64), added.astype(np.int64)])
    row = np.concatenate([row_of[real].astype(np.int64), rows[added].astype(np.int64)])
    by = np.lexsort((place, row))
    place, row = place[by], row[by]
    first = np.searchsorted(row, changed)
    many = np.diff(np.append(first, len(row)))
    if len(many) and int(many.max()) > 3:
        return None
    by_row[:, changed] = size_new
    nth = np.arange(len(row)) - np.repeat(first, many)
    by_row[nth, row] = place
    # As copies_by_row has them: a row's first copy stands in the places it has none for (none: no place at all).
    for j in (1, 2):
        by_row[j, changed] = np.where(many <= j, by_row[0, changed], by_row[j, changed])
    return by_row

