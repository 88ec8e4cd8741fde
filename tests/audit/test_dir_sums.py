"""mover/audit/plan/task.py: `audit` alone sums each dir's replicas by counting every row into its dir's slot
(_summing_task); the planning task sums them too, from the rows sorted by dir (steps.plan_step). Both give the same
disk rows and stray count, whatever the steps' sizes: sizes near 2**47, negative and null ones, futures, a future
whose current copy is elsewhere, unknown flags, dirs log_dirs does not list, a broker without rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from mover.audit import columns, planner
from mover.audit.plan import steps, task
from mover.audit.plan.encoding import DIR_BITS, SIZE_SHIFT


def _dirs() -> pd.DataFrame:
    # 3 brokers (bkey 0, 1, 2) with 3, 1 and 2 dirs; broker 1 has no rows.
    bkey = [0, 0, 0, 1, 2, 2]
    return pd.DataFrame({"log_dir": [f"/d{i}" for i in range(6)], "online": True, "cordoned": False,
                         "total_bytes": 1 << 50, "usable_bytes": 1 << 49, "bkey": bkey})


def _rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    broker = rng.choice([0, 2], n)
    within = np.where(broker == 0, rng.integers(0, 3, n), rng.integers(0, 2, n))
    code = (broker.astype(np.int64) << DIR_BITS) | within
    code[rng.random(n) < 0.05] = -1  # a dir log_dirs does not list
    size = rng.integers(0, 1 << 46, n)
    size[rng.random(n) < 0.05] = 0  # a null size is written as 0
    size[rng.random(n) < 0.02] *= -1  # a writer's negative size: summed as written, counted as 0 where used
    flags = rng.choice([0, 0, 0, 2, 4, 1, 3], n)  # current, future, unknown, blocked
    sf = (size << SIZE_SHIFT) | flags
    pkey = rng.integers(-(1 << 62), 1 << 62, n)
    return pa.table({"code": pa.array(code, pa.int64()), "sf": pa.array(sf, pa.int64()),
                     "pkey": pa.array(pkey, pa.int64())})


def _run(plan: bool, table: pa.Table) -> pd.DataFrame:
    dirs = _dirs()
    work = task.planner_task(planner.Rules(), dirs, np.zeros(len(dirs), dtype=bool), plan)
    out = pa.Table.from_batches(list(work(iter(table.to_batches(max_chunksize=500))))).to_pandas()
    kept = out[out["kind"].isin([steps.KIND_DISK, steps.KIND_STRAY])]
    return kept[["kind", "bkey", "dir", "size_bytes", "used_before", "used_after",
                 *steps.USAGE_COLUMNS]].reset_index(drop=True)


@pytest.mark.parametrize("step", [7, 1000, 1 << 20])
def test_summing_task_gives_the_planning_tasks_disk_rows(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _rows(3000, step)
    monkeypatch.setattr(columns, "STEP_ROWS", step)
    summed = _run(False, table)
    planned = _run(True, table)
    # The plan's prediction; summing predicts nothing, used_after is used_before as a float (as before this path).
    planned["used_after"] = planned["used_before"].astype("float64").astype("int64")
    assert sorted(summed["bkey"].unique().tolist()) == [0, 2]  # no rows for broker 1: no disk rows
    assert (summed["kind"] == steps.KIND_STRAY).sum() == 1 and summed["size_bytes"].max() > 0
    pd.testing.assert_frame_equal(summed, planned)


def test_slot_sums_are_exact_int64_sums() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(-(1 << 62), 1 << 62, 1 << 20)
    slot = rng.integers(0, 3, len(values))
    expected = np.zeros(3, dtype=np.int64)
    np.add.at(expected, slot, values)  # int64, wrapping
    assert task._slot_sums(slot, values, 3).tolist() == expected.tolist()
