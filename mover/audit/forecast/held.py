"""The compact history in the driver's memory (Held), brought up to the window: the kept history read (either
version: Spark's, history.py, taken up; the driver's own, columns.py), each new snapshot read and appended as one
more column (only its sizes, where its copies are the kept map's: replica_map.py), the partitions first seen added
as rows, the rows with no point left dropped; and written back (keep) once driver.py has found the fits.

driver.py forecasts from what this holds; this module never calls back into it.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import columns as audit_columns
from mover.audit import threads
from mover.audit.errors import AuditError
from mover.audit.forecast import append as forecast_append
from mover.audit.forecast import codes as forecast_codes
from mover.audit.forecast import columns as forecast_columns
from mover.audit.forecast import disks as forecast_disks
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import kept as forecast_kept
from mover.audit.forecast import kept_files as forecast_kept_files
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import replica_adds as forecast_replica_adds
from mover.audit.forecast import replica_map as forecast_replica_map
from mover.audit.forecast import replica_moves as forecast_replica_moves
from mover.audit.forecast import settings as forecast_settings
from mover.audit.forecast import state as forecast_state

PARTITION_KEYS, DISK_KEYS = forecast_history.PARTITION_KEYS, forecast_history.DISK_KEYS
READ_BATCH = 65536  # kept partitions read at once (_read_kept): 16 MB of sizes at 31 snapshots


@dataclass
class Held:
    """The compact history in the driver's memory."""
    snapshots: list[str]  # the grid, oldest first
    keys: pd.DataFrame  # cluster, topic, partition: one row per partition
    sizes: forecast_columns.Grid  # (partitions, snapshots) doubles, nan: no point
    dirs: pd.DataFrame  # forecast_history.DIRS
    how: str
    kept: np.ndarray  # (partitions, len(forecast_kept.KEPT)): each partition's kept fit, nan where none
    appended: int = 0  # snapshots appended to the grid's end this time (the kept lines' band is checked on them)
    upgrade: bool = False  # a version-1 history (Spark's, or without kept fits): written as version 2, even "kept"
    # The window's newest snapshot's replicas when read to append it (_one: forecast_members.Read).
    newest: forecast_members.Read | None = None
    key_files: list[str] = field(default_factory=list)  # the kept history's keys files, holding its first key_rows
    dir_files: dict[str, str] = field(default_factory=dict)  # snapshot -> the kept file of its dirs' rows
    key_rows: int = 0
    # The kept version-2 history's manifest as read (its grid before the drop, its files, its state), None when
    # it was not read; `renumbered`: its rows compacted this time (its state then no longer fits them).
    stored: dict[str, Any] | None = None
    renumbered: bool = False
    # Its state and the columns its window dropped (forecast_append), when it has a state that reads.
    prior: tuple[forecast_state.State, list[np.ndarray]] | None = None
    state: forecast_state.State | None = None  # what the next append needs (forecast_append), to keep
    # The rows of `kept` found again this time (as of the newest snapshot), the others as read (as of the kept
    # history's newest, `kept_hours` before): forecast_fits' append from the state. None: every row is as of the newest.
    kept_found: np.ndarray | None = None
    kept_hours: float = 0.0
    # The newest snapshot's replicas as found (forecast_replica_map), to keep for the next append; None: none kept.
    replica_map: forecast_replica_map.ReplicaMap | None = None
    # Snapshots' replicas being read ahead (threads.ahead) and not yet taken: members_of takes them.
    ahead: dict[Path, Future[pd.DataFrame]] = field(default_factory=dict)
    # The partitions' settings as found (forecast_settings), to keep for the next run; None: none to keep.
    retention: forecast_settings.Retention | None = None
    # The newest snapshot's partitions being read ahead and their settings found for the keys as read
    # (forecast_settings.head_start; its answer None: the kept settings' fingerprint, none read). None: read where
    # needed.
    partitions: Future[forecast_settings.HeadStart | None] | None = None


