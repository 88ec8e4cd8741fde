"""A snapshot's replicas as the driver found them when it appended it (held._one): each replica's partition row
of the history, its disk's group (forecast_codes.distinct) and the replicas' order by disk, kept beside the
history with a fingerprint of the columns that say which copies they are. The next snapshot of the same
fingerprint holds the same copies in the same order, so its append reads only their sizes and takes the rest from
here: at 20M replicas, reading every column of the snapshot and finding each replica's partition and disk again was
a quarter of the append (docs/forecast-performance.md, "The copies kept: a fingerprint of the replicas").

The fingerprint is a hash of the encoded bytes of the IDENTITY columns' chunks in the snapshot's Parquet files (with
the files' Arrow schema and each row group's row count): equal bytes decode to equal values, so two snapshots of the
same fingerprint list the same replicas in the same order, whatever their sizes. A writer that writes the same
copies in the same way (collect, synth's grown fleets) writes the same bytes; any other difference (a copy moved,
another order, another compression) only makes the fingerprints differ, and the append reads the snapshot whole, as
without a map, but for copies moved to other dirs of their brokers in place: the same hash without the log dirs
(PLACED) then matches, and forecast_replica_moves reads the sizes and dirs and patches this map. Only the hash's
collisions (blake2b, 128 bits) could mislead it.

Files (forecast_columns' invariants: fresh names, fsynced before the manifest names them, named again while the
same): `replicas-<token>.npy`, (3, R) int32: rows, groups and the order by disk (-1 in the third row's first place:
already in disk order), or (5, R): since 2026-12-06, when not in disk order, also the rows and the groups taken in
that order, so that an append takes them mapped instead of gathering 20M of each (ordered_rows);
`replicas-<token>.parquet`, the groups' cluster, broker, log_dir. The manifest's "replica_map": {"snapshot",
"fingerprint", "count", "map", "disks", "placed", "by_row"} ("placed", since 2026-12-07: the fingerprint without
the log dirs, fingerprints; a map without it is not read as moved, forecast_replica_moves). "by_row" (since
2026-12-07, stop 73) names a third file, `replicas-<token>.npy`, (3, rows) int32: each history row's copies' places
in the snapshot's order (forecast_partition_sizes.copies_by_row), from which the next snapshot of these copies has
its partitions' medians gathered, not scattered (docs/forecast-performance.md, "Medians gathered"); "": none can be
(a row of more than three copies); absent (a map of before) or not whole: the medians are scattered, and the file
found and written at the next write. A driver of before ignores it, and its write lets the file go. A map of
three rows that is not in disk order is written again with five (`files` None) by the append that takes it up; a
driver of before reads a map of five rows as none (it reads the snapshot whole once).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit.forecast import npy as forecast_npy
from mover.audit.forecast.members import Read, sorted_groups
from mover.audit.forecast.partition_sizes import copies_by_row

# The replica columns that say which copies a snapshot holds, and in which order (everything but their sizes).
IDENTITY = ("cluster", "broker", "log_dir", "topic", "partition", "is_future")
# Those less the log dir: which copies on which brokers, in which order. A snapshot alike in these and not in
# IDENTITY holds the map's copies in its order, some moved to other dirs of their brokers (read_as_moved).
PLACED = tuple(name for name in IDENTITY if name != "log_dir")


def fingerprint(path: Path, dataset: str = "replicas", columns: tuple[str, ...] = IDENTITY,
                optional: tuple[str, ...] = ()) -> str | None:
    """The hash of snapshot `path`'s `dataset`'s `columns` (and those of `optional` it has) as encoded (the
    module's docstring); None when its files do not read as Parquet or lack one of `columns`."""
    return fingerprints(path, dataset, columns, optional)[0]


def fingerprints(path: Path, dataset: str = "replicas", columns: tuple[str, ...] = IDENTITY,
                 optional: tuple[str, ...] = (), apart: tuple[str, ...] = ("log_dir",)) -> tuple[str | None, ...]:
    """(fingerprint(), the same hash without the columns `apart`: PLACED's, for the replicas), from one read of
    the encoded columns; (None, None) where fingerprint() is None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole, placed = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    try:
        # The files a read of the dataset reads, in its order (not a glob of our own: a file it reads that the
        # hash left out would let a change there go unseen).
        files = [Path(f) for f in pq.ParquetDataset(path / dataset).files]
        if not files:
            return None, None
        for file in files:
            meta = pq.ParquetFile(file)
            for digest in (whole, placed):
                digest.update(str(meta.schema_arrow).encode())
            data = meta.metadata
            with open(file, "rb") as f:
                for g in range(data.num_row_groups):
                    group = data.row_group(g)
                    for digest in (whole, placed):
                        digest.update(group.num_rows.to_bytes(8, "little"))
                    chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
                    if not all(name in chunks for name in columns):
                        return None, None
                    # The schema hashed above says which of `optional` the file has.
                    for name in (*columns, *(name for name in optional if name in chunks)):
                        chunk = chunks[name]
                        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                        f.seek(start)
                        body = f.read(chunk.total_compressed_size)
                        if len(body) != chunk.total_compressed_size:
                            return None, None
                        whole.update(body)
                        if name not in apart:
                            placed.update(body)
    except (OSError, ValueError, pa.ArrowException):
        return None, None
    return whole.hexdigest(), placed.hexdigest()


@dataclass
class ReplicaMap:
    """A snapshot's replicas as found (the module's docstring): all current (no future copy), each with a row."""
    snapshot: str
    fingerprint: str
    rows: np.ndarray  # (R,) int32: each replica's row of the history's keys
    group: np.ndarray  # (R,) int32: its disk's group, a row of `disks`
    by_disk: np.ndarray  # the replicas' order by disk (forecast_members.by_disk_order); empty: in it already
    disks: pd.DataFrame  # the groups' cluster, broker, log_dir (forecast_codes.distinct's names)
    files: tuple[str, str] | None = None  # the kept files it was read from (named again while the same)
    # `rows` and `group` taken in the order by disk, when `by_disk` is not empty (None: not found yet).
    rows_by_disk: np.ndarray | None = None
    group_by_disk: np.ndarray | None = None
    # The snapshot's fingerprint without its log dirs (fingerprints: PLACED); None: not known (a map of before).
    placed: str | None = None
    # Made from a kept map with some copies moved in place (forecast_replica_moves): that map and the places of the
    # copies moved, for the append's copies compared (forecast_append.moved_in_place); or with some added or gone
    # (forecast_replica_adds): that map, the places of those gone and the rows of those added. Not kept in files.
    moved_from: tuple[Any, ...] | None = None
    # Each history row's copies' places (forecast_partition_sizes.copies_by_row): a snapshot of these copies has its
    # partitions' medians gathered from them (medians_by_row). Its kept file (named again while the copies' rows and
    # order are the same, as in a map of copies moved in place); "": none can be (a row of more than three copies);
    # None: not found yet (written with the map: save_by_row).
    by_row: np.ndarray | None = None
    by_row_file: str | None = None

    def ordered_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(each copy's row, its disk's group), the copies in the disks' order."""
        if not len(self.by_disk):
            return self.rows, self.group
        if self.rows_by_disk is None or self.group_by_disk is None:
            self.rows_by_disk = np.take(self.rows, self.by_disk)
            self.group_by_disk = sorted_groups(self.group, len(self.disks))
        return self.rows_by_disk, self.group_by_disk

    def per_disk(self) -> np.ndarray:
        """Each group's count of copies (int64), searched for in the groups in the disks' order (kept with the map):
        not a count of every copy's group (0.08-0.1 s at 20M replicas, three times in an append of copies moved)."""
        ordered = self.ordered_rows()[1]
        return np.diff(np.searchsorted(ordered, np.arange(len(self.disks) + 1, dtype=ordered.dtype))).astype(np.int64)

    def entry(self, files: tuple[str, str]) -> dict[str, Any]:
        return {"snapshot": self.snapshot, "fingerprint": self.fingerprint, "count": len(self.rows),
                "map": files[0], "disks": files[1], **({"placed": self.placed} if self.placed is not None else {}),
                **({"by_row": self.by_row_file} if self.by_row_file is not None else {})}


