"""Every disk's forecast at once (mover/audit/forecast/disks.py) against forecast.disk_row, one disk at a time, on
disks that exercise its branches: capped (one beyond any growth), shrinking, flat and unbounded copies, disks that
never reach 90%, disks already past it, unknown sizes, rate errors from the residuals or from the copies, a disk
with no current copy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mover.audit import forecast
from mover.audit.forecast import disks as forecast_disks
from mover.testing.forecast_history import GB


def _fleet(seed: int, disks: int = 300) -> dict[str, np.ndarray]:
    """Disks of up to 12 copies of every kind; seed 3: growing copies without a cap only (no copy has an end)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 12, disks)
    disk = np.repeat(np.arange(disks), counts)
    m = len(disk)
    sizes = rng.uniform(0, 50, m) * GB
    kind = rng.integers(0, 6, m) if seed != 3 else np.full(m, 2)
    rates = np.select([kind == 0, kind == 1, kind == 2], [0.0, -rng.uniform(0, 1, m) * GB,
                                                          rng.uniform(0, 0.5, m) * GB], rng.uniform(0, 2, m) * GB)
    # kind 5: a cap no growth reaches (a running sum of such rooms must not overflow to inf)
    caps = np.select([kind == 3, kind == 4, kind == 5], [sizes + rng.uniform(0, 20, m) * GB, sizes,
                                                         np.full(m, 1e308)], math.inf)
    ses = np.where(rng.random(m) < 0.3, np.nan, rng.uniform(0, 0.2, m) * GB)
    used = np.bincount(disk, weights=sizes, minlength=disks) + rng.uniform(0, 5, disks) * GB  # future copies too
    total = np.where(rng.random(disks) < 0.1, np.nan, used + rng.uniform(-20, 400, disks) * GB)
    disk_se = np.where(rng.random(disks) < 0.4, np.nan, rng.uniform(0, 2, disks) * GB)
    names = np.array([f"t{i}-0" for i in range(m)], dtype=object)
    return {"disk": disk, "used": used, "total": total, "disk_se": disk_se, "rates": rates, "sizes": sizes,
            "caps": caps, "ses": ses, "names": names}


@pytest.mark.parametrize(("seed", "chunk"), [(0, None), (1, None), (2, None), (3, None), (0, 40), (2, 1)])
def test_every_disk_at_once_is_each_disk_alone(seed: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch,
                                               ) -> None:
    """disk_rows against disk_row; its copies in one chunk, or in chunks of about `chunk` copies (whole disks:
    one disk a chunk at 1), as a fleet of millions is."""
    if chunk is not None:
        monkeypatch.setattr(forecast_disks, "CHUNK", chunk)
        assert len(forecast_disks._chunks(_fleet(seed)["disk"])) > 20
    f = _fleet(seed)
    disks = len(f["used"])
    # The copies' partitions as rows of the partitions' arrays, in another order than the copies'.
    rows = np.random.default_rng(seed).permutation(len(f["disk"]))

    def of_rows(per_copy: np.ndarray) -> np.ndarray:
        out = np.empty_like(per_copy)
        out[rows] = per_copy
        return out

    together = forecast_disks.disk_rows(f["disk"], disks, f["used"], f["total"], f["disk_se"], rows,
                                        of_rows(f["rates"]), f["sizes"], of_rows(f["caps"]), of_rows(f["ses"]),
                                        lambda at: f["names"][at].tolist())
    checked = {"never": 0, "past": 0, "times": 0}
    for d in range(disks):
        mine = f["disk"] == d
        total = f["total"][d]
        alone = forecast.disk_row(float(f["used"][d]), f["rates"][mine], f["sizes"][mine], f["caps"][mine],
                                  f["ses"][mine], f["names"][mine], float(f["disk_se"][d]),
                                  None if math.isnan(total) else float(total))
        for key, value in alone.items():
            got = together[key][d]
            if isinstance(value, list) and value and isinstance(value[0], str):
                assert got == value, (d, key)
            else:
                np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(value, dtype=float),
                                           rtol=1e-9, atol=1e-3, err_msg=f"disk {d} {key}")
        t90 = alone["hours_to_90"]
        checked["never"] += t90 == math.inf
        checked["past"] += t90 == 0.0
        checked["times"] += 0 < t90 < math.inf
    assert min(checked.values()) > (0 if seed == 3 else 5), checked  # the fleet reaches every branch