def _one(path: Path, keys: pd.DataFrame, frame: pd.DataFrame | forecast_members.Read | None = None,
         kept: forecast_replica_map.ReplicaMap | None = None,
         ) -> tuple[forecast_partition_sizes.OnKeys, pd.DataFrame, forecast_members.Read,
                    forecast_replica_map.ReplicaMap | None]:
    """(sizes, dirs, replicas, map) of one snapshot: each partition's size (the median of its current replicas) as
    a row of the history's `keys` (the new partitions' after them), each log dir's row of forecast_history.DIRS, its
    replicas as read with their disks' groups and their rows (forecast_members.Read: members_of takes them up; no
    rows when it holds future copies: they are not among the partitions'), and its replicas as found to keep
    (forecast_replica_map; None when it holds future copies). `frame`: its replicas when already read
    (forecast_members.read_replicas), or their sizes as `kept` found them (forecast_replica_map.read_as_found).
    `kept`: the map of an earlier snapshot, taken instead of reading every column when this one has its
    fingerprint."""
    if kept is not None and not isinstance(frame, pd.DataFrame):
        found = _one_as_kept(path, keys, kept, frame)
        if found is not None:
            return found
    if isinstance(frame, forecast_replica_adds.Codes):  # copies not found by runs: the names already read
        frame = forecast_replica_adds.frame_of(frame)
    replicas = forecast_members.read_replicas(path) if not isinstance(frame, pd.DataFrame) else frame
    # The disks' groups and each dir's used bytes found on the other thread (threads) while the
    # partitions' sizes are: both only read the replicas.
    disks_ahead = threads.ahead(_dir_rows, path, replicas)
    future = replicas["is_future"].to_numpy(bool)
    # Most snapshots hold no future copy: then no copy of 20M rows to leave them out.
    current = replicas[~future] if future.any() else replicas
    on_keys = forecast_partition_sizes.sizes_on_keys(current, keys)
    if on_keys is None:
        on_keys = _sizes_then_rows(current, keys)
    disks, dirs, by_disk = disks_ahead.result()
    read = forecast_members.Read(replicas, disks, by_disk=by_disk)
    found_map = None
    if not future.any() and len(on_keys.rows) == len(replicas):
        read.rows = on_keys.rows
        # 20 ms at 20M replicas: 13 MB of encoded columns.
        print_of, placed = forecast_replica_map.fingerprints(path)
        if print_of is not None:
            found_map = forecast_replica_map.ReplicaMap(path.name, print_of, on_keys.rows.astype(np.int32),
                                                        disks[0].astype(np.int32), by_disk, disks[1],
                                                        placed=placed, by_row=on_keys.by_row)
    return on_keys, dirs, read, found_map


def _kept_read(path: Path, rows: int, kept: forecast_replica_map.ReplicaMap, prints: tuple[str | None, ...],
               medians: bool = False) -> forecast_members.Read | forecast_replica_adds.Codes | None:
    """Snapshot `path` read by the map `kept` of the history's `rows` rows: only its sizes (the same copies:
    forecast_replica_map), its sizes and dirs (some moved in place: forecast_replica_moves, with the medians where
    `medians`), or its names' codes (some added or gone: forecast_replica_adds, taken up by _one_as_kept); None
    where none of these applies."""
    def medians_of(sizes: np.ndarray) -> np.ndarray | None:  # the copies' rows and places are the map's
        return _medians(forecast_members.Read(None, (kept.group, kept.disks), rows=kept.rows, sizes=sizes), kept,
                        rows)

    return (forecast_replica_map.read_as_found(path, rows, kept, prints)
            or forecast_replica_moves.read_as_moved(path, rows, kept, prints, medians_of if medians else None)
            or forecast_replica_adds.read_codes(path, prints))


def _read_as_found(path: Path, rows: int, kept: forecast_replica_map.ReplicaMap, medians: bool,
                   ordered: bool, prints: tuple[str | None, ...] | None = None,
                   ) -> forecast_members.Read | forecast_replica_adds.Codes | pd.DataFrame:
    """_kept_read (the names' codes of a snapshot whose copies were added or gone, or, where none of its ways
    applies, the snapshot read whole: forecast_members.read_replicas), and for a read of the map's copies with
    `medians` (a snapshot to append) the partitions' medians of its sizes found on the same thread
    (forecast_members.Read.medians), while this one reads the kept history's keys and dirs: at 20M replicas 0.4 s
    of a 6.4 s append's wall that waited for the sizes, then found them. With
    `ordered` (the snapshot whose copies are the disks'), its copies then put in the disks' order there too
    (Read.in_disk_order), where the main thread gathered them: the medians first, on the snapshot's order (a
    snapshot listed partition by partition has each one's replicas together, where the scatter is cheap)."""
    prints = prints or forecast_replica_map.fingerprints(path)  # found once for both
    read = _kept_read(path, rows, kept, prints, medians)
    if not isinstance(read, forecast_members.Read) or read.sizes is None:
        # Copies added or gone: their names' codes, looked up once the history's keys are read (_one_as_kept);
        # none of those ways: the snapshot read whole here, as without a map.
        return read if read is not None else forecast_members.read_replicas(path)
    if medians and read.medians is None:
        read.medians = _medians(read, kept, rows)
    return read.in_disk_order() if ordered else read


