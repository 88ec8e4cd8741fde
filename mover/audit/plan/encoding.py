"""The planner's inputs encoded: every replica as three longs (dir code, size with flags, partition key: see
DIR_BITS), and the listed log dirs numbered so that the codes index them. Spark computes the longs in the JVM
(replica_rows, driver_rows for a small snapshot); on a local master the driver reads the replicas with pyarrow and
computes the same longs itself (local_rows, by spark_hash)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mover.audit import columns, planner, snapshot, spark_hash
from mover.audit.errors import AuditError
from mover.audit.plan import options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# The replicas cross from the JVM to the planner's Python as three longs a row, because turning rows into Arrow,
# field by field, is what costs most at 20 million rows: the dir code `bkey << DIR_BITS | dir index` (-1: a dir
# log_dirs does not list), the size with three flags `size << 3 | unknown << 2 | is_future << 1 | blocked` (size as
# written, null as 0; `unknown`: is_future is null), and the partition key xxhash64(topic, partition). The key tells
# a partition's current copy from another partition's within a broker, and names a move's partition afterwards (a
# join with the partitions dataset, where a collision is seen and the move dropped, never guessed).
DIR_BITS = 16
MAX_DIRS = 1 << DIR_BITS
SIZE_SHIFT = 3
DIR_KEYS = ["cluster", "broker", "log_dir"]
_REPLICA_COLUMNS = ["cluster", "broker", "log_dir", "topic", "partition", "size_bytes", "is_future"]


def listed_dirs(snap: snapshot.Snapshot) -> pd.DataFrame:
    """Every log dir the snapshot's log_dirs lists, sorted by (cluster, broker, log_dir) and numbered: `bkey` per
    broker (0, 1, ... in order), `dir` within it, `code` as the replicas carry it, `dk` the hash a replica's dir is
    joined on."""
    from pyspark.sql import functions as F

    # A row per dir: 40,000 rows at 20M replicas, read on the driver whatever the replicas' count (a Spark job less).
    frame = small_listed_dirs(snap)
    if frame is None:
        frame = snap.log_dirs.select(*DIR_KEYS, "error", "total_bytes", "usable_bytes", "is_cordoned",
                                     F.xxhash64(*DIR_KEYS).alias("dk")).toPandas()
    listed = len(frame)
    frame = (frame.dropna(subset=DIR_KEYS).sort_values(DIR_KEYS, kind="mergesort")
             .drop_duplicates(DIR_KEYS).reset_index(drop=True))
    # A row left out here (a null key, a dir listed twice) is one the audit's own join keeps: see audit_usage.
    frame.attrs["all_listed"] = len(frame) == listed
    frame["broker"] = frame["broker"].astype("int64")
    frame["online"] = frame["error"].isna()
    # KIP-1066: never a destination (null: the broker does not report cordons, so none are known).
    frame["cordoned"] = frame["is_cordoned"].astype("boolean").fillna(False).astype(bool)
    grouped = frame.groupby(["cluster", "broker"], sort=False)
    frame["bkey"] = grouped.ngroup().astype("int64")
    frame["dir"] = grouped.cumcount().astype("int64")
    if len(frame) and int(frame["dir"].max()) >= MAX_DIRS:
        raise AuditError(f"a broker lists more than {MAX_DIRS} log dirs: not a snapshot this planner can read")
    frame["code"] = frame["bkey"] * MAX_DIRS + frame["dir"]
    return frame


def small_listed_dirs(snap: snapshot.Snapshot) -> pd.DataFrame | None:
    """listed_dirs' columns (a row per dir), read by the driver (a Spark job less: on a fresh JVM each costs
    seconds), `dk` computed as Spark computes it (spark_hash); None where Spark must read them."""
    import pyarrow as pa

    columns = [*DIR_KEYS, "error", "total_bytes", "usable_bytes"]
    frame = snapshot.read_small(snap, "log_dirs", columns, options.DRIVER_PLAN_ROWS)
    if frame is None:
        return None
    frame = frame.copy()
    cordons = snapshot.read_small(snap, "log_dirs", ["is_cordoned"], options.DRIVER_PLAN_ROWS)
    frame["is_cordoned"] = None if cordons is None else cordons["is_cordoned"].to_numpy(dtype=object)
    try:
        frame["dk"] = spark_hash.xxhash64(*(pa.array(frame[c], kind, from_pandas=True) for c, kind in
                                            zip(DIR_KEYS, (pa.string(), pa.int32(), pa.string()), strict=True)))
    except (pa.ArrowException, TypeError, ValueError):  # not the declared types after all: Spark reads them
        return None
    return frame


def replica_rows(session: SparkSession, snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules,
                  by_hash: bool | None = None) -> DataFrame:
    """(code, sf, pkey) for every replica; code -1 for one in a dir log_dirs does not list (it cannot be planned
    around, the task only counts it; the audit reports it)."""
    from pyspark.sql import functions as F

    replicas, sf, pkey = _packed(session, snap, rules)
    if by_hash if by_hash is not None else not dirs["dk"].duplicated().any():
        # One long key joins far faster than three columns with two strings.
        tag = session.createDataFrame(dirs[["dk", "code"]])
        rows = replicas.select(F.xxhash64(*DIR_KEYS).alias("dk"), sf, pkey).join(F.broadcast(tag), "dk", "left")
    else:  # two dirs hash alike: join on the names themselves
        tag = session.createDataFrame(dirs[[*DIR_KEYS, "code"]].astype({"broker": "int32"}))
        rows = replicas.join(F.broadcast(tag), DIR_KEYS, "left").select("code", sf, pkey)
    return rows.select(F.coalesce(F.col("code"), F.lit(-1).cast("long")).alias("code"), "sf", "pkey")


def _packed(session: SparkSession, snap: snapshot.Snapshot, rules: planner.Rules) -> tuple[DataFrame, Any, Any]:
    """The replicas (with the excluded topics' flag when there are some), and the sf and pkey columns."""
    from pyspark.sql import functions as F

    replicas = snap.replicas
    blocked = F.lit(0)
    if rules.exclude_topics is not None:
        # The regex is Python's (as the operator wrote it): applied to the distinct topic names, not by the JVM.
        topics = replicas.select("topic").distinct().toPandas()["topic"].dropna()
        excluded = [t for t in topics if rules.exclude_topics.search(str(t))]
        if excluded:
            flags = session.createDataFrame(pd.DataFrame({"topic": excluded, "excluded": 1}))
            replicas = replicas.join(F.broadcast(flags), "topic", "left")
            blocked = F.coalesce(F.col("excluded"), F.lit(0)).cast("long")
    size = F.coalesce(F.col("size_bytes"), F.lit(0))
    future = F.coalesce(F.col("is_future"), F.lit(False)).cast("long")
    unknown = F.col("is_future").isNull().cast("long")
    sf = (F.shiftleft(size, SIZE_SHIFT) + unknown * 4 + future * 2 + blocked).alias("sf")
    return replicas, sf, F.xxhash64("topic", "partition").alias("pkey")


def driver_rows(session: SparkSession, snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules) -> Any:
    """replica_rows as one Arrow table in the driver, for a small snapshot. When no two dirs hash alike, Spark
    only reads and hashes the replicas, and each one's dir code is looked up here by its dir's hash (numpy, the
    same answer as the broadcast join): the join's broadcast is a Spark job of its own, and on a fresh JVM a new
    kind of query costs seconds (docs/audit.md#performance). Else the join on the names, by Spark."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    keys = dirs["dk"].to_numpy(dtype="int64")
    if len(keys) == 0 or len(np.unique(keys)) != len(keys):
        return replica_rows(session, snap, dirs, rules, by_hash=False).toArrow()
    replicas, sf, pkey = _packed(session, snap, rules)
    table = replicas.select(F.xxhash64(*DIR_KEYS).alias("dk"), sf, pkey).toArrow()
    dk = table.column("dk").to_numpy()
    code = _codes_of_hashes(dirs, keys, dk)
    return pa.table({"code": pa.array(code, pa.int64()), "sf": table.column("sf"), "pkey": table.column("pkey")})


def _codes_of_hashes(dirs: pd.DataFrame, keys: np.ndarray, dk: np.ndarray) -> np.ndarray:
    """The dir code of each hash in `dk` (-1 where no listed dir has it), `keys` being the dirs' own hashes (no two
    alike): the broadcast join's answer, by a sorted search."""
    order = np.argsort(keys)
    at = np.minimum(np.searchsorted(keys[order], dk), len(keys) - 1)
    return np.where(keys[order][at] == dk, dirs["code"].to_numpy(dtype="int64")[order][at], -1)


