"""forecast_members: the copies' history rows found on packed category codes (partition_rows) are the rows a
MultiIndex of their names finds, and the disks grouped on packed codes (_packed) are groupby's (pure logic, no
files)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mover.audit import forecast_members


def test_rows_found_on_codes_are_those_found_by_name() -> None:
    rng = np.random.default_rng(5)
    clusters, topics = ["c1", "c2", "c3"], [f"t{i}" for i in range(40)]
    keys = pd.DataFrame({"cluster": rng.choice(clusters, 400), "topic": rng.choice(topics, 400),
                         "partition": rng.integers(0, 30, 400)}).drop_duplicates(ignore_index=True)
    # Copies of the history's partitions, of partitions it lacks (a name it never had, a partition past its
    # largest), in an order of their own; their categories hold names the history lacks and miss some it has.
    copies = pd.concat([keys.sample(frac=2.5, replace=True, random_state=1),
                        pd.DataFrame({"cluster": ["c9", "c1"], "topic": ["t1", "new"], "partition": [0, 3]}),
                        keys.iloc[:5].assign(partition=99)], ignore_index=True)
    copies = copies[~copies["topic"].eq("t7")]
    by_code = copies.astype({"cluster": "category", "topic": "category", "partition": "int32"})
    found = forecast_members.partition_rows(keys, by_code)
    by_name = pd.MultiIndex.from_frame(keys).get_indexer(pd.MultiIndex.from_frame(copies))
    assert found.tolist() == by_name.tolist()
    assert (found >= 0).sum() > len(keys) and (found == -1).sum() == 7
    # The history's own names as categoricals (as the driver reads them): the same rows.
    by_keys = keys.astype({"cluster": "category", "topic": "category"})
    assert forecast_members.partition_rows(by_keys, by_code).tolist() == by_name.tolist()


def test_disks_grouped_on_codes_as_by_groupby() -> None:
    """_packed numbers the disks as groupby(sort=False).ngroup() does, with their names decoded as they were; a
    frame it cannot pack (a null name, a column of strings) is left to the groupby."""
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"cluster": rng.choice(["a", "b", "c"], 500), "broker": rng.integers(-3, 9, 500),
                          "log_dir": rng.choice([f"/d{i}" for i in range(7)], 500)})
    coded = frame.astype({"cluster": "category", "log_dir": "category", "broker": "int32"})
    names = ["cluster", "broker", "log_dir"]
    packed = forecast_members._packed(coded, names)
    assert packed is not None
    group, found = packed
    assert group.tolist() == frame.groupby(names, sort=False).ngroup().tolist()
    first = frame.groupby(names, sort=False).head(1).reset_index(drop=True)
    pd.testing.assert_frame_equal(found, first.astype({"broker": "int32"}))
    assert forecast_members._packed(frame, names) is None
    with_null = coded.copy()
    with_null.loc[3, "cluster"] = None
    assert forecast_members._packed(with_null, names) is None