def _medians(read: forecast_members.Read, kept: forecast_replica_map.ReplicaMap, rows: int) -> np.ndarray | None:
    """Each of the history's `rows` rows' median size in `read` (a snapshot of the copies `kept` maps, in its
    order: read_as_found, read_as_moved), gathered from the places the map keeps where it has them, else scattered
    (group_medians): the same answers. The places are the snapshot's: not those of a read put in the disks' order
    since (Read.in_disk_order), whose sizes are scattered on its rows as they are."""
    in_its_order = read.found is None or not len(read.found.by_disk) or bool(
        read.by_disk is not None and len(read.by_disk))
    if kept.by_row is not None and kept.by_row.shape == (3, rows) and read.sizes is not None and in_its_order:
        return forecast_partition_sizes.medians_by_row(kept.by_row, read.sizes)
    return forecast_partition_sizes.group_medians(read.rows, read.sizes, rows)


def _one_as_kept(path: Path, keys: pd.DataFrame, kept: forecast_replica_map.ReplicaMap,
                 read: forecast_members.Read | forecast_replica_adds.Codes | None = None,
                 ) -> tuple[forecast_partition_sizes.OnKeys, pd.DataFrame, forecast_members.Read,
                            forecast_replica_map.ReplicaMap] | None:
    """_one() of a snapshot holding the copies `kept` maps (the same fingerprint, as many replicas, no new
    partition since): only its sizes read (`read`, when read ahead), the rows, groups and order taken from the map.
    None where that does not apply (read_as_found, or sizes past group_medians' exact range): _one() then reads
    it whole."""
    if read is None:
        read = _kept_read(path, len(keys), kept, forecast_replica_map.fingerprints(path))
    new = _no_keys()
    if isinstance(read, forecast_replica_adds.Codes):  # copies added or gone: found now the keys are read
        added = forecast_replica_adds.as_read(read, kept, keys)
        if added is None:
            return None
        read, new = added.read, added.new
    if read is None or read.sizes is None:
        return None
    # Each dir's used bytes summed on the other thread while the partitions' medians are found (threads), in the
    # read's own order (the snapshot's, or the disks': Read.in_disk_order).
    dirs_ahead = threads.ahead(_dirs_of, path, read.disks[0], read.disks[1], read.sizes, not len(read.by_disk))
    medians = (read.medians if read.medians is not None and len(read.medians) == len(keys) + len(new)
               else _medians(read, kept, len(keys)))
    dirs = dirs_ahead.result()
    if medians is None:
        return None
    on_keys = forecast_partition_sizes.OnKeys(medians, new, read.rows)
    # The map it was read by, or the one made of it with the copies moved (forecast_replica_moves).
    return on_keys, dirs, read, dataclasses.replace(read.found or kept, snapshot=path.name)


def _dir_rows(path: Path, replicas: pd.DataFrame,
              ) -> tuple[tuple[np.ndarray, pd.DataFrame], pd.DataFrame, np.ndarray]:
    """(each replica's disk group and the groups' names: forecast_codes.distinct, the snapshot's rows of
    forecast_history.DIRS, the replicas' order by disk: forecast_members.by_disk_order): each dir's used bytes summed
    over the disks' groups (exact: int64), its names as plain strings to meet log_dirs'. The order is members_of's
    sort of the copies by disk (0.7-1.3 s of CPU at 20M replicas written partition by partition), found here where
    the other thread waits for the partitions' sizes."""
    group, names = disks = forecast_codes.distinct(replicas, DISK_KEYS)
    dirs = _dirs_of(path, group, names, replicas["size_bytes"].to_numpy(np.int64))
    return disks, dirs, forecast_members.by_disk_order(group, len(names))


