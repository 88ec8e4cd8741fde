"""The driver's kept history (held.py keeps it): version 2 of forecast_history's layout, a file per snapshot's
sizes, so that a new snapshot is appended as one more file and the ones it keeps are mapped, not read and written
again (at 20M replicas x 31 snapshots the version-1 table, 1.9 GB, took 10 s to read and 12 s to write at every
append: docs/audit.md, "Version 2: a file per snapshot"). Version 3 adds patches to the kept fits (below); a
version-2 manifest reads as one with none.

    ROOT/_forecast_history/manifest.json      {"version": 3, "snapshots": [names, oldest first], "rows": N,
                                               "keys": [files], "sizes": [a file per snapshot], "kept": file,
                                               "kept_as_of": [snapshot, appends], "kept_patches": [[file,
                                               snapshot, appends], ...], "kept_patched": rows in
                                               them, "appends": count,
                                               "dirs": [a file per snapshot], "state": file, "state_rows": [2 files],
                                               "copies": file, "replica_map": {...}, "retention": {...}}
    ROOT/_forecast_history/keys-<token>.parquet   cluster, topic, partition of the rows added at once, in row order
                                                  (the files in the manifest's order make rows 0 .. N-1)
    ROOT/_forecast_history/sizes-<token>.npy      one snapshot's size of every row there was when it was written
                                                  (float64; nan: no point); a row added since has none there
    ROOT/_forecast_history/kept-<token>.npy       (N, len(forecast_kept.KEPT)) each row's kept fit (nan: none)
                                                  as of the snapshot `kept_as_of` names (its line's value then, its
                                                  age counted to `appends` then). Since 2026-12-07 it may hold more
                                                  rows than N (nan): room for the rows later appends add, whose fits
                                                  then go in their patches; a driver of before reads such a file as
                                                  none, and rebuilds the history once
    ROOT/_forecast_history/kept-<token>.npz       a patch: `rows` found again by one append and their fits
                                                  `values`, as of the snapshot its entry names; the patches, oldest
                                                  first, put over the file (the row's newest fit wins)
    ROOT/_forecast_history/dirs-<token>.parquet   forecast_history.DIRS of one snapshot (an older driver's manifest
                                                  names one file of every snapshot's: read, then written per snapshot)
    ROOT/_forecast_history/state-<token>.npz      what the next append needs of the whole window (forecast_state.State;
                                                  "state" in the manifest, absent from an older driver's: the next
                                                  forecast then makes a pass over the window and writes one)
    ROOT/_forecast_history/rows-<token>.npy       the state's rows' counts, two files ("state_rows": their int32
                                                  and their float64 ones; absent: in the state file, as an older
                                                  driver wrote them)
    ROOT/_forecast_history/copies-<token>.npy     the state's copies ((2, C) int32: rows, disks), named again by the
                                                  next manifest while they are the same copies ("copies"; absent:
                                                  in the state file, as an older driver wrote them). Since
                                                  2026-12-07 "copies" may name the replica map's file instead,
                                                  when its rows in the disks' order are the state's copies
                                                  (forecast_state.load takes them from it; a driver of before
                                                  reads no state then, and makes one pass over the window)
    ROOT/_forecast_history/replicas-<token>.npy   the newest snapshot's replicas as found, and their disks' names
    ROOT/_forecast_history/replicas-<token>.parquet  (.parquet), with the fingerprint of their copies
                                                  (forecast_replica_map; "replica_map": {snapshot, fingerprint,
                                                  count, map, disks, placed, by_row}; absent: the next append reads
                                                  its snapshot whole), named again while the copies are the same;
                                                  by_row, a third .npy: each row's copies' places (since
                                                  2026-12-07; "" none can be, absent: found at the next write)
    ROOT/_forecast_history/retention-<token>.npy  the partitions' settings by row as of the newest snapshot, with
                                                  the fingerprint of its partitions and the keys files they are of
                                                  (forecast_settings; "retention": {fingerprint, rows, keys,
                                                  file}; absent: the next run reads them), named again while the same

A carried fit is the same fit moved on (forecast_kept.move_on: its line's value at the newest snapshot, its age), so
an append writes only the rows it found again, as a patch; the file and the patches are moved on to the newest
snapshot as they are read (the manifest's `appends` less theirs, the hours since their snapshot). Past PATCH_SHARE
of the rows in patches (or with rows compacted, or added past the file's room: KEPT_ROOM) the kept fits are written
whole again, with none, and with room for rows added again (forecast_kept_files reads and writes them).

A row whose partition has no point left in the window stays (its kept fit cleared) until they are a quarter of the
rows; then every file is written again without them. Spark's steps read version 1 only: they have this history
written as version 1 first (as_version_1), and the driver reads theirs and writes it as version 2.

Crash-safety invariants:
- A file, once named by a manifest, is never written again: every write makes new files under a fresh token.
- The manifest is replaced by a rename after every file it names is written and fsynced, and the directory is
  fsynced after the rename: a reader, or a restart after a crash, finds the old set whole or the new set whole.
- Files no manifest names (a crashed write's, the ones the new manifest dropped) are removed after the rename,
  under the lock; left behind by a crash, they are removed by the next write.
- One writer at a time: `locked` holds an exclusive lock on ROOT/.forecast_history.lock from the read to the
  write; a second forecast of the same root is refused (ForecastBusy), not interleaved.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import threads
from mover.audit.errors import ForecastBusy
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import kept_files as forecast_kept_files
from mover.audit.forecast import replica_map as forecast_replica_map
from mover.audit.forecast import settings as forecast_settings
from mover.audit.forecast import state as forecast_state

VERSION = 3
READS = (2, 3)  # a version-2 manifest is one with no patches to its kept fits
LOCK = ".forecast_history.lock"
DEAD_SHARE = 0.25  # rows with no point left in the window, as a share of all, past which the files are rewritten


class Grid:
    """Partitions x snapshots of sizes held as one array per snapshot (a mapped file, or an array made this run),
    each as long as the rows were when it was made (the rows past it: nan). `files[j]`: the kept file column j
    is, None for one still to write."""

    def __init__(self, columns: list[np.ndarray], rows: int, files: list[str | None] | None = None) -> None:
        self.columns = columns
        self.rows = rows
        self.files = files if files is not None else [None] * len(columns)

    @classmethod
    def of_matrix(cls, sizes: np.ndarray) -> Grid:
        return cls([sizes[:, j] for j in range(sizes.shape[1])], len(sizes))

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, len(self.columns)

    def __getitem__(self, rows: slice) -> np.ndarray:
        """The rows `rows` (a slice of step 1) of every column, as one matrix."""
        lo, hi, _ = rows.indices(self.rows)
        out = np.full((max(hi - lo, 0), len(self.columns)), np.nan)
        for j, column in enumerate(self.columns):
            end = min(hi, len(column))
            if end > lo:
                out[:end - lo, j] = column[lo:end]
        return out

    def column(self, j: int) -> np.ndarray:
        """Column `j` over every row (nan past the rows it was written with)."""
        c = self.columns[j]
        if len(c) == self.rows:
            return np.asarray(c)
        out = np.full(self.rows, np.nan)
        out[:len(c)] = c
        return out

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The whole rows `rows` (sorted) of every column, as one matrix: only their pages of a mapped column read."""
        # Column by column into a matrix of columns (numpy's take into a contiguous run, not a gather into every
        # n-th place: 0.09 -> 0.06 s for 131,072 rows of 30 columns), then made row-major as the fits read it.
        out = np.empty((len(self.columns), len(rows)))
        for j, c in enumerate(self.columns):
            if not len(rows) or rows.max() < len(c):
                np.take(c, rows, out=out[j])
            else:  # a column shorter than the rows: written before rows were added, nan past its end
                inside = rows < len(c)
                out[j] = np.nan
                out[j, inside] = c[rows[inside]]
        return np.ascontiguousarray(out.T)

    def with_columns(self, more: list[np.ndarray], rows: int) -> Grid:
        return Grid([*self.columns, *more], rows, [*self.files, *[None] * len(more)])

    def alive(self) -> np.ndarray:
        """Whether each row has a point in any column."""
        alive = np.zeros(self.rows, dtype=bool)
        for column in self.columns:
            alive[:len(column)] |= np.isfinite(column)
        return alive

    def take(self, rows: np.ndarray) -> Grid:
        """The rows `rows` (a boolean mask over all rows), every column made anew (to write)."""
        out = []
        for column in self.columns:
            whole = np.full(self.rows, np.nan)
            whole[:len(column)] = column
            out.append(whole[rows])
        return Grid(out, int(rows.sum()))


