"""forecast on the real local Spark of the test run: a hand-made history whose every disk's answer is known (growth,
a move, a deleted topic, a plateau under retention.bytes, a broker missing from snapshots), and the command line on
a fleet grown by `synth --days`."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from mover.audit import cli, forecast, snapshot, synth_history
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import layout as layout
from mover.cli import common
from mover.testing.audit_cli import SPARK
from mover.testing.forecast_history import GB, STEPS, hand_made_snapshots


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("made") / "snapshots"
    hand_made_snapshots(root)
    return root


def test_moves_deletions_plateaus_and_gaps(made: Path, spark) -> None:  # noqa: ANN001
    paths = snapshot.list_snapshots(made)
    result = forecast.compute(spark, forecast.window(paths[-1], None))
    d = result.disks.set_index(["broker", "log_dir"])
    assert list(result.disks.columns) == list(layout.DISKS)
    d0, d1, other = d.loc[(1, "/d0")], d.loc[(1, "/d1")], d.loc[(2, "/d0")]
    # d0 grows by `grow` alone: the move out of `still` is a step, not a shrinking disk.
    assert abs(d0["rate_bytes_per_hour"] - 10 * GB) < 0.01 * GB
    used = 100 * GB + 10 * GB * 48
    assert d0["used_bytes"] == used and abs(d0["hours_to_90"] - (900 * GB - used) / (10 * GB)) < 0.1
    assert abs(d0["hours_to_full"] - (1000 * GB - used) / (10 * GB)) < 0.1
    assert list(d0["top_partitions"]) == ["grow-0"]
    # d1 took `still` and lost `gone`: steps; `capped` is at its retention.bytes: nothing grows.
    assert d1["rate_bytes_per_hour"] == 0 and d1["hours_to_90"] == math.inf and d1["growing"] == 0
    assert d1["used_bytes"] == 600 * GB
    # Broker 2 missed the last two snapshots: a gap, forecast from its last one (8 h before), not a zero.
    assert other["status"] == layout.STATUS_STALE and other["as_of_hours"] == 8.0
    assert abs(other["rate_bytes_per_hour"] - GB) < 0.01 * GB
    assert abs(other["hours_to_90"] - ((900 - 340) - 8)) < 0.1
    assert result.disks.iloc[0]["log_dir"] == "/d0" and result.disks.iloc[0]["broker"] == 1  # soonest first


def test_the_driver_and_spark_forecast_alike(made: Path, spark) -> None:  # noqa: ANN001
    """Spark's steps, the driver's from the kept history (what a local master runs: no Spark job) and the pandas
    reference reading every snapshot give the same forecast."""
    paths = snapshot.list_snapshots(made)
    moves = pd.DataFrame({"cluster": ["c"], "broker": [1], "topic": ["grow"], "partition": [0],
                          "from_dir": ["/d0"], "to_dir": ["/d1"]})
    for given in (None, moves):
        on_spark = forecast.compute(spark, paths, moves=None if given is None else spark.createDataFrame(given),
                                    keep_history=False, on_driver=False)
        assert forecast_driver.fits(paths)
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
        on_driver = forecast.compute(spark, paths, moves=given)
        assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs
        local = forecast.compute_local(paths, moves=given)
        for other in (on_driver, local):
            pd.testing.assert_frame_equal(other.disks, on_spark.disks, check_exact=False, rtol=1e-9)
            pd.testing.assert_frame_equal(other.history.astype(on_spark.history.dtypes), on_spark.history)


def test_a_window_and_a_planned_move_change_the_forecast(made: Path, spark) -> None:  # noqa: ANN001
    paths = snapshot.list_snapshots(made)
    # The last 8 hours: two snapshots of broker 2 fewer; broker 1's answer does not change with the window.
    short = forecast.window(paths[-1], 8.0)
    assert len(short) == 3
    d = forecast.compute(spark, short).disks.set_index(["broker", "log_dir"])
    assert abs(d.loc[(1, "/d0"), "rate_bytes_per_hour"] - 10 * GB) < 0.01 * GB
    # Broker 2 is in one snapshot of it: a size, no growth known.
    assert d.loc[(2, "/d0"), "status"] == layout.STATUS_STALE and d.loc[(2, "/d0"), "rate_bytes_per_hour"] == 0
    # A planned move of `grow` to d1: its growth goes with it, d0 stops growing and d1 starts.
    moves = spark.createDataFrame(pd.DataFrame({"cluster": ["c"], "broker": [1], "topic": ["grow"],
                                                "partition": [0], "from_dir": ["/d0"], "to_dir": ["/d1"]}))
    d = forecast.compute(spark, snapshot.list_snapshots(made), moves=moves).disks.set_index(["broker", "log_dir"])
    assert d.loc[(1, "/d0"), "rate_bytes_per_hour"] == 0 and d.loc[(1, "/d0"), "used_bytes"] == 0
    assert abs(d.loc[(1, "/d1"), "rate_bytes_per_hour"] - 10 * GB) < 0.01 * GB
    assert d.loc[(1, "/d1"), "used_bytes"] == 600 * GB + 580 * GB


def test_the_command_prints_the_answer_first_and_writes_the_layout(made: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = cli.main(["forecast", "--snapshots", str(made), "--out", str(out), *SPARK])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    first = text.splitlines()[0]
    assert first.startswith("Forecast as of") and "1 disk full within 72 h, 1 at 90% within 7 d" in first
    assert text.index("/d0") < text.index("/d1")
    written = pd.read_parquet(out / layout.DISKS_FILE)
    assert list(written.columns) == list(layout.DISKS)
    summary = json.loads((out / layout.SUMMARY_FILE).read_text())
    assert summary["snapshots"] == STEPS and summary["disks_full_within_72h"] == 1
    assert summary["soonest"][0]["log_dir"] == "/d0"
    # With a plan moving `grow` (580 GB, 10 GB/h) to d1: d0 never fills; d1 would hold 1180 GB of 1000: full now.
    plan = tmp_path / "plan" / "moves"
    plan.mkdir(parents=True)
    pd.DataFrame({"cluster": ["c"], "broker": [1], "topic": ["grow"], "partition": [0], "from_dir": ["/d0"],
                  "to_dir": ["/d1"], "size_bytes": [580 * 10 ** 9], "step": [1]}).astype(
        {"broker": "int32", "partition": "int32", "step": "int32"}).to_parquet(plan / "part-0.parquet")
    code = cli.main(["forecast", "--snapshots", str(made), "--plan", str(plan.parent), "--out", str(tmp_path / "p"),
                     *SPARK])
    _, err = capsys.readouterr()
    assert code == 0, err
    after = pd.read_parquet(tmp_path / "p" / layout.DISKS_FILE).set_index(["broker", "log_dir"])
    assert after.loc[(1, "/d0"), "rate_bytes_per_hour"] == 0 and after.loc[(1, "/d0"), "hours_to_full"] == math.inf
    assert after.loc[(1, "/d1"), "hours_to_full"] == 0
    code = cli.main(["forecast", "--snapshots", str(made), "--since", "soon", *SPARK])
    _, err = capsys.readouterr()
    assert code == common.EXIT_USAGE and "expected a duration like 72h" in err


def test_audit_forecasts_in_its_session_and_fails_on_a_disk_filling_soon(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "audit"
    code = cli.main(["audit", "--snapshots", str(made), "--out", str(out), "--fail-on", "full-within=72h",
                     "--skip-duplicates", *SPARK])
    text, err = capsys.readouterr()
    assert code == common.EXIT_FINDINGS
    assert err.strip().splitlines() == [err.strip()]
    assert "full-within=72h (1: c broker 1 /d0 in 42.0 h)" in err
    assert "Worst brokers" in text and "Disks by time to 90%" in text
    assert (out / "findings.json").exists() and (out / layout.DISKS_FILE).exists()
    # d0 fills in 42 h: not within 24 h.
    code = cli.main(["audit", "--snapshots", str(made), "--out", str(tmp_path / "b"), "--fail-on",
                     "full-within=24h", "--skip-duplicates", "--forecast", "--since", "1d", *SPARK])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads((tmp_path / "b" / layout.SUMMARY_FILE).read_text())["since_hours"] == 24.0
    code = cli.main(["audit", "--snapshots", str(made), "--fail-on", "full-within=soon", *SPARK])
    _, err = capsys.readouterr()
    assert code == common.EXIT_USAGE and "expected a duration like 72h" in err


@pytest.mark.timeout(900)  # a Spark session, a plan and two Chromium runs on 2 shared cores
def test_synth_grows_a_fleet_and_the_report_draws_its_flagged_disks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], spark) -> None:  # noqa: ANN001
    from mover.testing.report_page import check_report_in_chromium

    root = tmp_path / "snapshots"
    code = cli.main(["synth", "--out", str(root), "--days", "6", "--every", "4", "--clusters", "2", "--brokers", "3",
                     "--disks", "2", "--replicas-per-disk", "6", "--replication-factor", "2", "--seed", "4"])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert len(snapshot.list_snapshots(root)) == 37 and "truth" in text
    truth = pd.read_parquet(root / synth_history.TRUTH_FILE)
    assert len(truth) == 2 * 3 * 2 and truth["at_90_h"].notna().all()
    out, page = tmp_path / "audit", tmp_path / "report.html"
    code = cli.main(["audit", "--snapshots", str(root), "--out", str(out), "--forecast", "--plan",
                     str(tmp_path / "plan"), "--report", str(page), *SPARK])
    text, err = capsys.readouterr()
    assert code == 0, err
    disks = pd.read_parquet(out / layout.DISKS_FILE)
    flagged = layout.flagged(disks)
    assert len(flagged) >= 1, disks[["log_dir", "hours_to_90", "status"]]
    history = pd.read_parquet(out / layout.HISTORY_FILE)
    assert set(map(tuple, history[["cluster", "broker", "log_dir"]].drop_duplicates().to_numpy())) == set(
        map(tuple, flagged[["cluster", "broker", "log_dir"]].to_numpy()))
    dom = check_report_in_chromium(page, tmp_path)
    assert "Forecast: which disk fills next" in dom
    assert all(f"<h3>cluster-{c:02d}</h3>" in dom for c in range(2))
    drawn = re.findall(r'<div class="figure" id="forecast(\d+)">(.*?)</div>', dom, re.S)
    assert len(drawn) == len(flagged)
    for _, svg in drawn:
        assert "<svg" in svg and svg.count("<path") >= 10


def test_past_its_fixed_bounds_the_driver_forecasts_within_half_the_memory(made: Path, monkeypatch) -> None:  # noqa: ANN001
    """Past DRIVER_CELLS and DRIVER_REPLICA_ROWS the driver still forecasts when its estimated peak is within half
    the memory available, and leaves it to Spark when not."""
    paths = snapshot.list_snapshots(made)
    assert forecast_driver.fits(paths, keep=False, available=0)  # within the fixed bounds: whatever the memory
    monkeypatch.setattr(forecast_driver, "DRIVER_CELLS", 1)
    monkeypatch.setattr(forecast_driver, "DRIVER_REPLICA_ROWS", 1)
    cells = snapshot.dataset_rows(paths[-1] / "partitions") * len(paths)
    most = max(snapshot.dataset_rows(p / "replicas") for p in paths)
    need = forecast_driver.peak_bytes(cells, most)
    assert forecast_driver.fits(paths, keep=False, available=2 * need)
    assert not forecast_driver.fits(paths, keep=False, available=2 * need - 2)
    assert forecast_driver.memory_available() > need