def disks_named(disks: pd.DataFrame, names: list[tuple[Any, Any, Any]]) -> tuple[np.ndarray, pd.DataFrame]:
    """(each of `names`, a (cluster, broker, log_dir), as a group of `disks`: a map's disks' names; `disks` with a
    group added after them for each name they lack, as first named): the disks of copies moved or added
    (forecast_replica_moves, forecast_replica_adds), looked up one copy at a time (a few)."""
    number = {(str(c), int(b), str(d)): g for g, (c, b, d) in enumerate(zip(
        disks["cluster"].tolist(), disks["broker"].tolist(), disks["log_dir"].tolist(), strict=True))}
    added: list[tuple[str, int, str]] = []
    groups = np.empty(len(names), dtype=np.int32)
    for k, (c, b, d) in enumerate(names):
        key = (str(c), int(b), str(d))
        if key not in number:
            number[key] = len(disks) + len(added)
            added.append(key)
        groups[k] = number[key]
    if added:
        more = pd.DataFrame(added, columns=list(disks.columns)).astype(disks.dtypes.to_dict())
        disks = pd.concat([disks, more], ignore_index=True)
    return groups, disks


def holds(found: ReplicaMap, rows: np.ndarray, disks: np.ndarray) -> bool:
    """Whether `rows` on `disks` (a forecast state's copies: forecast_state.State) are the map's replicas in its
    disks' order: their rows and groups as its file keeps them in that order (copies_of then reads them there)."""
    ordered, group = found.ordered_rows()
    return len(rows) == len(ordered) and np.array_equal(rows, ordered) and np.array_equal(disks, group)


