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


def partition_keys(topic: Any, partition: Any) -> np.ndarray:
    """Spark's xxhash64(topic, partition) (int64) for pyarrow arrays of one chunk: `topic` a string or dictionary
    array, `partition` an int array; nulls are skipped as Spark skips them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(topic.type):
        topic = pc.dictionary_encode(topic)
    per_topic = string_hashes(topic.dictionary.to_pylist())
    indices = topic.indices.to_numpy(zero_copy_only=False)
    seeds = np.full(len(topic), SEED, dtype=np.uint64)
    present = ~np.asarray(topic.is_null(), dtype=bool)
    seeds[present] = per_topic[indices[present].astype(np.int64)]
    parts = partition.to_numpy(zero_copy_only=False)
    if partition.null_count:
        keep = ~np.asarray(partition.is_null(), dtype=bool)
        out = seeds.copy()
        out[keep] = int_hashes(parts[keep], seeds[keep])
    else:
        out = int_hashes(parts, seeds)
    return out.view(np.int64)