def _dirs_of(path: Path, group: np.ndarray, names: pd.DataFrame, sizes: np.ndarray,
             by_runs: bool = False) -> pd.DataFrame:
    """The snapshot's rows of forecast_history.DIRS: each dir's used bytes, the replicas' `sizes` summed over their
    disks' groups `group` (exact: int64; `by_runs`: the groups sorted, summed a run at a time as whole numbers in
    float64, exact below 2^53 bytes a dir), its names as plain strings to meet log_dirs'."""
    import pyarrow.parquet as pq

    from mover.audit import forecast as fc

    if by_runs:
        summed = np.rint(forecast_disks.run_sums(group, sizes, len(names))).astype(np.int64)
    else:
        summed = np.zeros(len(names), dtype=np.int64)
        # On its thread beside the medians: a scatter that lets the interpreter's lock go (audit_columns.scatter).
        audit_columns.scatter(np.add, summed, group, sizes, np.int64)
    used = names.astype({"cluster": object, "log_dir": object}).assign(used_bytes=summed)
    dirs = pq.read_table(path / "log_dirs", columns=fc._DIR_COLUMNS).to_pandas().merge(used, on=DISK_KEYS,
                                                                                        how="left")
    dirs = dirs.assign(snapshot=path.name, used_bytes=dirs["used_bytes"].fillna(0).astype("int64"))
    return dirs[list(forecast_history.DIRS)]


def _sizes_then_rows(current: pd.DataFrame, keys: pd.DataFrame) -> forecast_partition_sizes.OnKeys:
    """forecast_partition_sizes.sizes_on_keys' answer the other way, where it does not apply (a first snapshot,
    names that are not categoricals, sparse partitions' numbers): each partition's size by its partitions numbered
    as they first appear, then their rows among the keys by their names' codes (partition_rows, the same module)."""
    found = forecast_partition_sizes.partition_sizes(current)
    if found is not None:
        sizes, partitions, groups = found
    else:  # names that are not categoricals, a null among them, or sizes past group_medians' exact range
        by_partition = current.groupby(PARTITION_KEYS, sort=False, observed=True)
        median = by_partition["size_bytes"].median()
        sizes, partitions = median.to_numpy(float), median.index.to_frame(index=False)
        # The groups as found for the medians (sort=False: numbered as the sizes' rows), not hashed again.
        groups = by_partition.ngroup().to_numpy()
    at = forecast_partition_sizes.partition_rows(keys, partitions)
    fresh = at < 0
    at[fresh] = len(keys) + np.arange(int(fresh.sum()))
    # int32 where the rows fit: 80 MB at 20M copies, not 160.
    small = at.astype(np.int32) if len(keys) + len(at) < 1 << 31 else at
    column = np.full(len(keys) + int(fresh.sum()), np.nan)
    column[at] = sizes
    return forecast_partition_sizes.OnKeys(column, partitions[fresh].reset_index(drop=True),
                                   small[groups] if len(at) else np.zeros(0, dtype=small.dtype))