# snapshot.Snapshot.local's entry for the replicas local_rows read (with each row's partition key, `key`), kept for
# the plan's moves between brokers (plan/outputs.py), which take their brokers' rows from it instead of a second read.
KEPT_REPLICAS = "replicas:kept"


def local_rows(snap: snapshot.Snapshot, dirs: pd.DataFrame, rules: planner.Rules, keep: bool = False) -> Any:
    """replica_rows' (code, sf, pkey) as one Arrow table, computed by the driver from a pyarrow read of the
    replicas: each distinct (cluster, broker, log_dir) hashed as Spark's xxhash64 and looked up among the dirs'
    hashes (as the broadcast join does), the partition key as Spark's xxhash64(topic, partition) (spark_hash), the
    excluded topics by Python's regex per distinct topic. None where Spark must read them: more than
    LOCAL_SCAN_ROWS rows (options.py), a layout the footers do not vouch for, a file pyarrow does not read, two dirs
    that hash alike (the join is then on the names). With `keep`, the replicas read stay on `snap` (KEPT_REPLICAS)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    where = snap.path / "replicas"
    count = snapshot.dataset_rows(where)
    keys = dirs["dk"].to_numpy(dtype="int64")
    if (count is None or count > options.LOCAL_SCAN_ROWS
            or snapshot.footer_schema(where, snapshot.REPLICAS) is None or len(np.unique(keys)) != len(keys)):
        return None
    try:
        table = pq.read_table(where, columns=_REPLICA_COLUMNS, read_dictionary=["cluster", "log_dir", "topic"])
        want = {"broker": pa.int32(), "partition": pa.int32(), "size_bytes": pa.int64(), "is_future": pa.bool_()}
        for name, kind in want.items():
            if table.schema.field(name).type != kind:
                table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(kind))
        for name in ("cluster", "log_dir", "topic"):
            kind = table.schema.field(name).type
            if not pa.types.is_dictionary(kind) or not pa.types.is_string(kind.value_type):
                return None
        # The partition keys in a thread of their own beside the dir codes and flags: both are numpy and pyarrow
        # work that lets go of the GIL, and the other core is otherwise idle while the driver reads (the helper
        # process waits for its first step).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="replica-keys") as pool:
            keyed = pool.submit(spark_hash.partition_keys, table.column("topic"), table.column("partition"))
            code = _dir_codes(dirs, keys, table)
            if code is None:
                return None
            topics = columns.Names(table.column("topic")) if rules.exclude_topics is not None else None
            if topics is not None:
                excluded = np.array([n is not None and bool(rules.exclude_topics.search(n))
                                     for n in topics.dictionary.to_pylist()] + [False])
            sf = np.empty(table.num_rows, dtype=np.int64)
            for at, batch in columns.steps(table.select(["topic", "size_bytes", "is_future"])):
                topic, size, future = batch.columns
                part = sf[at:at + batch.num_rows]
                part[:] = pc.fill_null(size, 0).to_numpy(zero_copy_only=False)
                part <<= SIZE_SHIFT
                part += np.asarray(future.is_null(), dtype=np.int64) * 4
                part += pc.fill_null(future, False).to_numpy(zero_copy_only=False).astype(np.int64) * 2
                if topics is not None:
                    part += excluded[topics.rows(topic, at)]
            pkey = keyed.result()
    except (pa.ArrowException, OSError, ValueError, TypeError):  # Spark's read says what is wrong
        return None
    if keep:
        snap.local[KEPT_REPLICAS] = table.append_column("key", pa.array(pkey, pa.int64()))
    return pa.table({"code": pa.array(code, pa.int64()), "sf": pa.array(sf, pa.int64()),
                     "pkey": pa.array(pkey, pa.int64())})


def _dir_codes(dirs: pd.DataFrame, keys: np.ndarray, table: Any) -> np.ndarray | None:
    """Each row's dir code (-1: no listed dir has its hash), hashing each distinct (cluster, broker, log_dir) once;
    None when the names are too many to pack into one 64-bit key. A step at a time (columns.py): each row's place
    among its step's distinct packed names is written where its code goes, and replaced by the code once the distinct
    ones are hashed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    clusters, log_dirs = columns.Names(table.column("cluster")), columns.Names(table.column("log_dir"))
    nc, nl = len(clusters.dictionary) + 1, len(log_dirs.dictionary) + 1
    if nc * nl >= 1 << 30:
        return None
    code = np.empty(table.num_rows, dtype=np.int64)
    # Per step, its distinct packed names and where each row's are among them (the row's slot in `code` until the
    # codes are known): the codes are then mapped per step through its few distinct names, not searched per row
    # among all of them (1 s at 20M rows, docs/audit.md#performance).
    seen: list[tuple[int, int, np.ndarray]] = []
    for at, batch in columns.steps(table.select(["cluster", "broker", "log_dir"])):
        cluster, broker, log_dir = batch.columns
        # A null name is one past its dictionary's last entry; a null broker sets bit 32.
        key = clusters.rows(cluster, at)
        key *= nl
        key += log_dirs.rows(log_dir, at)
        key <<= 33
        key |= pc.fill_null(broker, 0).to_numpy(zero_copy_only=False).astype(np.int64) & 0xFFFFFFFF
        if broker.null_count:
            key |= np.asarray(broker.is_null(), dtype=np.int64) << 32
        codes, distinct = pd.factorize(key)
        code[at:at + batch.num_rows] = codes
        seen.append((at, batch.num_rows, distinct))
    uniques = np.unique(np.concatenate([np.zeros(0, dtype=np.int64), *(d for _, _, d in seen)]))
    pair, ub = uniques >> 33, uniques & ((1 << 33) - 1)

    def names(dictionary: Any, index: np.ndarray, missing: int) -> Any:
        found = dictionary.take(pa.array(np.where(index == missing, 0, index))) if len(dictionary) else None
        values = found.to_pylist() if found is not None else [None] * len(index)
        return pa.array([None if i == missing else v for i, v in zip(index.tolist(), values, strict=True)],
                        pa.string())

    dk = spark_hash.xxhash64(names(clusters.dictionary, pair // nl, nc - 1),
                             pa.array((ub & 0xFFFFFFFF).astype(np.uint32).astype(np.int32), pa.int32(),
                                      mask=(ub >> 32) == 1),
                             names(log_dirs.dictionary, pair % nl, nl - 1))
    mapped = _codes_of_hashes(dirs, keys, dk)
    for at, rows, distinct in seen:
        part = code[at:at + rows]
        part[:] = mapped[np.searchsorted(uniques, distinct)][part]
    return code

