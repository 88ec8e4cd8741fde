"""How right the forecast is, on fleets `synth --days` grows with known truth, beside a naive last-two-snapshots slope.

A fleet is simulated over DAYS days (mover/audit/synth_history.py: steady growth, daily cycles, bursts, retention
plateaus, moves, deleted topics, broker outages, noise, full disks going offline). A forecast is made at every
cutoff (every CUTOFF_EVERY hours from day 7), each from the 7 days of snapshots before it, as `forecast --since 7d`
would. All cutoffs run in ONE forecast (`--spark`: on local[2]; default: forecast_driver.compute, the forecast a
local master runs on the driver, which the tests check gives Spark's answer; `--reference`: forecast.compute_local,
the pandas steps reading every snapshot): each cutoff's window is written as its own copy of the fleet (clusters
renamed `<cluster>@<cutoff hour>`, times shifted so every cutoff is "now"), so the bench runs the command's own
transformations once instead of once per cutoff.

Figures (truth within the simulated weeks only; disks offline at a cutoff are not judged):
- median error of the predicted time to 90% at 7 days out: |predicted - true| / true, for every disk and cutoff
  whose true time to 90% is 6.5 to 7.5 days (goal <= 15%);
- disks filling within 72 h flagged >= 24 h ahead: a disk is flagged when its predicted time to full is <= 72 h;
  for every disk that fills, the cutoff 24 to 24 + CUTOFF_EVERY hours before it (goal >= 95%);
- false flags: of the (disk, cutoff) flags, the share whose disk does not fill within 72 h (goal <= 5%), and within
  96 h (a day's grace).
The naive forecast: the disk's usage at its last two snapshots, extrapolated in a straight line.

Usage: python bench/forecast_accuracy.py [--seeds 3] [--days 30]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.audit import forecast, snapshot, spark, synth_history  # noqa: E402
from mover.audit.forecast import driver as forecast_driver

WINDOW_H = 168.0
CUTOFF_EVERY = 12.0
FLAG_H = 72.0
AHEAD_H = 24.0
END = datetime(2026, 11, 1, tzinfo=UTC)


def virtual_fleet(sim: synth_history.Simulation, root: Path, before: int = 0) -> list[float]:
    """Writes every cutoff's 7-day window as one fleet under `root` (clusters `<cluster>@<cutoff>`), and `before`
    snapshots more before it; returns the cutoffs (hours from the simulation's start)."""
    hours = sim.hours
    every = float(hours[1] - hours[0])
    back = int(round(WINDOW_H / every))
    cutoffs = [float(h) for h in hours if h >= WINDOW_H and (h - WINDOW_H) % CUTOFF_EVERY == 0]
    index = {float(h): i for i, h in enumerate(hours)}
    for v in range(-back - before, 1):
        parts: list[list[pd.DataFrame]] = [[], [], []]
        for c in cutoffs:
            i = index[c] + v
            if i < 0:  # before the simulation (a snapshot before the window only: `before`)
                continue
            for j, frame in enumerate(sim.frames(i)):
                parts[j].append(frame.assign(cluster=frame["cluster"] + f"@{c:g}"))
        at = END + timedelta(hours=v * every)
        log_dirs, replicas, partitions = (pd.concat(p, ignore_index=True) for p in parts)
        synth_history._write_snapshot(root / snapshot.snapshot_name(at), at, log_dirs, replicas, partitions)
    return cutoffs


def naive(root: Path) -> pd.DataFrame:
    """Per disk: the straight line through its usage at its last two snapshots."""
    paths = snapshot.list_snapshots(root)
    rows = []
    for path in paths[-12:]:  # a disk seen in neither of the last two is not judged anyway
        h = (forecast.taken_at(path) - forecast.taken_at(paths[-1])).total_seconds() / 3600
        r = pd.read_parquet(path / "replicas", columns=["cluster", "broker", "log_dir", "size_bytes"])
        d = pd.read_parquet(path / "log_dirs", columns=["cluster", "broker", "log_dir", "error", "total_bytes"])
        used = r.groupby(["cluster", "broker", "log_dir"], as_index=False)["size_bytes"].sum()
        d = d[d["error"].isna()].merge(used, on=["cluster", "broker", "log_dir"], how="left").fillna({"size_bytes": 0})
        rows.append(d.assign(hours=h))
    frame = pd.concat(rows).sort_values("hours")
    last2 = frame.groupby(["cluster", "broker", "log_dir"]).tail(2)
    g = last2.groupby(["cluster", "broker", "log_dir"])
    first, last = g.first(), g.last()
    rate = (last["size_bytes"] - first["size_bytes"]) / (last["hours"] - first["hours"])
    out = last[["total_bytes", "size_bytes", "hours"]].assign(rate=rate).reset_index()

    def until(level: float) -> pd.Series:
        need = level * out["total_bytes"] - out["size_bytes"]
        t = np.where(need <= 0, 0.0, np.where(out["rate"] > 0, need / out["rate"], math.inf))
        return pd.Series(t - (-out["hours"]), index=out.index).clip(lower=0)

    out["hours_to_90"], out["hours_to_full"] = until(0.9), until(1.0)
    return out


def judge(pred: pd.DataFrame, sim: synth_history.Simulation) -> dict[str, float]:
    """The three figures for one method's predictions (cluster `<c>@<cutoff>`, broker, log_dir, hours_to_90/full)."""
    p = pred.copy()
    split = p["cluster"].str.rsplit("@", n=1, expand=True)
    p["real"], p["cutoff"] = split[0], split[1].astype(float)
    truth = sim.truth[["cluster", "broker", "log_dir", "at_90_h", "at_full_h"]].rename(columns={"cluster": "real"})
    p = p.astype({"broker": "int64"}).merge(truth.astype({"broker": "int64"}), on=["real", "broker", "log_dir"])
    end = float(sim.hours[-1])
    p["true_90"], p["true_full"] = p["at_90_h"] - p["cutoff"], p["at_full_h"] - p["cutoff"]
    p = p[p["true_full"] > 0]  # a disk already full (offline) at the cutoff is not judged
    week = p[(p["true_90"] >= 156) & (p["true_90"] <= 180) & (p["at_90_h"] <= end)]
    errors = (week["hours_to_90"] - week["true_90"]).abs() / week["true_90"]
    ahead = p[(p["true_full"] >= AHEAD_H) & (p["true_full"] < AHEAD_H + CUTOFF_EVERY) & (p["at_full_h"] <= end)]
    caught = ahead["hours_to_full"] <= FLAG_H
    flags = p[(p["hours_to_full"] <= FLAG_H) & (p["cutoff"] + FLAG_H + 24 <= end)]
    return {"median_error_7d": float(errors.median()), "p90_error_7d": float(errors.quantile(0.9)),
            "judged_7d": len(week), "caught_24h_ahead": float(caught.mean()), "filling": len(ahead),
            "false_flags": float((flags["true_full"] > FLAG_H).mean()) if len(flags) else math.nan,
            "false_flags_96h": float((flags["true_full"] > FLAG_H + 24).mean()) if len(flags) else math.nan,
            "flags": len(flags)}


def appended(root: Path, count: int) -> forecast.ForecastResult:
    """The forecast of the newest window as made at every snapshot: the one `count` snapshots earlier cold (its
    kept history written), then each newer snapshot appended in turn (the oldest dropped), its fits kept."""
    every = snapshot.list_snapshots(root)
    aside = root.parent / "aside"
    aside.mkdir()
    for path in every[-count:]:
        path.rename(aside / path.name)
    made = forecast_driver.compute(forecast.window(every[-count - 1], WINDOW_H), WINDOW_H)
    assert made.kept == "rebuilt", made.kept
    for path in every[-count:]:
        (aside / path.name).rename(path)
        made = forecast_driver.compute(forecast.window(path, WINDOW_H), WINDOW_H)
        assert made.kept == "appended 1", made.kept
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--brokers", type=int, default=8)
    parser.add_argument("--spark", action="store_true",
                        help="forecast on Spark local[2] (default: the same steps on the driver, compute_local)")
    parser.add_argument("--replicas-per-disk", type=int, default=8)
    parser.add_argument("--reference", action="store_true",
                        help="forecast with forecast.compute_local (every snapshot read with pandas)")
    parser.add_argument("--appended", type=int, default=0, metavar="N",
                        help="forecast as a forecast run at every snapshot does: the window N snapshots earlier "
                             "cold, then each of the N newer snapshots appended to the kept history (fits kept)")
    args = parser.parse_args()
    session = spark.session("local[2]", shuffle_partitions=4, driver_memory="2g") if args.spark else None
    results: dict[str, list[dict[str, float]]] = {"forecast": [], "naive": []}
    for seed in range(args.seeds):
        work = bench_root()
        try:
            shape = synth_history.GrowthShape(clusters=args.clusters, brokers=args.brokers, disks=4,
                                              replicas_per_disk=args.replicas_per_disk, days=args.days, seed=seed)
            started = time.monotonic()
            sim = synth_history.simulate(shape)
            root = work / "snapshots"
            cutoffs = virtual_fleet(sim, root, args.appended)
            built = time.monotonic() - started
            started = time.monotonic()
            paths = snapshot.list_snapshots(root)
            made = (forecast.compute(session, paths, WINDOW_H, on_driver=False) if session is not None
                    else forecast.compute_local(paths, WINDOW_H) if args.reference
                    else appended(root, args.appended) if args.appended
                    else forecast_driver.compute(paths, WINDOW_H, keep_history=False))
            paths = forecast.window(paths[-1], WINDOW_H)
            took = time.monotonic() - started
            disks = len(sim.disks)
            print(f"seed {seed}: {disks} disks x {len(cutoffs)} cutoffs = {len(made.disks)} forecasts from "
                  f"{len(paths)} snapshots; history written in {built:.1f} s, forecast "
                  f"({'Spark' if session is not None else 'driver'}) in {took:.1f} s", flush=True)
            ours = made.disks[made.disks["status"] != "offline"]
            for name, pred in (("forecast", ours), ("naive", naive(root))):
                figures = judge(pred, sim)
                results[name].append(figures)
                print(f"  {name:8s} " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                  for k, v in figures.items()), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print("\nAll seeds (goals: median error <= 0.15, caught >= 0.95, false flags <= 0.05):")
    for name, runs in results.items():
        frame = pd.DataFrame(runs)
        print(f"  {name:8s} median error at 7 d {frame['median_error_7d'].median():.3f} "
              f"(p90 {frame['p90_error_7d'].median():.3f}, n={frame['judged_7d'].sum()}), "
              f"caught >= 24 h ahead {frame['caught_24h_ahead'].mean():.3f} (n={frame['filling'].sum()}), "
              f"false flags {frame['false_flags'].mean():.3f} (within 96 h: {frame['false_flags_96h'].mean():.3f}, "
              f"n={frame['flags'].sum()})")


if __name__ == "__main__":
    main()