def _read_kept(root: Path, drop: int = 0,
               ) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray | None] | None:
    """The version-1 kept history's (keys, sizes, dirs, kept fits: None when it has none), its sizes less their
    first `drop` columns; None when its series are not one size per grid snapshot. Read a batch of rows at a time,
    each batch's sizes copied from Arrow's buffer straight into that matrix (nulls made nan from the validity bits):
    a whole table read, its chunks combined and converted made three fresh copies of the sizes (1.7 GB each at 20M
    replicas: 11 s, nearly all of it the system's, on this VM), where the batches reuse each other's memory
    (cli._keep_freed_memory)."""
    import pyarrow.parquet as pq

    where = forecast_history.where(root)
    count = len(forecast_history.read_manifest(root) or [])
    # Each file mapped and read on this thread: read into buffers of its own (a dataset's scan), the 1.9 GB of
    # sizes at 20M replicas cost 5.7 s of system time, mapped 0.2 s.
    files = [pq.ParquetFile(f, memory_map=True, read_dictionary=["cluster", "topic"])
             for f in sorted((where / "series").iterdir())
             if f.suffix == ".parquet" and not f.name.startswith(("_", "."))]
    names = files[0].schema_arrow.names if files else []
    has_kept = all(c in names for c in forecast_kept.KEPT)  # written by a driver that keeps fits (Spark's do not)
    rows = sum(f.metadata.num_rows for f in files)
    sizes = np.empty((rows, count - drop))
    kept = np.empty((rows, len(forecast_kept.KEPT)), order="F") if has_kept else None
    keys, at = [], 0
    columns = [*PARTITION_KEYS, "sizes", *(forecast_kept.KEPT if has_kept else ())]
    # A batch at a time (the keys', sizes' and fits' rows together): each batch's buffers reused by the next.
    batches = (b for f in files for b in f.iter_batches(batch_size=READ_BATCH, columns=columns, use_threads=False))
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        lists = batch.column("sizes")
        offsets = lists.offsets.to_numpy()
        if lists.null_count or (np.diff(offsets) != count).any():
            return None
        values = lists.values
        start = values.offset + int(offsets[0])
        flat = np.frombuffer(values.buffers()[1], np.float64, count=start + n * count)[start:].reshape(n, count)
        sizes[at:at + n, :count - drop] = flat[:, drop:]
        if values.null_count:
            bits = np.unpackbits(np.frombuffer(values.buffers()[0], np.uint8), bitorder="little",
                                 count=start + n * count)[start:].view(bool).reshape(n, count)
            sizes[at:at + n, :count - drop][~bits[:, drop:]] = np.nan
        if kept is not None:
            for j, name in enumerate(forecast_kept.KEPT):
                kept[at:at + n, j] = batch.column(name).to_numpy(zero_copy_only=False)
        keys.append(batch.select(PARTITION_KEYS))
        at += n
    import pyarrow as pa

    # The names as categoricals (their dictionaries unified): 6.7M partitions' names as strings were 1 GB of
    # objects at 20M replicas, hashed again by every lookup (forecast_partition_sizes.partition_rows).
    key_frame = pa.Table.from_batches(keys).to_pandas() if keys else _no_keys()
    return key_frame, sizes, pq.read_table(where / "dirs").to_pandas(), kept


def _no_keys() -> pd.DataFrame:
    return pd.DataFrame({"cluster": pd.Categorical([]), "topic": pd.Categorical([]),
                         "partition": pd.Series(dtype="int64")})


def _more_keys(keys: pd.DataFrame, more: pd.DataFrame) -> pd.DataFrame:
    """`more`'s rows after `keys`', the names as categoricals over both's (no string hashed but the categories)."""
    from pandas.api.types import union_categoricals

    if not len(keys):
        return more.astype({"cluster": "category", "topic": "category", "partition": "int64"}).reset_index(drop=True)
    return pd.DataFrame({
        **{c: union_categoricals([pd.Categorical(keys[c]), pd.Categorical(more[c])], ignore_order=True)
           for c in ("cluster", "topic")},
        "partition": np.concatenate([keys["partition"].to_numpy(np.int64), more["partition"].to_numpy(np.int64)])})


def _appended(keys: pd.DataFrame, sizes: forecast_columns.Grid, kept: np.ndarray, paths: list[Path],
              ahead: dict[Path, Future[pd.DataFrame]] | None = None,
              kept_map: forecast_replica_map.ReplicaMap | None = None, room: np.ndarray | None = None,
              ) -> tuple[pd.DataFrame, forecast_columns.Grid, np.ndarray, list[pd.DataFrame],
                         forecast_members.Read | None, forecast_replica_map.ReplicaMap | None]:
    """`sizes` (on `keys`) with a column per snapshot of `paths`, read one at a time (only one snapshot's replicas
    and the columns so far are held); a partition first seen in one is a row added, with no point before (and no
    kept fit). Also the new snapshots' dirs, and the last one's replicas as read and as found to keep
    (forecast_replica_map). Each snapshot's partitions are found among the keys on their names' codes
    (forecast_partition_sizes.partition_rows), not in a MultiIndex of strings. `ahead`: replicas already being read
    (threads.ahead), by snapshot; `kept_map`: the kept history's newest snapshot's replicas as found; `room`: the
    kept fits' file as mapped with its rows past `kept` (forecast_columns.Stored.kept_room), None: none."""
    held = len(keys)
    columns, dirs, replicas, found = [], [], None, kept_map
    for path in paths:
        pending = (ahead or {}).get(path)
        # Each snapshot's map is the next one's to take (the same copies: only its sizes read).
        on_keys, their_dirs, replicas, found = _one(path, keys, pending.result() if pending is not None else None,
                                                    found)
        if len(on_keys.new):  # partitions new to the history: rows appended, the kept rows keep their places
            keys = _more_keys(keys, on_keys.new)
        columns.append(on_keys.column)
        dirs.append(their_dirs)
    fits = kept
    if len(keys) > held and room is not None and len(room) >= len(keys) and room.shape[1] == kept.shape[1]:
        # The rows added taken from the mapped file's room (nan there; set again, copy-on-write): no fresh copy of
        # every kept fit with them (429 MB at 6.7M partitions).
        fits = room[:len(keys)]
        fits[held:] = np.nan
    elif len(keys) > held:
        fits = np.full((len(keys), len(forecast_kept.KEPT)), np.nan, order="F")
        fits[:held] = kept
    # The partitions' numbers as int64 (the kept keys' are already: a copy of every column otherwise).
    if keys["partition"].dtype != np.int64:
        keys = keys.astype({"partition": "int64"})
    return keys, sizes.with_columns(columns, len(keys)), fits, dirs, replicas, found


