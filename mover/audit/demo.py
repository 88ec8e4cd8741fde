"""demo: synth -> audit -> plan -> report on a small generated fleet, in one Spark session; says where the report is.

Everything goes to a new directory under --out (default ./mover-audit-demo), named by the time of the run: nothing
of an earlier run is touched.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from mover.audit import audit, balance, plan, planner, report, snapshot, spark, synth

DEMO_SHAPE = synth.FleetShape(clusters=3, brokers=12, disks=4, replicas_per_disk=60, offline=0.01,
                              unknown_capacity=0.05, moving=0.01, stuck=0.5, seed=7)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="mover-audit-demo", metavar="DIR",
                        help="where the run's directory is made (default ./mover-audit-demo)")
    parser.add_argument("--seed", type=int, default=DEMO_SHAPE.seed)
    spark.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    at = datetime.now(UTC).replace(microsecond=0)
    root = Path(args.out) / snapshot.snapshot_name(at)
    session = spark.from_args(args)
    shape = synth.FleetShape(**{**DEMO_SHAPE.__dict__, "seed": args.seed})
    earlier, latest = synth.write_fleet(session, shape, root / "snapshots", at=at, history=True)
    print(f"1/4 synth: {shape.clusters} clusters x {shape.brokers} brokers x {shape.disks} disks -> {latest}")

    thresholds = balance.Thresholds()
    result = audit.compute(snapshot.read(session, latest), snapshot.read(session, earlier), thresholds)
    audit.write(result, root / "audit")
    counts = result.counts()
    print(f"2/4 audit: {counts['imbalance']} brokers out of band, {counts['offline']} offline dirs, "
          f"{counts['stuck']} stuck moves -> {root / 'audit'}")

    planned = plan.compute(session, snapshot.read(session, latest), planner.Rules(thresholds))
    plan.write(planned, root / "plan", plan.DEFAULT_THROTTLE)
    s = plan.summary(planned, plan.DEFAULT_THROTTLE)
    print(f"3/4 plan: {s['moves']} moves, disks out of band {s['disks_out_of_band_before']} -> "
          f"{s['disks_out_of_band_after']} -> {root / 'plan'}")

    page = root / "report.html"
    page.write_text(report.render(root / "audit", root / "plan"), encoding="utf-8")
    print(f"4/4 report: {page.resolve()}")
    print(f"Open it in a browser: file://{page.resolve()}")
    return 0
