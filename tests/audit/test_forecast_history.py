"""The forecast's compact history (mover/audit/forecast_history.py): built from the snapshots when missing, a new
snapshot appended (and the ones leaving the window dropped) instead of reading the window again, rebuilt when it does
not match the snapshots; every way the same forecast as reading all the snapshots (forecast.compute_local)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mover.audit import forecast, forecast_history, snapshot
from tests.audit.test_forecast import _snapshots


def same_as_reading_every_snapshot(result: forecast.ForecastResult) -> None:
    local = forecast.compute_local(result.snapshots)
    pd.testing.assert_frame_equal(local.disks, result.disks, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(local.history.astype(result.history.dtypes), result.history)


@pytest.mark.timeout(900)
def test_appended_kept_dropped_and_rebuilt(tmp_path: Path, spark) -> None:  # noqa: ANN001
    root = tmp_path / "snapshots"
    _snapshots(root)
    *older, newest = snapshot.list_snapshots(root)
    aside = tmp_path / newest.name
    newest.rename(aside)
    # Spark and the driver keep the same layout: each takes up the other's history.
    first = forecast.compute(spark, older, on_driver=False)
    assert first.kept == "rebuilt" and forecast_history.read_manifest(root) == [p.name for p in older]
    aside.rename(newest)
    paths = snapshot.list_snapshots(root)
    added = forecast.compute(spark, paths, on_driver=True)
    assert added.kept == "appended 1"
    same_as_reading_every_snapshot(added)
    assert forecast_history.update(spark, paths).how == "kept"
    assert forecast.compute(spark, paths, on_driver=True).kept == "kept"
    # The last 24 hours: the snapshots before leave the front of the kept history, nothing is read again.
    recent = forecast.window(paths[-1], 24.0)
    shorter = forecast.compute(spark, recent, on_driver=False)
    assert shorter.kept == "appended 0" and forecast_history.read_manifest(root) == [p.name for p in recent]
    same_as_reading_every_snapshot(shorter)
    # A history that does not match the snapshots (one of them gone from the middle of it) is rebuilt.
    shutil.rmtree(recent[3])
    rest = snapshot.list_snapshots(root)[-6:]
    rebuilt = forecast.compute(spark, rest, on_driver=True)
    assert rebuilt.kept == "rebuilt"
    same_as_reading_every_snapshot(rebuilt)
    assert forecast.compute(spark, rest, on_driver=False).kept == "kept"
    # So is one of another version; and an older snapshot's forecast keeps nothing.
    manifest = forecast_history.where(root) / forecast_history.MANIFEST
    manifest.write_text(json.dumps({"version": 0, "snapshots": [p.name for p in rest]}))
    assert forecast_history.read_manifest(root) is None
    assert forecast_history.update(spark, rest[:-1]).how == "in memory"
    assert json.loads(manifest.read_text())["version"] == 0