def _stacked(frames: list[Any]) -> pd.DataFrame:
    """pd.concat of frames of the same columns and dtypes, a column at a time: pandas' concat looks at every value
    of an object column that might be all missing (the dirs' error, None in nearly every row), 0.5 s for the 1.2M
    dirs of a 20M-replica history. A first one that is a pyarrow Table (the kept history's dirs as read): the
    others made Tables of its schema and all made one frame at once, so that the kept rows' strings are made
    Python objects once, not made then copied (the copy of 1.2M dirs' four string columns: 0.13 s warm, 1-2 s in
    memory touched afresh)."""
    if frames and not isinstance(frames[0], pd.DataFrame):
        import pyarrow as pa

        schema = frames[0].schema
        return pa.concat_tables([frames[0], *(pa.Table.from_pandas(f[schema.names], schema=schema,
                                                                   preserve_index=False,
                                                                   nthreads=threads.FROM_PANDAS)
                                              for f in frames[1:])]
                                ).to_pandas()
    if (len(frames) < 2 or not all(isinstance(kind, np.dtype) for kind in frames[0].dtypes)
            or any(list(f.dtypes.items()) != list(frames[0].dtypes.items()) for f in frames[1:])):
        return pd.concat(frames, ignore_index=True) if frames else forecast_columns.no_dirs()
    return pd.DataFrame({c: np.concatenate([f[c].to_numpy() for f in frames]) for c in frames[0].columns})


def _of_snapshots(dirs: Any, names: list[str]) -> Any:
    """The rows of `dirs` (a frame, or a pyarrow Table as read: _stacked) of the snapshots `names`."""
    if isinstance(dirs, pd.DataFrame):
        return dirs[dirs["snapshot"].isin(names)]
    import pyarrow as pa
    import pyarrow.compute as pc

    return dirs.filter(pc.is_in(dirs["snapshot"], value_set=pa.array(names, pa.string())))


def stored_snapshots(root: Path) -> list[str] | None:
    """The grid of the kept history under `root` as the driver reads it: version 2 (its own) or 1 (Spark's)."""
    grid = forecast_columns.snapshots(root)
    return grid if grid is not None else forecast_history.read_manifest(root)