@pytest.mark.parametrize("copies, disks", [(20_000, 40), (50, 20), (7, 5), (0, 3)])
def test_the_partitions_driving_each_disk_are_those_of_a_stable_sort(copies: int, disks: int) -> None:
    """_top (each disk's TOP copies by a week's growth, from the copies above a bound per disk) against every copy
    sorted by disk, growth (descending) and place: ties to the earlier copy, nothing at or below 0 (given as -inf,
    as disk_rows does), NaN never."""
    rng = np.random.default_rng(copies)
    disk = np.sort(rng.integers(0, disks, copies))
    week = rng.integers(-1, 5, copies).astype(float) * 1e3  # many ties, zeros and negatives
    week[rng.random(copies) < 0.05] = np.nan
    order = np.lexsort((np.arange(copies), -week, disk))
    starts = np.searchsorted(disk[order], np.arange(disks))
    rank = np.arange(copies) - starts[disk[order]]
    expected = order[(rank < forecast_disks.TOP) & (week[order] > 0)]
    assert forecast_disks._top(disk, np.where(week > 0, week, -np.inf)).tolist() == expected.tolist()


def test_chunks_end_where_a_disk_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forecast_disks, "CHUNK", 10)
    disk = np.repeat(np.arange(8), [3, 0, 25, 1, 9, 9, 0, 4])
    chunks = forecast_disks._chunks(disk)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(disk)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))  # every copy once, in order
    assert all(disk[hi - 1] != disk[hi] for _, hi in chunks[:-1])  # no disk cut in two
    assert forecast_disks._chunks(disk[:0]) == []


def test_runs_added_as_a_weighted_bincount_adds_them() -> None:
    """_add_runs (each disk's run of copies summed at once) adds what np.bincount(disk, weights) adds: disks with no
    copy between, one copy, boolean weights, and no copy at all."""
    rng = np.random.default_rng(4)
    disk = np.sort(rng.choice(np.r_[0:5, 9, 30:40], 300)).astype(np.int32)
    for weights in (rng.random(300) * 1e9, rng.random(300) > 0.5):
        into = np.full(41, 2.0)
        forecast_disks._add_runs(into, disk, None, weights)
        np.testing.assert_allclose(into, 2.0 + np.bincount(disk, weights=weights, minlength=41), rtol=1e-12)
        into = np.zeros(41)
        forecast_disks._add_runs(into, disk, forecast_disks._starts(disk), weights)
        np.testing.assert_allclose(into, np.bincount(disk, weights=weights, minlength=41), rtol=1e-12)
    into = np.zeros(3)
    forecast_disks._add_runs(into, disk[:0], None, np.zeros(0))
    assert not into.any()


def test_finish_takes_disk_rows_lists_as_declared() -> None:
    """forecast.finish of disk_rows' columns taken as declared (the driver's) is finish checking them value by
    value, also for a disk disk_rows has no row for (its list columns empty, as for an empty disk)."""
    import pandas as pd

    f = _fleet(0, disks=30)
    disks = len(f["used"])
    rows = np.arange(len(f["disk"]))
    columns = forecast_disks.disk_rows(f["disk"], disks, f["used"], f["total"], f["disk_se"], rows, f["rates"],
                                       f["sizes"], f["caps"], f["ses"], lambda at: f["names"][at].tolist())
    keys = {"cluster": ["c"] * disks, "broker": list(range(disks)), "log_dir": ["/d"] * disks}
    found = pd.DataFrame({**keys, **columns},
                         columns=[c.split(" ")[0] for c in forecast._DISK_SCHEMA.split(", ")]).iloc[1:]
    listed = pd.DataFrame({**keys, "as_of": 0.0, "total_bytes": np.nan_to_num(f["total"]).astype(np.int64) + 1,
                           "error_now": None}).astype({"broker": "int32"})
    checked, declared = forecast.finish(listed, found), forecast.finish(listed, found, declared=True)
    pd.testing.assert_frame_equal(checked, declared)
    missing = declared[declared["broker"] == 0].iloc[0]
    assert missing["top_partitions"] == [] and len(missing["projection_bytes"]) == 0


def test_projections_are_contiguous_rows() -> None:
    """Each disk's projections are contiguous rows of float64: Arrow converts a strided row value by value (the
    outputs' write of a 40,000-disk forecast took 0.3-0.5 s more when linspace's transposed grid was kept)."""
    f = _fleet(0, disks=50)
    columns = forecast_disks.disk_rows(f["disk"], 50, f["used"], f["total"], f["disk_se"], np.arange(len(f["disk"])),
                                       f["rates"], f["sizes"], f["caps"], f["ses"], lambda at: f["names"][at].tolist())
    for key in ("projection_hours", "projection_bytes", "projection_early", "projection_late"):
        assert all(row.dtype == np.float64 and row.flags.c_contiguous for row in columns[key]), key
