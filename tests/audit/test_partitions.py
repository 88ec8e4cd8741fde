"""mover/audit/partitions.py: the partitions dataset read on the driver gives the same keys, cluster codes, per-broker
sums and named rows whether its name columns hold one dictionary or a dictionary per row group (as pyarrow reads a
file of several row groups), and whatever the steps' size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mover.audit import columns, partitions, spark_hash


def _rows() -> pd.DataFrame:
    clusters = ["a", "b", None, "c"]
    return pd.DataFrame({
        "cluster": [clusters[i % 4] if i < 12 else "z" for i in range(20)],
        "topic": [f"t{i % 5}" if i % 7 else None for i in range(20)],
        "partition": [i % 3 for i in range(20)],
        "replicas": [[1 + i % 3, 2 + i % 4] if i % 6 else ([None, 1] if i % 4 else []) for i in range(20)],
    })


def _tables(tmp_path: Path) -> tuple[pa.Table, pa.Table]:
    frame = _rows()
    types = pa.schema([("cluster", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                       ("replicas", pa.list_(pa.int32()))])
    plain = pa.Table.from_pandas(frame, types, preserve_index=False)
    pq.write_table(plain, tmp_path / "p.parquet", row_group_size=6)
    grouped = pq.read_table(tmp_path / "p.parquet", read_dictionary=["cluster", "topic"])
    one = plain.set_column(0, "cluster", plain.column("cluster").combine_chunks().dictionary_encode()) \
        .set_column(1, "topic", plain.column("topic").combine_chunks().dictionary_encode())
    return grouped, one


@pytest.mark.parametrize("step", [1, 4, 7, 1000])
@pytest.mark.parametrize("mix", ["mixed", "keys-alone"])
def test_row_groups_with_their_own_dictionaries_read_as_one(step: int, mix: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """(with_keys' rows prefiltered by key and cluster code mixed, or, as if every pair mixed alike, by key alone:
    the merge after it keeps only the wanted pairs either way)"""
    monkeypatch.setattr(columns, "STEP_ROWS", step)
    if mix == "keys-alone":
        monkeypatch.setattr(partitions, "_MIX", np.int64(0))
    grouped, one = _tables(tmp_path)
    dictionaries = [c.dictionary.to_pylist() for c in grouped.column("cluster").chunks]
    assert len(dictionaries) == 4 and len({tuple(d) for d in dictionaries}) > 1  # the case under test
    a, b = partitions.LocalPartitions(grouped), partitions.LocalPartitions(one)
    frame = _rows()
    assert a.pkey.tolist() == b.pkey.tolist() == spark_hash.partition_keys(
        pa.array(frame["topic"]), pa.array(frame["partition"], pa.int32())).tolist()
    assert a.clusters[a.cluster].tolist() == b.clusters[b.cluster].tolist() == frame["cluster"].tolist()

    def ordered(listed: pd.DataFrame) -> pd.DataFrame:
        return listed.fillna({"cluster": "-"}).sort_values(["cluster", "broker"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(ordered(a.listed_per_broker()), ordered(b.listed_per_broker()))
    # Rows of every row group, a cluster whose name only one row group holds, and a key no row has.
    wanted = frame.assign(pkey=a.pkey).iloc[[0, 5, 6, 13, 19]]
    clusters = pd.concat([wanted["cluster"], pd.Series(["a"])], ignore_index=True)
    keys = pd.concat([wanted["pkey"], pd.Series([12345])], ignore_index=True)
    found = a.with_keys(clusters, keys)
    pd.testing.assert_frame_equal(found, b.with_keys(clusters, keys))
    pairs = set(zip(clusters, keys, strict=True))
    expected = [i for i, pair in enumerate(zip(frame["cluster"], a.pkey.tolist(), strict=True)) if pair in pairs]
    assert len(found) == len(expected) >= 5 and found["topic"].dtype == object
    assert sorted(found["partition"]) == sorted(frame["partition"].iloc[expected])
    none = a.with_keys(pd.Series(["nowhere"]), pd.Series([1]))
    assert none.empty and list(none.columns) == ["cluster", "topic", "partition", "replicas", "pkey"]
    assert none["topic"].dtype == object


@pytest.mark.parametrize("step", [1, 7, 1000])
def test_a_clusters_holders_from_the_read_lists_answer_as_the_frame_of_its_lists(step: int, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    """plan/outputs.py's holders of a cluster, made from the rows and lists as read (rows_with, code_of,
    replica_lists: no frame of the lists), against with_keys' frame: the same brokers for every key, the union
    where two rows share a key, none for a null list, a null broker left out; row groups with dictionaries of their
    own; a cluster the dataset lacks holds nothing."""
    from mover.audit.plan.between import Holders

    monkeypatch.setattr(columns, "STEP_ROWS", step)
    for table in _tables(tmp_path):
        local = partitions.LocalPartitions(table)
        keys = pd.Series(local.pkey).drop_duplicates()
        rows = local.rows_with(keys.to_numpy())
        for name in ["a", "b", "c", "z", "nowhere"]:
            framed = local.with_keys(pd.Series([name] * len(keys)), keys)
            expected: dict[int, set[int]] = {}
            for key, reps in zip(framed["pkey"].tolist(), framed["replicas"].tolist(), strict=True):
                expected.setdefault(key, set()).update(int(b) for b in (reps if reps is not None else [])
                                                       if not pd.isna(b))
            mine = rows[local.cluster[rows] == local.code_of(name)]
            held = Holders(local.pkey[mine], local.replica_lists(mine))
            assert held.contains(keys.to_numpy()).tolist() == [k in expected for k in keys.tolist()], name
            assert {k: held[k] for k in keys.tolist() if k in held} == expected, name
