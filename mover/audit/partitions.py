"""The snapshot's partitions dataset on the driver: read once with pyarrow, keyed as the plan's pass keys replicas.

Two steps read it: the duplicate check (each broker's count and hash sum of the partitions Metadata gives it) and
the naming of a plan's moves (the partitions whose key a move carries). As Spark jobs they were a third of the wall
time of `audit --plan` at 20M replicas (an explode aggregation and a broadcast join, each a new kind of query for a
fresh JVM: docs/audit.md#performance), although the dataset is small (a row per partition, about a third of the
replica rows, 11 MB of Parquet at 20M replicas). Read here, it is one pyarrow read and numpy.

Only when that is known to be safe: the Parquet footers say the dataset is flat with the declared columns (the same
check that lets Spark skip its schema inference: snapshot.footer_schema), it has at most LOCAL_ROWS rows, and
pyarrow reads it without error. Otherwise `table` is None and the callers run their Spark jobs as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import columns, snapshot, spark_hash

if TYPE_CHECKING:
    from mover.audit.snapshot import Snapshot

# At most this many partition rows are read into the driver (about 30 bytes a row with the names kept as
# dictionaries: 20M rows are ~600 MB), a fleet of 60M replicas at replication factor 3.
LOCAL_ROWS = 20_000_000
# A partition's key hashed to 32 bits, summed per broker by the duplicate check (audit.py) and per dir by the plan's
# pass: equal sums and counts on both sides mean the broker holds exactly the replicas Metadata gives it.
HASH_MASK = (1 << 32) - 1


# with_keys' mix of a key with its cluster's code (an odd 64-bit constant: distinct codes move a key far apart).
_MIX = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as a signed int64


class LocalPartitions:
    """The dataset's rows (cluster, topic, partition, replicas; the names as dictionaries, as _read reads them) and
    each row's key, Spark's xxhash64(topic, partition), with the clusters as codes into `clusters`."""

    def __init__(self, table: Any) -> None:
        # The name columns keep a dictionary per row group, as read: partition_keys and the cluster codes map them
        # to one dictionary a step at a time (columns.Names), and with_keys takes rows a step at a time.
        self.table = table
        self._listed: pd.DataFrame | None = None
        self._lists: tuple[np.ndarray, np.ndarray] | None = None
        self.pkey = spark_hash.partition_keys(table.column("topic"), table.column("partition"))
        names = columns.Names(table.column("cluster"))
        # A null cluster gets a code of its own (Spark groups the nulls together too): the last entry, which is
        # where Names puts a null.
        self.clusters = np.array([*names.dictionary.to_pylist(), None], dtype=object)
        self.cluster = np.empty(table.num_rows, dtype=np.int64)
        for at, batch in columns.steps(table.select(["cluster"])):
            self.cluster[at:at + batch.num_rows] = names.rows(batch.column(0), at)

    def listed_per_broker(self) -> pd.DataFrame:
        """(cluster, broker, listed, listed_hash): how many partitions Metadata gives each broker and the sum of
        their keys' low 32 bits, as audit.duplicate_partitions' Spark aggregation computes it (a null broker in a
        replica list is not a broker and is not counted). Computed once."""
        if self._listed is None:
            self._listed = self._listed_per_broker()
        return self._listed.copy()

    def _listed_per_broker(self) -> pd.DataFrame:
        import pyarrow.compute as pc

        # Summed a step of partitions at a time (columns.py says why), then the steps' sums per (cluster, broker).
        pairs, counts, sums = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)], [np.zeros(0, np.int64)]
        for at, batch in columns.steps(self.table.select(["replicas"])):
            replicas = batch.column(0)
            lengths = pc.fill_null(pc.list_value_length(replicas), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            flat = pc.list_flatten(replicas)
            brokers = flat.to_numpy(zero_copy_only=False)
            keep = ~np.asarray(flat.is_null(), dtype=bool) if flat.null_count else slice(None)
            rows = slice(at, at + batch.num_rows)
            cluster = np.repeat(self.cluster[rows], lengths)[keep]
            # One int64 per (cluster, broker), grouped by a hash table (pandas.factorize): a sort costs more.
            pair = (cluster << 32) | (np.asarray(brokers[keep], dtype=np.int64) & 0xFFFFFFFF)
            groups, found = pd.factorize(pair)
            h = np.repeat(self.pkey[rows] & HASH_MASK, lengths)[keep]
            count = np.bincount(groups, minlength=len(found))
            # bincount sums in float64, exact while a sum stays below 2**53: each term is below 2**32, so up to 2**21
            # partitions a broker in one pass, else in two 16-bit halves.
            if len(count) and count.max() >= 1 << 21:
                summed = ((np.bincount(groups, weights=h >> 16, minlength=len(found)).astype(np.int64) << 16)
                          + np.bincount(groups, weights=h & 0xFFFF, minlength=len(found)).astype(np.int64))
            else:
                summed = np.bincount(groups, weights=h, minlength=len(found)).astype(np.int64)
            pairs.append(found)
            counts.append(count.astype(np.int64))
            sums.append(summed)
        groups, found = pd.factorize(np.concatenate(pairs))
        count, summed = np.zeros(len(found), dtype=np.int64), np.zeros(len(found), dtype=np.int64)
        np.add.at(count, groups, np.concatenate(counts))
        np.add.at(summed, groups, np.concatenate(sums))
        broker = (found & 0xFFFFFFFF).astype(np.uint32).astype(np.int32).astype(np.int64)
        return pd.DataFrame({"cluster": self.clusters[found >> 32], "broker": broker, "listed": count,
                             "listed_hash": summed})

    def rows_with(self, pkeys: np.ndarray) -> np.ndarray:
        """The rows (int64, in order) whose key is one of `pkeys`."""
        # pandas' isin hashes the wanted keys (np.isin sorts all of them: 17x slower on 6.7M rows).
        return np.flatnonzero(pd.Series(self.pkey).isin(pkeys).to_numpy())

    def code_of(self, cluster: str) -> int:
        """The code of the cluster named `cluster` in `cluster`'s rows; -1 (no row's) for a name the dataset lacks."""
        return {name: i for i, name in enumerate(self.clusters[:-1].tolist())}.get(cluster, -1)

    def replica_lists(self, rows: np.ndarray) -> ReplicaLists:
        """The replica lists of `rows` (Metadata's brokers of each partition), each made when asked for: the plan's
        moves between brokers look at a few of a cluster's million, and a pandas frame of every list cost seconds
        at 20M replicas (docs/audit.md#performance)."""
        if self._lists is None:
            self._lists = _flat_lists(self.table.column("replicas"))
        return ReplicaLists(*self._lists, rows)

    def with_keys(self, clusters: pd.Series, pkeys: pd.Series) -> pd.DataFrame:
        """(cluster, topic, partition, replicas, pkey) of the rows whose (cluster, key) is one of those given, as
        plan/outputs.py's _reassignments' Spark join returns them."""
        wanted = pd.DataFrame({"cluster": clusters.to_numpy(dtype=object), "pkey": pkeys.to_numpy(dtype=np.int64)})
        # Joined on the clusters' codes, not their names: a merge on an object column hashes every string (1.2 s of
        # the plan at 20M replicas). A wanted name the dataset lacks gets a code no row has.
        code_of = {name: i for i, name in enumerate(self.clusters.tolist())}
        names, distinct = pd.factorize(wanted["cluster"], use_na_sentinel=False)
        wanted["_c"] = np.array([code_of.get(None if pd.isna(c) else c, -1) for c in distinct.tolist()],
                                dtype=np.int64)[names]
        # The rows whose key mixed with their cluster's code is one of the wanted (pandas' isin hashes the wanted;
        # np.isin sorts all of them: 17x slower on 6.7M rows). Mixed, not the key alone: clusters that share topic
        # names share keys, and 50 of them made 50 rows of each wanted one (docs/audit.md#performance). Two pairs
        # that mix alike are told apart by the merge below.
        with np.errstate(over="ignore"):
            mixed = self.pkey + self.cluster * _MIX
            wanted_mixed = wanted["pkey"].to_numpy(dtype=np.int64) + wanted["_c"].to_numpy() * _MIX
        rows = np.flatnonzero(pd.Series(mixed).isin(wanted_mixed).to_numpy())
        import pyarrow as pa

        # Taken a step at a time: a step lies within one row group, so its topics share one dictionary. They were
        # read as dictionaries; pandas would make them categoricals, Spark's toPandas gives strings.
        table = self.table.select(["topic", "partition", "replicas"])
        parts = []
        for at, batch in columns.steps(table):
            lo, hi = np.searchsorted(rows, [at, at + batch.num_rows]).tolist()
            if lo < hi:
                part = pa.Table.from_batches([batch]).take(pa.array(rows[lo:hi] - at, pa.int64()))
                parts.append(part.set_column(0, "topic", part.column("topic").cast(pa.string())))
        schema = table.schema.set(0, pa.field("topic", pa.string()))
        found = (pa.concat_tables(parts) if parts else schema.empty_table()).to_pandas()
        found["cluster"] = self.clusters[self.cluster[rows]]
        found["pkey"] = self.pkey[rows]
        found["_c"] = self.cluster[rows]
        found = found.merge(wanted[["_c", "pkey"]].drop_duplicates(), on=["_c", "pkey"])
        return found[["cluster", "topic", "partition", "replicas", "pkey"]]


class ReplicaLists:
    """Replica lists as a sequence: entry i is row rows[i]'s list, its brokers as an int32 array (empty for a null
    list; a null broker in a list is not a broker, as listed_per_broker counts them)."""

    def __init__(self, offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> None:
        self._offsets, self._values, self._rows = offsets, values, rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> np.ndarray:
        row = self._rows[i]
        return self._values[self._offsets[row]:self._offsets[row + 1]]


def _flat_lists(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, brokers) of a chunked list<int32> column: row i's brokers are brokers[offsets[i]:offsets[i + 1]],
    the null ones left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths, values = [np.zeros(1, dtype=np.int64)], [np.zeros(0, dtype=np.int32)]
    for chunk in column.chunks:
        length = pc.fill_null(pc.list_value_length(chunk), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = pc.list_flatten(chunk)  # a null list gives no entries
        if flat.null_count:
            valid = np.asarray(flat.is_valid(), dtype=bool)
            length = np.bincount(np.repeat(np.arange(len(length)), length)[valid], minlength=len(length))
            flat = flat.filter(pa.array(valid))
        lengths.append(length)
        values.append(flat.to_numpy(zero_copy_only=False).astype(np.int32))
    return np.cumsum(np.concatenate(lengths)), np.concatenate(values)


def local(snap: Snapshot) -> LocalPartitions | None:
    """The snapshot's partitions on the driver (read once per snapshot and kept), or None where a Spark job must
    read them (see the module's docstring)."""
    if "partitions" not in snap.local:
        pending = _pending.pop(snap.path, None)
        snap.local["partitions"] = pending.result() if pending is not None else _read(snap.path, False)
    return snap.local["partitions"]


def prefetch(path: Path, listed: bool) -> None:
    """Starts reading the partitions of the snapshot at `path` (and, if `listed`, summing them per broker) in a
    thread, while the driver starts its JVM: the read is driver-side CPU that would otherwise run after the start,
    and pyarrow and numpy do it mostly without the GIL."""
    from concurrent.futures import ThreadPoolExecutor

    # Imported here, on the caller's thread: the session's start imports the same packages, and two threads
    # importing one package at once can see it half initialised.
    import pyarrow.parquet  # noqa: F401
    import pyspark.sql.types  # noqa: F401

    global _reader
    if _reader is None:
        _reader = ThreadPoolExecutor(1, thread_name_prefix="partitions-read")
    _pending[path] = _reader.submit(_read, path, listed)


_reader: Any = None
_pending: dict[Path, Any] = {}


def _read(path: Path, listed: bool) -> LocalPartitions | None:
    where = path / "partitions"
    rows = snapshot.dataset_rows(where)
    if rows is None or rows > LOCAL_ROWS or snapshot.footer_schema(where, snapshot.PARTITIONS) is None:
        return None
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(where, columns=list(snapshot.PARTITIONS), read_dictionary=["cluster", "topic"])
        found = LocalPartitions(_conformed(table))
    except Exception:  # a file pyarrow cannot read or types it cannot take: Spark's read says what is wrong
        return None
    if listed:
        found.listed_per_broker()
    return found


def _conformed(table: Any) -> Any:
    """The declared types (a writer may use narrower ints; snapshot.conform widens them the same way)."""
    import pyarrow as pa

    want = {"partition": pa.int32(), "replicas": pa.list_(pa.int32())}
    for name, kind in want.items():
        column = table.column(name)
        if column.type != kind:
            table = table.set_column(table.schema.get_field_index(name), name, column.cast(kind))
    return table