def update(paths: list[Path], keep: bool = True) -> Held:
    """forecast_history.update on the driver: the same steps (plan), from the kept history of either version
    (keep() writes it as version 2, forecast_columns, once the fits are found)."""
    step = forecast_history.plan(paths, keep, stored_snapshots)
    root, names = paths[0].parent, [p.name for p in paths]
    keys, sizes, kept = _no_keys(), forecast_columns.Grid([], 0), np.zeros((0, len(forecast_kept.KEPT)))
    dirs = forecast_columns.no_dirs()
    how, new, upgrade, key_files, read_from, dir_files = step.how, paths, False, [], None, {}
    kept_room: np.ndarray | None = None
    # The first snapshot to append (or, with none to append, the newest, whose copies are the disks') read on the
    # other thread while the kept history is (threads): 1.2 s of a 20M append's 20M replicas, most of it
    # pyarrow's, beside the history's 0.5 s.
    first = step.new[0] if step.new else paths[0] if step.how in ("in memory", "rebuilt") else paths[-1]
    data = forecast_columns.manifest(root) if step.how.startswith(("kept", "appended")) else None
    # The kept history's newest snapshot's replicas as found: a first snapshot of the same copies (its fingerprint)
    # has only its sizes read (forecast_replica_map), not every column ahead; one of the same copies some of which
    # moved to other dirs of their brokers (its PLACED fingerprint), its sizes and dirs (forecast_replica_moves).
    kept_map = (forecast_replica_map.load(forecast_history.where(root), data.get("replica_map"), data.get("rows"))
                if data is not None else None)
    prints = forecast_replica_map.fingerprints(first) if kept_map is not None else None
    if kept_map is not None and (prints is None or prints[0] is None):
        kept_map = None
    # Either way read on the other thread while the kept history is (threads): every column, only the sizes (and
    # dirs), or the names' codes (_kept_read).
    ahead: dict[Path, Future[Any]] = {first: threads.ahead(_read_as_found, first, int(data["rows"]), kept_map,
                                                             bool(step.new), first == paths[-1], prints)
                                      if kept_map is not None and data is not None
                                      else threads.ahead(forecast_members.read_replicas, first)}
    if step.how.startswith(("kept", "appended")):
        stored = (forecast_columns.read(root, data, step.drop, len(forecast_kept.KEPT), as_table=True)
                  if data is not None else None)
        if stored is not None:
            keys, sizes, kept, dirs, key_files = stored.keys, stored.sizes, stored.kept, stored.dirs, stored.key_files
            kept_room = stored.kept_room
            dir_files = stored.dir_files
            new, read_from = step.new, data
        elif data is None and (v1 := _read_kept(root, step.drop)) is not None:
            keys, matrix, dirs, kept_fits = v1
            sizes, new, upgrade = forecast_columns.Grid.of_matrix(matrix), step.new, True
            kept = np.full((len(keys), len(forecast_kept.KEPT)), np.nan, order="F") if kept_fits is None else kept_fits
        else:
            how = "rebuilt"
        # Dirs read a file per snapshot hold only the snapshots of their files (forecast_columns.write writes each
        # its own rows): when those are all in the window, the filter is every row copied (1.2M dirs at 20M
        # replicas, 0.1-0.4 s of the main thread beside the newest snapshot's read).
        if not dir_files or not set(dir_files) <= set(names):
            dirs = _of_snapshots(dirs, names)
    key_rows, renumbered = len(keys), False
    prior = _prior(root, read_from, step.drop) if read_from is not None else None
    newest, found_map = None, None
    partitions = None
    if (new == [paths[-1]] and read_from is not None and first in ahead
            and isinstance(ahead[first].result(), forecast_replica_adds.Codes)):
        # Copies added or gone (partitions created or deleted, nearly always): the newest snapshot's partitions,
        # whose settings are then read again where their fingerprint is not the kept ones', read on the other
        # thread now, while the copies are found (it waited for them: forecast_replica_adds), not after (0.7 s of
        # a 20M append's main thread). Not from the start of the update: beside the names' read (the main thread
        # waits for it), the append took 0.7 s longer (docs/forecast-performance.md, "Settings laid out by topic").
        partitions = threads.ahead(forecast_settings.head_start, paths[-1], keys, read_from.get("retention"))
    if new:
        keys, sizes, kept, added, newest, found_map = _appended(keys, sizes, kept, new, ahead,
                                                                kept_map if read_from is not None else None,
                                                                kept_room)
        dirs = _stacked([d for d in [dirs, *added] if len(d)])
    elif kept_map is not None and read_from is not None and paths[-1] == first:
        # Nothing new: the disks' copies are the newest snapshot's, as the map found them (only the sizes read).
        got = ahead[first].result()
        if isinstance(got, forecast_members.Read):
            newest = ahead.pop(first).result()
            found_map = newest.found if newest.found is not None else kept_map
        elif not isinstance(got, pd.DataFrame):  # names' codes (not the map's copies): members_of reads it whole
            ahead.pop(first)
    elif kept_map is not None:  # not taken up (the history did not read): members_of reads the snapshot whole
        ahead.pop(first, None)
    if step.drop and how != "rebuilt":
        # Partitions with no point left in the window (deleted before it): their rows stay (no fit:
        # forecast_fits.fit_batch) until they are DEAD_SHARE of the rows; then the rows go and every file is written
        # again.
        # From the state's counts, moved on by the dropped and new columns, where there is one: not every column.
        alive = (forecast_append.alive(prior[0], prior[1], sizes, len(new), len(read_from["snapshots"]))
                 if prior is not None and read_from is not None else sizes.alive())
        if (~alive).sum() > forecast_columns.DEAD_SHARE * len(alive):
            keys, sizes, kept = keys[alive].reset_index(drop=True), sizes.take(alive), np.array(kept[alive])
            key_files, key_rows, renumbered = [], 0, True
            if newest is not None:
                newest.rows = None  # its rows were the ones before
            found_map, partitions = None, None  # so were the partitions' found ahead
    appended = len(new) if how.startswith("appended") else 0
    last = new[-1] if new else first
    # A new index on the same columns (reset_index copies every one: 64 MB touched afresh at 40,000 dirs x 31).
    dirs = dirs.set_axis(pd.RangeIndex(len(dirs)), copy=False) if isinstance(dirs, pd.DataFrame) else dirs.to_pandas()
    return Held(names, keys, sizes, dirs, how, kept, appended, upgrade,
                newest if last == paths[-1] else None, key_files, dir_files, key_rows, read_from,
                renumbered, prior, ahead={p: f for p, f in ahead.items() if p not in new},
                replica_map=found_map if last == paths[-1] else None, partitions=partitions)


