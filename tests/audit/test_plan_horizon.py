"""plan --horizon on a fleet grown by synth_history: one broker's three disks hold the same bytes today (in band),
but three partitions of the first grow (the others hold still), so the forecast takes that disk out of band within
the horizon. Planned for today, nothing moves; planned for the horizon, the first move takes one of its
fast-growing partitions off it, and the plan's disks are the forecast's at the horizon."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mover.audit import cli
from mover.audit.synth_history import GrowthShape, simulate, write_simulation
from mover.testing.audit_cli import SPARK

RATE = 50e3  # bytes/hour of each fast partition
HORIZON_H = 168.0
FAST_NOW = 4e6
TOTAL = 1e9


def grown_fleet(root: Path) -> tuple[set[tuple[str, int]], float]:
    """The snapshots (3 days, every 6 h); the fast partitions and disk 0's bytes at the horizon."""
    shape = GrowthShape(clusters=1, brokers=1, disks=3, replicas_per_disk=6, replication_factor=1, days=3,
                        every_hours=6, bursts=0, noise=0, bytes_retained=0, time_retained=0, moves=0, deleted=0,
                        outages=0, cycle=0, seed=1)
    sim = simulate(shape)
    n = len(sim.replicas)
    k = np.arange(n) % 3
    sim.replicas["k"] = k
    sim.dirs[:] = k[:, None]
    ago = sim.hours - sim.hours[-1]  # <= 0
    fast = np.flatnonzero(k == 0)[:3]
    still_on_0 = np.flatnonzero(k == 0)[3:]
    sim.sizes[:] = (60e6 / (k == 1).sum())  # disks 1 and 2: 60 MB each, never growing
    sim.sizes[fast] = FAST_NOW + RATE * ago[None, :]
    sim.sizes[still_on_0] = (60e6 - 3 * FAST_NOW) / len(still_on_0)
    sim.partitions["retention_bytes"] = -1
    sim.partitions["retention_ms"] = -1
    sim.partitions["deleted_at"] = math.inf
    sim.disks["total_bytes"] = int(TOTAL)
    sim.down[:] = False
    sim.full_at[:] = len(sim.hours)
    write_simulation(sim, root)
    names = {(str(t), int(p)) for t, p in sim.replicas.iloc[fast][["topic", "partition"]].itertuples(index=False)}
    return names, 60e6 + 3 * RATE * HORIZON_H


@pytest.mark.timeout(900)  # two plans and a forecast's fits (applyInPandas) on a loaded machine
def test_plan_with_a_horizon_moves_the_fast_growing_partitions_off_the_disk_that_fills(
        tmp_path: Path, spark, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    fast, disk0_then = grown_fleet(tmp_path / "snapshots")
    latest = sorted((tmp_path / "snapshots").glob("2*"))[-1]

    assert cli.main(["plan", "--snapshot", str(latest), "--out", str(tmp_path / "today"), *SPARK]) == 0
    assert pd.read_parquet(tmp_path / "today" / "moves").empty
    assert not pd.read_parquet(tmp_path / "today" / "disks.parquet")["out_of_band"].any()

    assert cli.main(["plan", "--snapshot", str(latest), "--horizon", "7d", "--out", str(tmp_path / "then"),
                     *SPARK]) == 0
    out = capsys.readouterr().out
    assert "at 168 h from it" in out, out
    summary = json.loads((tmp_path / "then" / "summary.json").read_text())
    assert summary["horizon_hours"] == HORIZON_H
    moves = pd.read_parquet(tmp_path / "then" / "moves").sort_values("step")
    first = moves.iloc[0]
    assert (first["topic"], int(first["partition"])) in fast and first["from_dir"].endswith("/d0"), moves
    # Its size is the replica's now (what execute copies), not the planned one.
    assert first["size_bytes"] == pytest.approx(FAST_NOW, rel=0.01)
    disks = pd.read_parquet(tmp_path / "then" / "disks.parquet").set_index("log_dir")
    d0 = next(d for d in disks.index if d.endswith("/d0"))
    assert disks.at[d0, "used_before"] == pytest.approx(disk0_then, rel=0.01)
    assert disks.at[d0, "out_of_band"] and not disks["out_of_band_after"].any(), disks

    # audit --plan --horizon (with the forecast, in the audit's one Spark session): the same plan.
    assert cli.main(["audit", "--snapshot", str(latest), "--out", str(tmp_path / "audit"), "--forecast", "--plan",
                     str(tmp_path / "both"), "--horizon", "7d", *SPARK]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "both" / "moves"), pd.read_parquet(tmp_path / "then" /
                                                                                               "moves"))
    assert json.loads((tmp_path / "both" / "summary.json").read_text())["horizon_hours"] == HORIZON_H
    # Without --plan, --horizon is a plan's option: a usage error naming it.
    assert cli.main(["audit", "--snapshot", str(latest), "--horizon", "7d"]) == 2
    assert "--horizon is an option of the plan" in capsys.readouterr().err


def test_horizon_needs_a_history_and_since_needs_a_horizon(tmp_path: Path, spark,  # noqa: ANN001
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    shape = GrowthShape(clusters=1, brokers=1, disks=2, replicas_per_disk=2, replication_factor=1, days=0.1,
                        every_hours=6, outages=0)
    write_simulation(simulate(shape), tmp_path / "one")
    [only] = sorted((tmp_path / "one").glob("2*"))
    assert cli.main(["plan", "--snapshot", str(only), "--out", str(tmp_path / "p"), "--since", "2d"]) == 2
    assert "--since is the window of --horizon's forecast" in capsys.readouterr().err
    assert cli.main(["plan", "--snapshot", str(only), "--out", str(tmp_path / "p"), "--horizon", "7d", *SPARK]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"mover-audit: error: --horizon: no snapshot before {only.name} beside it (within "
                           "--since): the forecast needs a history"), err
