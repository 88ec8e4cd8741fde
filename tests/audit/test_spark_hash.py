"""mover/audit/spark_hash.py against Spark's own xxhash64(topic, partition): the plan's pass keys replicas in the
JVM and the driver keys the partitions it reads itself; a move is named only where both agree."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from mover.audit import columns, spark_hash


def _topics(rng: random.Random, n: int) -> list[str | None]:
    alphabet = "abcxyz-._0123456789" + "éü✓日本" + "\U0001f600"
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.05:
            out.append(None)
            continue
        # XXH64 takes other paths for inputs of 32 bytes and more, and for their 8- and 4-byte tails.
        out.append("".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 4, 7, 8, 31, 32, 33, 64, 200]))))
    return out


def test_partition_keys_equal_sparks_xxhash64(spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    rng = random.Random(7)
    topics = _topics(rng, 400)
    parts = [None if rng.random() < 0.05 else rng.choice([0, 1, -1, 2**31 - 1, -2**31, rng.randrange(10**6)])
             for _ in topics]
    frame = spark.createDataFrame(list(zip(topics, parts, strict=True)), "topic string, partition int")
    want = frame.select(F.xxhash64("topic", "partition").alias("h")).toPandas()["h"].to_numpy()
    plain = spark_hash.partition_keys(pa.array(topics, pa.string()), pa.array(parts, pa.int32()))
    dictionary = spark_hash.partition_keys(pa.array(topics, pa.string()).dictionary_encode(),
                                           pa.array(parts, pa.int32()))
    assert plain.dtype == np.int64
    assert (plain == want).all(), np.flatnonzero(plain != want)[:5]
    assert (dictionary == want).all()
    # Chunks with a dictionary each (as a read of several row groups gives them), a few rows a step.
    chunked = pa.chunked_array([pa.array(topics[at:at + 150], pa.string()).dictionary_encode()
                                for at in range(0, len(topics), 150)])
    monkeypatch.setattr(columns, "STEP_ROWS", 7)
    assert (spark_hash.partition_keys(chunked, pa.chunked_array([parts[:150], parts[150:]], pa.int32())) == want).all()


def test_a_different_topic_or_partition_is_a_different_key() -> None:
    keys = spark_hash.partition_keys(pa.array(["t", "t", "u", None]), pa.array([0, 1, 0, 0], pa.int32()))
    assert len(set(keys.tolist())) == 4


def test_a_log_dirs_key_equals_sparks_xxhash64_of_three_columns(spark) -> None:  # noqa: ANN001
    """plan/encoding.listed_dirs keys a small snapshot's dirs here: xxhash64(cluster, broker, log_dir), a string
    after an int."""
    from pyspark.sql import functions as F

    rng = random.Random(11)
    clusters, dirs = _topics(rng, 300), _topics(rng, 300)
    brokers = [None if rng.random() < 0.05 else rng.choice([0, 1, 7, 1001, 2**31 - 1]) for _ in clusters]
    frame = spark.createDataFrame(list(zip(clusters, brokers, dirs, strict=True)),
                                  "cluster string, broker int, log_dir string")
    want = frame.select(F.xxhash64("cluster", "broker", "log_dir").alias("h")).toPandas()["h"].to_numpy()
    got = spark_hash.xxhash64(pa.array(clusters, pa.string()), pa.array(brokers, pa.int32()),
                              pa.array(dirs, pa.string()))
    assert (got == want).all(), np.flatnonzero(got != want)[:5]
