"""The forecast on disks that really fill: predicted vs actual time to 90% per log dir, on a real Kafka 3.7 and on a
moverd (mover/testing/disk_fill.py: three 24 MiB tmpfs dirs each, kafka-python producers at 0.3-0.5 MiB/s per dir,
`mover-audit collect --local` every 2 s until every dir is past 93%). The forecast is `mover-audit forecast
--snapshot HALF` (on Spark, local[2]) as of the first snapshot where a dir is at 45%; the actual time is when the
snapshots saw the dir cross 90% (linear between the two around it). Also shown: the same forecast from the Kafka
run's snapshots without the topics' retention settings (as collect wrote them before it asked DescribeConfigs).

Needs root (tmpfs mounts) and ../shared/kafka. Usage: python bench/forecast_real.py [--runs 1] [--driver]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.audit import cli, forecast  # noqa: E402
from mover.audit.forecast import layout as layout  # noqa: E402
from mover.testing.disk_fill import fill_kafka, fill_moverd, halfway, judge  # noqa: E402
from mover.testing.kafka_home import SKIP_REASON, kafka_home  # noqa: E402


def forecast_as_of(half: Path, out: Path, driver: bool) -> pd.DataFrame:
    if driver:
        return forecast.compute_local(forecast.window(half, None)).disks
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["forecast", "--snapshot", str(half), "--out", str(out), "--master", "local[2]"])
    assert code == 0
    return pd.read_parquet(out / layout.DISKS_FILE)


def without_retention(root: Path, copy: Path) -> Path:
    shutil.copytree(root, copy)
    for part in copy.glob("*/partitions/*.parquet"):
        table = pq.read_table(part)
        pq.write_table(table.drop([c for c in ("retention_bytes", "retention_ms") if c in table.column_names]), part)
    return copy


def report(name: str, root: Path, out: Path, driver: bool) -> list[float]:
    half = halfway(root)
    started = time.monotonic()
    disks = forecast_as_of(half, out, driver)
    took = time.monotonic() - started
    print(f"{name}: forecast as of {half.name} ({len(forecast.window(half, None))} snapshots, {took:.1f} s)")
    errors = []
    for j in judge(root, half, disks):
        print(f"  {Path(j.log_dir).name}: at {j.percent_then:4.1f}%  predicted {j.predicted_s:5.1f} s "
              f"({j.low_s:5.1f}-{j.high_s:5.1f})  actual {j.actual_s:5.1f} s  error {j.error:5.1%}")
        errors.append(j.error)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--driver", action="store_true", help="forecast.compute_local instead of the command")
    args = parser.parse_args()
    home = kafka_home()
    if home is None:
        print(SKIP_REASON, file=sys.stderr)
        return 2
    base = bench_root()
    try:
        worst = []
        for run in range(args.runs):
            k, m = base / f"kafka{run}", base / f"moverd{run}"
            m.mkdir()
            started = time.monotonic()
            fill_kafka(home, k / "broker", k / "fleet")
            print(f"run {run}: Kafka filled in {time.monotonic() - started:.0f} s")
            started = time.monotonic()
            fill_moverd(m, m / "fleet")
            print(f"run {run}: moverd filled in {time.monotonic() - started:.0f} s")
            worst += report("Kafka 3.7", k / "fleet", k / "out", args.driver)
            worst += report("moverd", m / "fleet", m / "out", args.driver)
            report("Kafka 3.7, snapshots without retention settings",
                   without_retention(k / "fleet", k / "bare"), k / "out-bare", args.driver)
        print(f"worst error (with retention settings): {max(worst):.1%} over {len(worst)} dirs")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
