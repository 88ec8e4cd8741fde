"""The forecast end to end on disks that really fill: a real Kafka 3.7 and a moverd, each with three log dirs on 24 MiB
tmpfs mounts, kafka-python producers writing each dir at its own steady rate, `mover-audit collect` every 2 s; the
forecast made halfway (when the first dir is at 45%) gives each dir's time to 90% within 15% of when it happened.
On Kafka one dir also holds a topic under retention.bytes that reaches its limit after the forecast is made: only
the retention that collect records (DescribeConfigs) tells the forecast it will stop growing. With no copy moved,
every snapshot collect wrote of Kafka has the same fingerprint of its copies (forecast_replica_map)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from mover.audit import forecast, snapshot
from mover.audit.forecast import replica_map
from mover.testing.disk_fill import CAPPED_BYTES, Judged, fill_kafka, fill_moverd, halfway, judge

TOLERANCE = 0.15


def forecast_halfway(root: Path) -> tuple[Path, pd.DataFrame]:
    """The forecast as of the halfway snapshot, from it and the ones before, on the driver (forecast.compute_local:
    the same steps as on Spark, which test_forecast.py checks give the same answer; bench/forecast_real.py runs
    the command)."""
    half = halfway(root)
    return half, forecast.compute_local(forecast.window(half, None)).disks


def check(judged: list[Judged]) -> None:
    text = "\n".join(f"{j.log_dir}: at {j.percent_then:.0f}%, 90% in {j.predicted_s:.1f} s predicted, "
                     f"{j.actual_s:.1f} s actual ({j.error:.0%})" for j in judged)
    print(text)
    assert len(judged) == 3, text
    assert all(j.error <= TOLERANCE for j in judged), text
    assert all(j.low_s <= j.predicted_s <= j.high_s for j in judged), text


def test_kafka_dirs_fill_when_the_forecast_said(kafka_home_dir: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    fill_kafka(kafka_home_dir, tmp_path / "kafka", tmp_path / "fleet")
    print(f"filled in {time.monotonic() - started:.0f} s")
    half, disks = forecast_halfway(tmp_path / "fleet")
    settings = {(r["topic"], r["partition"]): (r["retention_bytes"], r["retention_ms"])
                for r in pq.read_table(half / "partitions").to_pylist()}
    week = 7 * 24 * 3_600_000  # Kafka's default retention.ms
    assert settings == {("capped", 0): (CAPPED_BYTES, week), **{("t", p): (-1, week) for p in range(3)}}
    check(judge(tmp_path / "fleet", half, disks))
    # No copy moved: collect wrote Kafka's answers in the same order, byte for byte, at every snapshot, so an
    # append of any of them reads only its sizes (forecast_replica_map).
    prints = {replica_map.fingerprint(p) for p in snapshot.list_snapshots(tmp_path / "fleet")}
    assert len(prints) == 1 and None not in prints, prints


def test_moverd_dirs_fill_when_the_forecast_said(tmp_path: Path) -> None:
    started = time.monotonic()
    fill_moverd(tmp_path, tmp_path / "fleet")
    print(f"filled in {time.monotonic() - started:.0f} s")
    half, disks = forecast_halfway(tmp_path / "fleet")
    check(judge(tmp_path / "fleet", half, disks))