def writes(held: Held) -> bool:
    """Whether keep() writes `held`: not a history kept in memory only, nor one already the window (written again
    only to take it up, upgrade, or to add the state an older driver's lacks: forecast_append, the next append
    then needs no pass over the window)."""
    stateless = held.state is not None and held.stored is not None and "state" not in held.stored
    return not (held.how == "in memory" or (held.how == "kept" and not held.upgrade and not stateless))


def keep(root: Path, held: Held) -> None:
    """Writes `held` (with its fits, `held.kept`) as the fleet's kept history (forecast_columns), unless it is that
    already or not to be kept; a root this process cannot write keeps nothing."""
    if not writes(held):
        return
    try:
        # Rows found again this time: the rest are moved on before a whole write, or a patch of them is written.
        found = forecast_kept_files.KeptFound(held.kept_found, held.kept_hours, held.appended,
                                           None if held.upgrade else held.stored
                                           ) if held.kept_found is not None else None
        forecast_columns.write(root, held.snapshots, held.keys, held.sizes, held.kept, held.dirs,
                               [] if held.upgrade else held.key_files, 0 if held.upgrade else held.key_rows,
                               held.state, {} if held.upgrade else held.dir_files, found, held.replica_map,
                               held.retention)
    except OSError:
        held.how = "in memory"


def hours_of(paths: list[Path]) -> np.ndarray:
    """Each snapshot's hours before the last of `paths` (0: the last): the forecast's grid, and the hours a state's
    fit_from columns are read back as (_grid_hours), the same numbers either way. AuditError for a name that is not
    a time."""
    from mover.audit import forecast as fc

    taken = [fc.taken_at(p) for p in paths]
    return np.array([(when - taken[-1]).total_seconds() / 3600 for when in taken])


def _grid_hours(snapshots: list[str]) -> np.ndarray | None:
    """hours_of the snapshots named; None when there are none or a name is not a snapshot's."""
    try:
        return hours_of([Path(name) for name in snapshots]) if snapshots else None
    except AuditError:
        return None


def _prior(root: Path, data: dict[str, Any], drop: int) -> tuple[forecast_state.State, list[np.ndarray]] | None:
    """The state the manifest `data` names and its first `drop` columns (the ones the window dropped), None when it
    has none or it does not read (the append then makes the pass over the window)."""
    if not isinstance(data.get("state"), str):
        return None
    where = forecast_history.where(root)
    copies = data.get("copies")
    row_files = data.get("state_rows")
    state = forecast_state.load(where / data["state"], int(data["rows"]), len(data["snapshots"]),
                                 where / copies if isinstance(copies, str) else None,
                                 (where / row_files[0], where / row_files[1]) if isinstance(row_files, list)
                                 and len(row_files) == 2 and all(isinstance(f, str) for f in row_files) else None,
                                 _grid_hours(data["snapshots"]))
    try:
        dropped = [np.load(where / f, mmap_mode="r") for f in data["sizes"][:drop]]
    except (OSError, ValueError):
        return None
    return (state, dropped) if state is not None else None
