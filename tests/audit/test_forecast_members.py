"""forecast_members.partition_rows: the copies' history rows found on packed category codes are the rows a
MultiIndex of their names finds (pure logic, no files)."""

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