@dataclass
class Stored:
    """A version-2 or 3 history as read: its manifest's grid and files, the keys, sizes, kept fits and dirs."""
    snapshots: list[str]
    keys: pd.DataFrame
    sizes: Grid
    kept: np.ndarray
    dirs: Any  # pd.DataFrame; read(as_table=True): a pyarrow Table of the same columns
    key_files: list[str] = field(default_factory=list)
    dir_files: dict[str, str] = field(default_factory=dict)  # snapshot -> the file holding its dirs' rows
    # The kept fits' file as mapped, rows past `kept`'s included (nan: room for rows an append adds:
    # forecast_kept_files); None: no more rows than `kept`.
    kept_room: np.ndarray | None = None


def manifest(root: Path) -> dict[str, Any] | None:
    """The version-2 or 3 manifest of the kept history under `root`, None when there is none (or another version)."""
    try:
        data = json.loads((forecast_history.where(root) / forecast_history.MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") not in READS:
        return None
    snapshots, sizes = data.get("snapshots"), data.get("sizes")
    if not (isinstance(snapshots, list) and isinstance(sizes, list) and len(sizes) == len(snapshots)
            and isinstance(data.get("rows"), int) and isinstance(data.get("keys"), list)):
        return None
    return data


def snapshots(root: Path) -> list[str] | None:
    """The grid of the driver's history under `root` (None: there is none)."""
    data = manifest(root)
    return data["snapshots"] if data is not None else None


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """The fleet root's kept history held by this process (ForecastBusy when another holds it); a root this
    process cannot write is not locked (nothing will be kept there)."""
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ForecastBusy(f"another forecast is updating the kept history of {root}: "
                               "run this one when it is done") from None
        yield
    finally:
        os.close(fd)  # the lock goes with it


def names_array(values: pd.Series) -> Any:
    """A column of names as Arrow's dictionary (a categorical's codes and categories, no string made per row)."""
    import pyarrow as pa

    if isinstance(values.dtype, pd.CategoricalDtype):
        return pa.DictionaryArray.from_arrays(pa.array(values.cat.codes.to_numpy(np.int32)),
                                              pa.array(values.cat.categories.to_numpy(dtype=object), pa.string()))
    return pa.array(values, pa.string())


def no_dirs() -> pd.DataFrame:
    """A history's dirs when it has none: forecast_history.DIRS's columns, no row."""
    return pd.DataFrame(columns=list(forecast_history.DIRS))


def dirs_schema() -> Any:
    from mover.audit.plan_layout import arrow_schema

    return arrow_schema(forecast_history.DIRS)


def read(root: Path, data: dict[str, Any], drop: int, width: int, as_table: bool = False) -> Stored | None:
    """The history `data` names, less its first `drop` snapshots: the sizes mapped (read only as the fits ask),
    the kept fits mapped copy-on-write (the fits replace them in place); None when a file is missing or not what
    the manifest says (then it is rebuilt). `width`: the kept fits' columns; `as_table`: the dirs as a pyarrow
    Table (the driver adds the new snapshots' before making them a frame once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = forecast_history.where(root)
    rows = data["rows"]
    try:
        tables = [pq.read_table(where / f, read_dictionary=["cluster", "topic"]) for f in data["keys"]]
        keys = pa.concat_tables(tables).to_pandas(self_destruct=True, split_blocks=True) if tables else None
        columns = [np.load(where / f, mmap_mode="r") for f in data["sizes"][drop:]]
        room = forecast_kept_files.read_kept(where, data, rows, width, room=True)
        kept = room[:rows]
        dirs, dir_files = _read_dirs(where, data, drop, as_table)
    except (OSError, ValueError, KeyError, TypeError, IndexError, pa.ArrowException):  # a file gone, cut short
        return None
    if (keys is None or len(keys) != rows
            or any(c.ndim != 1 or c.dtype != np.float64 or len(c) > rows for c in columns)):
        return None
    # The one column made int64 in place: astype copies every column (the names' codes too, 54 MB of memory touched
    # afresh at 6.7M keys).
    keys["partition"] = keys["partition"].to_numpy(np.int64)
    return Stored(data["snapshots"][drop:], keys, Grid(columns, rows, list(data["sizes"][drop:])), kept, dirs,
                  list(data["keys"]), dir_files, room if len(room) > rows else None)


def kept_fits(root: Path, width: int = len(forecast_kept.KEPT)) -> np.ndarray | None:
    """The kept fits of the history under `root` as of its newest snapshot (None: none that reads)."""
    data = manifest(root)
    if data is None:
        return None
    try:
        return np.array(forecast_kept_files.read_kept(forecast_history.where(root), data, data["rows"], width))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _read_dirs(where: Path, data: dict[str, Any], drop: int, as_table: bool = False) -> tuple[Any, dict[str, str]]:
    """The dirs' rows of the grid's snapshots past the first `drop` (a frame, or with `as_table` a pyarrow Table),
    and the file of each (none from an older driver's one file of every snapshot's: each is written on its own at
    the next write). The dropped snapshots' files are not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    named = data["dirs"]
    if isinstance(named, str):
        table = pq.read_table(where / named)
        return (table if as_table else table.to_pandas()), {}
    if not isinstance(named, list) or len(named) != len(data["snapshots"]):
        raise ValueError("the manifest's dirs are not a file per snapshot")
    files = dict(zip(data["snapshots"][drop:], named[drop:], strict=True))
    tables = [pq.read_table(where / f, schema=dirs_schema()) for f in files.values()]
    if as_table:
        return (pa.concat_tables(tables) if tables else dirs_schema().empty_table()), files
    return pa.concat_tables(tables).to_pandas() if tables else no_dirs(), files


def write_columns(root: Path, sizes: Grid, replica_map: forecast_replica_map.ReplicaMap | None = None) -> None:
    """The columns of `sizes` not yet in a file written now, each under a fresh name and fsynced, its name put in
    `sizes.files`, so that write() names it instead of writing it (the driver writes them while the fits are
    found: a column is final once the snapshot is read); so is `replica_map` when it is new (its `files`: 400 MB at
    20M replicas, which write() wrote at the end of an append whose copies changed). Nothing names them until
    write()'s manifest does: a crash or a failed write leaves files no manifest names, which the next write removes
    (the module's invariants). An OSError leaves what was not written to write()."""
    where = forecast_history.where(root)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    try:
        where.mkdir(parents=True, exist_ok=True)
        for j, (column, file) in enumerate(zip(sizes.columns, sizes.files, strict=True)):
            if file is None:
                path = where / f"sizes-{token}-{j}.npy"
                np.save(path, np.ascontiguousarray(column, dtype=np.float64))
                _fsync(path)  # on disk before a manifest can name it
                sizes.files[j] = path.name
        if replica_map is not None and replica_map.files is None:
            arrays, disks = where / f"replicas-{token}-0.npy", where / f"replicas-{token}-1.parquet"
            forecast_replica_map.save(arrays, disks, replica_map)
            for path in (arrays, disks):
                _fsync(path)  # on disk before a manifest can name them
            replica_map.files = (arrays.name, disks.name)
    except OSError:
        return


def write(root: Path, snapshots: list[str], keys: pd.DataFrame, sizes: Grid, kept: np.ndarray, dirs: pd.DataFrame,
          key_files: list[str], key_rows: int, state: forecast_state.State | None = None,
          dir_files: dict[str, str] | None = None, found: forecast_kept_files.KeptFound | None = None,
          replica_map: forecast_replica_map.ReplicaMap | None = None,
          retention: forecast_settings.Retention | None = None) -> None:
    """Writes the history: the columns of `sizes` not yet in a file, the keys past `key_rows` (the rows
    `key_files` already hold; all of them when it is 0), the kept fits, the dirs of the snapshots `dir_files`
    has no file for, the next append's state (forecast_append, when given) and the newest snapshot's replicas as
    found (forecast_replica_map, when given), then the manifest naming them (the module's invariants)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = forecast_history.where(root)
    where.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    written: list[Path] = []

    def fresh(kind: str, suffix: str) -> Path:
        path = where / f"{kind}-{token}-{len(written)}{suffix}"
        written.append(path)
        return path

    names = list(key_files) if key_rows else []
    if len(keys) > (key_rows if key_files else 0) or not names:
        more = keys.iloc[key_rows if names else 0:]
        path = fresh("keys", ".parquet")
        pq.write_table(pa.table({"cluster": names_array(more["cluster"]), "topic": names_array(more["topic"]),
                                 "partition": pa.array(more["partition"].to_numpy(np.int32))}), path)
        names.append(path.name)
    files = []
    for column, file in zip(sizes.columns, sizes.files, strict=True):
        if file is None:
            path = fresh("sizes", ".npy")
            np.save(path, np.ascontiguousarray(column, dtype=np.float64))
            file = path.name
        files.append(file)
    kept_entries = forecast_kept_files.write_kept(where, fresh, kept, snapshots[-1], found)
    # A file per snapshot, so that an append writes only its own: every snapshot's dirs made into Arrow again
    # were 0.9 s of a 20M-replica append (40,000 dirs x 31 snapshots).
    dir_names, have = [], dir_files or {}
    # Each snapshot to write found by comparing names: an append makes one pass over the 1.2M dirs of a 20M-replica
    # history, where py-spy put 0.4 s on Series.isin and the groupby (a full write makes one pass per snapshot).
    of = dirs["snapshot"].to_numpy()
    for snapshot in snapshots:
        if snapshot in have:
            dir_names.append(have[snapshot])
            continue
        rows = dirs[of == snapshot]
        path = fresh("dirs", ".parquet")
        pq.write_table(pa.Table.from_pandas(rows.astype({"broker": "int32", "total_bytes": "Int64"}),
                                            schema=dirs_schema(), preserve_index=False,
                                            nthreads=threads.FROM_PANDAS), path)
        dir_names.append(path.name)
    state_path = fresh("state", ".npz") if state is not None else None
    map_files: tuple[str, str] | None = None
    if replica_map is not None:
        # The same copies as the map's files hold: named again (a file named is never written again).
        map_files = replica_map.files
        if map_files is None or not all((where / f).is_file() for f in map_files):
            arrays, disks = fresh("replicas", ".npy"), fresh("replicas", ".parquet")
            forecast_replica_map.save(arrays, disks, replica_map)
            map_files = (arrays.name, disks.name)
        # The copies' places by row written here, at the history's write after the fits, not with the map's arrays
        # (write_columns) while the fits are found: only the next append reads them. A whole read found them with
        # its medians (forecast_partition_sizes.sizes_on_keys); a map without them (a map of before) has them found
        # here, on the thread that has the other core while the disks' rows and the outputs are found (0.4-0.7 s at
        # 20M replicas).
        if replica_map.by_row_file is None or replica_map.by_row_file and not (
                where / replica_map.by_row_file).is_file():
            path = fresh("replicas", ".npy")
            if forecast_replica_map.save_by_row(path, replica_map, len(keys)):
                replica_map.by_row_file = path.name
            else:  # none written: none to fsync
                written.remove(path)
                replica_map.by_row_file = ""
    copies_name, row_names = None, []
    if state_path is not None and state is not None:
        forecast_state.save(state_path, state)
        ints, floats = fresh("rows", ".npy"), fresh("rows", ".npy")
        forecast_state.save_rows(ints, floats, state)
        row_names = [ints.name, floats.name]
        # The copies unchanged since their file was written: named again (a file named is never written again).
        copies_name = state.copies_file if state.copies_file and (where / state.copies_file).is_file() else None
        if copies_name is None and map_files is not None and replica_map is not None and \
                forecast_replica_map.holds(replica_map, state.copy_rows, state.copy_disks):
            # New copies that are the map's in its disks' order (nearly always): its file stands for them, not
            # 160 MB more written at 20M (the file is written above, or named again).
            copies_name = map_files[0]
        if copies_name is None:
            copies_path = fresh("copies", ".npy")
            forecast_state.save_copies(copies_path, state)
            copies_name = copies_path.name
    retention_entry: dict[str, Any] | None = None
    if retention is not None and retention.fingerprint is not None and len(retention.bytes) == len(keys):
        # The kept settings, found for these keys: named again (a file named is never written again).
        file = retention.file if retention.file and (where / retention.file).is_file() else None
        if file is None:
            path = fresh("retention", ".npy")
            forecast_settings.save(path, retention)
            file = path.name
        retention_entry = retention.entry(file, names, len(keys))
    for path in written:  # on disk before the manifest names them
        _fsync(path)
    body = {"version": VERSION, "snapshots": snapshots, "rows": len(keys), "keys": names, "sizes": files,
            **kept_entries, "dirs": dir_names,
            **({"state": state_path.name, "state_rows": row_names, "copies": copies_name} if state_path else {}),
            **({"replica_map": replica_map.entry(map_files)} if replica_map is not None and map_files else {}),
            **({"retention": retention_entry} if retention_entry is not None else {})}
    tmp = where / f".manifest.{token}.tmp"
    tmp.write_text(json.dumps(body) + "\n")
    _fsync(tmp)
    # The rename is the commit: before it the old history is the one, after it the new one.
    tmp.rename(where / forecast_history.MANIFEST)
    _fsync(where)  # the rename itself durable before the old files go
    named = {forecast_history.MANIFEST, *names, *files, kept_entries["kept"],
             *(patch[0] for patch in kept_entries["kept_patches"]), *dir_names,
             *([state_path.name, copies_name, *row_names] if state_path and copies_name else []),
             *(map_files or ()),
             *([replica_map.by_row_file] if replica_map is not None and map_files and replica_map.by_row_file
               else []),
             *([retention_entry["file"]] if retention_entry is not None else [])}
    for entry in where.iterdir():  # the files dropped, a crashed write's, a version-1 history's series/ and dirs/
        if entry.name in named:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


V1_BATCH = 65536  # rows written at once by as_version_1: 16 MB of sizes at 31 snapshots


def as_version_1(root: Path) -> bool:
    """The version-2 history under `root` written as version 1 (forecast_history's layout, Spark's), so that
    Spark's steps take it up instead of reading every snapshot of the window again: the keys as plain strings,
    each row's sizes as one array (nan made null), a batch of rows at a time (the driver holds one batch's
    sizes, not the matrix); the rows with no point left and the kept fits are not carried (Spark's steps keep
    neither). Swapped in whole (forecast_history.swap_in), under the caller's lock. False when there is no
    version-2 history, or it does not read (it is then rebuilt as before)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = manifest(root)
    if data is None:
        return False
    where = forecast_history.where(root)
    try:
        width = np.load(where / data["kept"], mmap_mode="r").shape[1]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False
    stored = read(root, data, 0, width)
    if stored is None:
        return False
    count = len(stored.snapshots)
    schema = pa.schema([("cluster", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                        ("sizes", pa.list_(pa.float64()))])

    def names(values: pd.Series) -> Any:
        return pa.array(values.to_numpy(dtype=object), pa.string())

    def writes(tmp: Path) -> None:
        (tmp / "series").mkdir(parents=True)
        (tmp / "dirs").mkdir()
        with pq.ParquetWriter(tmp / "series" / "part-00000.parquet", schema) as writer:
            for lo in range(0, stored.sizes.rows, V1_BATCH):
                sizes = stored.sizes[lo:lo + V1_BATCH]
                alive = np.isfinite(sizes).any(axis=1)
                sizes, keys = sizes[alive], stored.keys.iloc[lo:lo + V1_BATCH][alive]
                flat = sizes.ravel()
                lists = pa.ListArray.from_arrays(pa.array(np.arange(len(sizes) + 1, dtype=np.int32) * count),
                                                 pa.array(flat, mask=np.isnan(flat)))
                writer.write_table(pa.table({"cluster": names(keys["cluster"]), "topic": names(keys["topic"]),
                                             "partition": pa.array(keys["partition"].to_numpy(np.int32)),
                                             "sizes": lists}, schema=schema))
        dirs = stored.dirs.astype({"broker": "int32", "total_bytes": "Int64"})
        pq.write_table(pa.Table.from_pandas(dirs, schema=dirs_schema(), preserve_index=False),
                       tmp / "dirs" / "part-00000.parquet")

    forecast_history.swap_in(root, stored.snapshots, writes)
    return True
