"""Spark's `xxhash64(topic, partition)` computed on the driver, so a partition key made by a Spark job (the plan's
pass keys every replica with it) can be matched against partitions read with pyarrow, without a Spark job.

Spark hashes the columns in order from seed 42, each column's hash seeding the next, and skips a null (the seed
passes through): a string is XXH64 of its UTF-8 bytes (the `xxhash` package, per distinct topic), an int is XXH64 of
its four little-endian bytes (done here on whole numpy arrays: the formula for a 4-byte input, XXH64's short-input
path). The result is read as a signed long, as Spark returns it. tests/audit/test_spark_hash.py compares both with
Spark's own function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mover.audit import columns

SEED = 42
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P5 = np.uint64(0x27D4EB2F165667C5)


def string_hashes(values: list[str | None], seed: int = SEED) -> np.ndarray:
    """XXH64 of each string's UTF-8 bytes from `seed` (uint64); a None keeps the seed."""
    import xxhash

    return np.array([seed if v is None else xxhash.xxh64_intdigest(v.encode(), seed) for v in values],
                    dtype=np.uint64)


def int_hashes(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 32-bit int from its seed (uint64 arrays; numpy's uint64 arithmetic wraps as XXH64's does)."""
    v = values.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
    with np.errstate(over="ignore"):
        h = seeds + _P5 + np.uint64(4)
        h ^= v * _P1
        h = ((h << np.uint64(23)) | (h >> np.uint64(41))) * _P2 + _P3
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def xxhash64(*columns: Any) -> np.ndarray:
    """Spark's xxhash64 of the columns (int64), for pyarrow arrays of one chunk: strings (plain or dictionary) and
    32-bit ints; nulls are skipped as Spark skips them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seeds = np.full(len(columns[0]) if columns else 0, SEED, dtype=np.uint64)
    for i, column in enumerate(columns):
        present = ~np.asarray(column.is_null(), dtype=bool)
        if pa.types.is_integer(column.type):
            values = column.to_numpy(zero_copy_only=False)
            seeds[present] = int_hashes(values[present], seeds[present])
        elif i == 0:  # every row starts from the same seed: one hash per distinct string
            if not pa.types.is_dictionary(column.type):
                column = pc.dictionary_encode(column)
            per_value = string_hashes(column.dictionary.to_pylist())
            indices = column.indices.to_numpy(zero_copy_only=False)
            seeds[present] = per_value[indices[present].astype(np.int64)]
        else:  # a string after another column: seeded per row
            values = column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column
            texts = values.to_pylist()
            import xxhash

            for row in np.flatnonzero(present).tolist():
                seeds[row] = xxhash.xxh64_intdigest(texts[row].encode(), int(seeds[row]))
    return seeds.view(np.int64)


def partition_keys(topic: Any, partition: Any) -> np.ndarray:
    """Spark's xxhash64(topic, partition) (int64), as xxhash64 computes it, for arrays or chunked arrays (the topics
    as strings or dictionaries, one per chunk or shared): each distinct topic hashed once, the rows a step at a time
    (mover/audit/columns.py says why)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.table({"topic": topic, "partition": partition})
    if not pa.types.is_dictionary(table.schema.field("topic").type):
        table = table.set_column(0, "topic", pc.dictionary_encode(table.column("topic")))
    names = columns.Names(table.column("topic"))
    # A null topic is skipped: its row starts the partition's hash from the seed.
    per_topic = np.append(string_hashes(names.dictionary.to_pylist()), np.uint64(SEED))
    keys = np.empty(table.num_rows, dtype=np.int64)
    for at, batch in columns.steps(table):
        topics, partitions = batch.columns
        seeds = per_topic[names.rows(topics, at)]
        values = partitions.to_numpy(zero_copy_only=False)
        if partitions.null_count:
            present = ~np.asarray(partitions.is_null(), dtype=bool)
            seeds[present] = int_hashes(values[present], seeds[present])
        else:
            seeds = int_hashes(values, seeds)
        keys[at:at + batch.num_rows] = seeds.view(np.int64)
    return keys