def copies_of(arrays: np.ndarray) -> np.ndarray | None:
    """The (2, R) rows and groups in the disks' order of a map's file as read (save's (3, R) in disk order or its
    (5, R)), which a state's copies may name (holds); None for any other array (a (3, R) not in disk order)."""
    if arrays.ndim != 2 or arrays.dtype != np.int32:
        return None
    if arrays.shape[0] == 5:
        return arrays[3:5]
    if arrays.shape[0] == 3 and (not arrays.shape[1] or arrays[2, 0] == -1):
        return arrays[0:2]
    return None


def save(arrays: Path, disks: Path, found: ReplicaMap) -> None:
    """The map's arrays as one (3, R) int32 file (mapped by load), its disks' names as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ordered = not len(found.by_disk)
    if ordered:
        # -1 in the third row's first place: already in disk order (the rest of that row is not read).
        order = np.zeros(len(found.rows), dtype=np.int32)
        order[:1] = -1
        rows = [found.rows, found.group, order]
    else:
        rows = [found.rows, found.group, found.by_disk, *found.ordered_rows()]
    # By write(2), not mapped: a new file's pages faulted in through a mapping read its holes first (forecast_npy).
    forecast_npy.save_rows(arrays, rows, np.int32, len(found.rows))
    pq.write_table(pa.Table.from_pandas(found.disks.reset_index(drop=True), preserve_index=False), disks)


def save_by_row(path: Path, found: ReplicaMap, rows: int) -> bool:
    """The places of the copies of each of a history's `rows` rows (found.by_row, or copies_by_row of its copies'
    rows) as one (3, rows) int32 file, mapped by load; False, and no file, where there are none (a row of more than
    three copies): found.by_row_file is then "", so that the next write does not look for them again."""
    by_row = (found.by_row if found.by_row is not None and found.by_row.shape == (3, rows)
              else copies_by_row(found.rows, rows))
    if by_row is None:
        return False
    forecast_npy.save_rows(path, list(by_row), np.int32, rows)  # by write(2), as save's
    return True


def _by_row(where: Path, entry: dict[str, Any], rows: int, count: int) -> tuple[np.ndarray | None, str | None]:
    """(the places a map's entry names, mapped, its file) when whole and of `rows` rows and `count` copies;
    (None, "") for an entry that says there are none; (None, None) otherwise (found and written again)."""
    name = entry.get("by_row")
    if name == "":
        return None, ""
    if not isinstance(name, str):
        return None, None
    try:
        by_row = np.load(where / name, mmap_mode="r")
    except (OSError, ValueError):
        return None, None
    # A place is one of the copies' (0 .. count-1), or count: none.
    if (by_row.dtype != np.int32 or by_row.shape != (3, rows)
            or not (not rows or forecast_npy.indices_within(by_row.reshape(-1), count + 1))):
        return None, None
    return by_row, name


def load(where: Path, entry: Any, rows: int) -> ReplicaMap | None:
    """The map a manifest's "replica_map" `entry` names, if whole and of a history of `rows` rows; else None (the
    append then reads its snapshot whole)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(entry, dict) or not isinstance(rows, int) or not all(
            isinstance(entry.get(k), str) for k in ("snapshot", "fingerprint", "map", "disks")):
        return None
    try:
        arrays = np.load(where / entry["map"], mmap_mode="r")
        disks = pq.read_table(where / entry["disks"]).to_pandas()
    except (OSError, ValueError, pa.ArrowException):
        return None
    count = entry.get("count")
    if (arrays.ndim != 2 or arrays.shape[0] not in (3, 5) or arrays.dtype != np.int32 or arrays.shape[1] != count
            or list(disks.columns) != ["cluster", "broker", "log_dir"]):
        return None
    ordered = count > 0 and arrays[2, 0] == -1
    if ordered and arrays.shape[0] != 3:
        return None
    whole = ordered or not count or arrays.shape[0] == 5
    found = ReplicaMap(entry["snapshot"], entry["fingerprint"], arrays[0], arrays[1],
                       np.zeros(0, dtype=np.intp) if ordered or not count else arrays[2], disks,
                       # A map of three rows not in disk order: written again with five (the module's docstring).
                       (entry["map"], entry["disks"]) if whole else None,
                       *((arrays[3], arrays[4]) if arrays.shape[0] == 5 else (None, None)),
                       entry["placed"] if isinstance(entry.get("placed"), str) else None)
    checked = [(found.rows, rows), (found.group, len(disks)), (found.by_disk, count),
               (found.rows_by_disk, rows), (found.group_by_disk, len(disks))]
    if count and not all(a is None or forecast_npy.indices_within(a, bound) for a, bound in checked):
        return None
    found.by_row, found.by_row_file = _by_row(where, entry, rows, count)
    return found


