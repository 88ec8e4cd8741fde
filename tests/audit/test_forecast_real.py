"""The forecast end to end on disks that really fill: a real Kafka 3.7 and a moverd, each with three log dirs on 24 MiB
tmpfs mounts, kafka-python producers writing each dir at its own steady rate, `mover-audit collect` every 2 s; the
forecast made halfway (when the first dir is at 45%) gives each dir's time to 90% within 15% of when it happened.
On Kafka one dir also holds a topic under retention.bytes that reaches its limit after the forecast is made: only
the retention that collect records (DescribeConfigs) tells the forecast it will stop growing. The two brokers fill at
the same time (each fill mostly waits on its producers' pace), each judged by its own test."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from mover.audit import forecast
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


@pytest.fixture(scope="module")
def fills(kafka_home_dir: Path, kafka_jvm_opts: str, tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, tuple[Path, Future[float]]]:
    """Both fills started at once: broker name -> (its fleet root, the fill's seconds or its error)."""
    base = tmp_path_factory.mktemp("fills")
    for name in ("kafka", "moverd"):
        (base / name).mkdir()

    def timed(fill: Callable[[], None]) -> float:
        started = time.monotonic()
        fill()
        return time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        kafka = pool.submit(timed, lambda: fill_kafka(kafka_home_dir, base / "kafka", base / "kafka-fleet",
                                                               kafka_jvm_opts))
        moverd = pool.submit(timed, lambda: fill_moverd(base / "moverd", base / "moverd-fleet"))
        # Both run to their end here (the pool waits), so neither broker outlives the fixture's set-up.
    return {"kafka": (base / "kafka-fleet", kafka), "moverd": (base / "moverd-fleet", moverd)}


def test_kafka_dirs_fill_when_the_forecast_said(fills: dict[str, tuple[Path, Future[float]]]) -> None:
    root, filled = fills["kafka"]
    print(f"filled in {filled.result():.0f} s")
    half, disks = forecast_halfway(root)
    settings = {(r["topic"], r["partition"]): (r["retention_bytes"], r["retention_ms"])
                for r in pq.read_table(half / "partitions").to_pylist()}
    week = 7 * 24 * 3_600_000  # Kafka's default retention.ms
    assert settings == {("capped", 0): (CAPPED_BYTES, week), **{("t", p): (-1, week) for p in range(3)}}
    check(judge(root, half, disks))


def test_moverd_dirs_fill_when_the_forecast_said(fills: dict[str, tuple[Path, Future[float]]]) -> None:
    root, filled = fills["moverd"]
    print(f"filled in {filled.result():.0f} s")
    half, disks = forecast_halfway(root)
    check(judge(root, half, disks))