def read_as_found(path: Path, rows: int, kept: ReplicaMap, prints: tuple[str | None, ...] | None = None,
                  ) -> Read | None:
    """Snapshot `path`'s replicas as the map `kept` found them, with only their sizes read (forecast_members.Read
    without its frame, which members_of reads only where it needs the replicas' names), when it has the map's
    fingerprint and as many replicas, every one's row among the history's `rows` and no null size; else None.
    Read.in_disk_order() then gives them in the disks' order. `prints`: its fingerprints() when found already."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    prints = prints or fingerprints(path)
    if prints[0] != kept.fingerprint or len(kept.rows) and int(kept.rows.max()) >= rows:
        return None
    try:
        column = pq.read_table(path / "replicas", columns=["size_bytes"]).column(0)
    except (OSError, pa.ArrowException):
        return None
    if len(column) != len(kept.rows) or column.null_count or not pa.types.is_integer(column.type):
        return None
    sizes = column.to_numpy()
    del column
    # A map of before has no fingerprint without the dirs: this snapshot's, of the same copies, is its own (kept from
    # now on, so that the next snapshot's moves in place are read as such).
    found = kept if kept.placed is not None else dataclasses.replace(kept, placed=prints[1])
    return Read(None, (kept.group, kept.disks), rows=kept.rows, by_disk=kept.by_disk, sizes=sizes, path=path,
                found=found)
