"""synth -> audit -> plan -> report on a small generated fleet (tests/audit/conftest.py's `fleet`), on the real local
Spark of the test run; the commands run in-process through mover.audit.cli.main, as a user runs them: the snapshot
synth writes, what audit finds and plan moves (the report rendered in Chromium, the three commands as one alike), a
partition in two dirs found, topics excluded, moves of partitions Metadata no longer lists dropped, replicas in dirs
log_dirs does not list ignored."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mover.admin.assignment import load_reassignment
from mover.audit import snapshot, synth
from mover.cli import common
from mover.testing.audit_cli import SPARK, run
from mover.testing.report_page import check_report_in_chromium
from mover.testing.snapshot_rewrite import rewrite_dataset


def test_synth_writes_the_snapshot_layout(fleet: Path, spark) -> None:  # noqa: ANN001
    paths = snapshot.list_snapshots(fleet)
    assert len(paths) == 2
    snap = snapshot.read(spark, paths[-1])
    assert snap.replicas.columns == list(snapshot.REPLICAS)
    replicas = snap.replicas.toPandas()
    dirs = snap.log_dirs.toPandas()
    partitions = snap.partitions.toPandas()
    assert len(dirs) == 2 * 8 * 3
    # Kafka's placement: the dirs of a broker hold the same number of replicas (+-1), whatever their bytes.
    counts = replicas[~replicas["is_future"]].groupby(["cluster", "broker", "log_dir"]).size()
    online = dirs[dirs["error"].isna()]
    full = counts.groupby(level=[0, 1]).transform("max") - counts
    assert full.max() <= 1 or len(online) < len(dirs)
    assert replicas["is_future"].any()
    # No disk holds more than it can: at most synth.FULLEST of its size, whatever the lognormal sizes drew.
    keys = ["cluster", "broker", "log_dir"]
    used = replicas.groupby(keys)["size_bytes"].sum()
    known = dirs.dropna(subset=["total_bytes"]).set_index(keys)
    assert (used.reindex(known.index).fillna(0) <= known["total_bytes"] * synth.FULLEST + 1).all()
    assert (known["usable_bytes"] > 0).all()
    # Every current replica is listed by Metadata on its broker.
    listed = {(c, t, p): set(r) for c, t, p, r in partitions[["cluster", "topic", "partition", "replicas"]]
              .itertuples(index=False)}
    assert all(b in listed[(c, t, p)] for c, b, t, p in
               replicas[["cluster", "broker", "topic", "partition"]].itertuples(index=False))


def test_audit_plan_report(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], spark) -> None:  # noqa: ANN001
    latest = snapshot.list_snapshots(fleet)[-1]
    audit_dir = tmp_path / "audit"
    code, out, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(audit_dir), *SPARK)
    assert code == 0, err
    assert "Worst brokers" in out and "stuck:" in out
    findings = json.loads((audit_dir / "findings.json").read_text())
    fleet_counts = findings["fleet"]
    assert fleet_counts["brokers"] == 16 and fleet_counts["disks"] == 48
    assert fleet_counts["stuck_moves"] > 0 and fleet_counts["brokers_out_of_band"] > 0
    assert fleet_counts["disks_offline"] == len(findings["offline_dirs"])
    disks = pd.read_parquet(audit_dir / "disks.parquet")
    unknown = disks[disks["online"] & disks["total_bytes"].isna()]
    assert unknown["percent"].isna().all(), "unknown capacity must stay unknown"
    assert fleet_counts["brokers_capacity_unknown"] == unknown.groupby(["cluster", "broker"]).ngroups

    plan_dir = tmp_path / "plan"
    code, out, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(plan_dir), *SPARK)
    assert code == 0, err
    summary = json.loads((plan_dir / "summary.json").read_text())
    assert summary["moves"] > 0
    assert summary["disks_out_of_band_after"] < summary["disks_out_of_band_before"]
    # Every broker the plan brings into band moves at least its lower bound (one left out of band may not).
    brokers = pd.read_parquet(plan_dir / "brokers.parquet")
    balanced = brokers[(brokers["status"] == "planned") & (brokers["reason"] == "")]
    assert len(balanced) and (balanced["moved_bytes"] >= balanced["lower_bound"]).all()
    moves = pd.read_parquet(plan_dir / "moves")
    assert list(moves.columns) == ["cluster", "broker", "topic", "partition", "from_dir", "to_dir", "size_bytes",
                                   "step", "to_broker"]
    assert len(moves) == summary["moves"]
    assert summary["moves_between_brokers"] == int(moves["to_broker"].notna().sum())

    # mover-log-dirs' own parser accepts every cluster's file, and it says what the moves say: a move between
    # brokers puts its to_broker in its broker's place, with its to_dir.
    partitions = snapshot.read(spark, latest).partitions.toPandas()
    metadata = {(c, t, p): list(r) for c, t, p, r in partitions.itertuples(index=False)}
    landing = moves["to_broker"].fillna(moves["broker"]).astype(int)
    wanted = {(c, b, t, p): d for c, b, t, p, d in moves[["cluster", "broker", "topic", "partition", "to_dir"]]
              .assign(broker=landing).itertuples(index=False)}
    for c, b, t, p, to in moves.loc[moves["to_broker"].notna(), ["cluster", "broker", "topic", "partition",
                                                                  "to_broker"]].itertuples(index=False):
        metadata[(c, t, p)] = [int(to) if x == b else x for x in metadata[(c, t, p)]]
    seen = 0
    for cluster in moves["cluster"].unique():
        targets = load_reassignment(str(plan_dir / f"{cluster}.reassignment.json"))
        for target in targets:
            assert list(target.replicas) == metadata[(cluster, target.topic, target.partition)]
            for broker, log_dir in zip(target.replicas, target.log_dirs, strict=True):
                expected = wanted.get((cluster, broker, target.topic, target.partition), "any")
                assert log_dir == expected
                seen += log_dir != "any"
    assert seen == len(moves)

    page = tmp_path / "report.html"
    code, out, err = run(capsys, "report", "--audit", str(audit_dir), "--plan", str(plan_dir), "--out", str(page))
    assert code == 0, err
    check_report_in_chromium(page, tmp_path)

    # A replica moves once: one step per replica, steps numbered per broker from 1.
    assert (moves.groupby(["cluster", "topic", "partition", "broker"]).size() == 1).all()
    assert (moves.groupby(["cluster", "broker"])["step"].min() == 1).all()

    # The three commands as one (one Spark session): the same audit, plan and report.
    both = tmp_path / "both"
    code, out, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(both / "audit"), "--plan",
                         str(both / "plan"), "--report", str(both / "report.html"), *SPARK)
    assert code == 0, err
    assert "Worst brokers" in out and "Plan written to" in out and "Report written to" in out
    for name in ("disks.parquet", "brokers.parquet", "clusters.parquet", "offline.parquet", "stuck.parquet",
                 "duplicates.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(both / "audit" / name), pd.read_parquet(audit_dir / name))
    assert (both / "audit" / "findings.json").read_text() == (audit_dir / "findings.json").read_text()
    for name in ("moves", "disks.parquet", "brokers.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(both / "plan" / name), pd.read_parquet(plan_dir / name))
    for name in ["summary.json", *(f"{c}.reassignment.json" for c in moves["cluster"].unique())]:
        assert (both / "plan" / name).read_text() == (plan_dir / name).read_text()

    def page_text(path: Path) -> str:  # matplotlib dates each SVG
        return re.sub(r"<dc:date>[^<]*</dc:date>", "", path.read_text())

    assert page_text(both / "report.html") == page_text(page)


def test_a_partition_in_two_dirs_is_found(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    twice = tmp_path / "twice" / latest.name
    shutil.copytree(latest, twice)
    replicas = pd.read_parquet(latest / "replicas")
    dirs = pd.read_parquet(latest / "log_dirs")
    one = replicas[~replicas["is_future"]].iloc[0]
    other = dirs[(dirs["cluster"] == one["cluster"]) & (dirs["broker"] == one["broker"])
                 & (dirs["log_dir"] != one["log_dir"]) & dirs["error"].isna()].iloc[0]["log_dir"]
    copy = replicas.iloc[[0]].assign(log_dir=other)
    shutil.rmtree(twice / "replicas")
    (twice / "replicas").mkdir()
    pd.concat([replicas, copy]).to_parquet(twice / "replicas" / "part-0.parquet", coerce_timestamps="us",
                                           index=False)
    code, _, err = run(capsys, "audit", "--snapshot", str(twice), "--out", str(tmp_path / "a"),
                       "--fail-on", "duplicate", *SPARK)
    assert code == common.EXIT_FINDINGS, err
    found = json.loads((tmp_path / "a" / "findings.json").read_text())["duplicate_partitions"]
    assert [(d["cluster"], d["broker"], d["topic"], d["partition"], d["copies"]) for d in found] == \
        [(one["cluster"], one["broker"], one["topic"], one["partition"], 2)]
    assert sorted(found[0]["log_dirs"]) == sorted([one["log_dir"], other])


def test_plan_excludes_topics_and_drops_moves_metadata_does_not_list(
        fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "all"), *SPARK)
    assert code == 0, err
    moves = pd.read_parquet(tmp_path / "all" / "moves")
    assert len(moves) > 2
    # The topics the plan moved most: excluded, none of them moves, and the plan still moves something.
    top = moves["topic"].value_counts().index[:2].tolist()
    pattern = "^(" + "|".join(map(re.escape, top)) + ")$"
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "ex"),
                       "--exclude-topics", pattern, *SPARK)
    assert code == 0, err
    excluded = pd.read_parquet(tmp_path / "ex" / "moves")
    assert len(excluded) and not excluded["topic"].isin(top).any()

    # Metadata (the partitions dataset) no longer lists the first move's partition: that move is dropped, said,
    # left out of the reassignment JSON, and the predicted usage is as if it were not planned.
    first = moves.iloc[0]
    partitions = pd.read_parquet(latest / "partitions")
    gone = (partitions["cluster"] == first["cluster"]) & (partitions["topic"] == first["topic"]) & \
        (partitions["partition"] == first["partition"])
    assert gone.sum() == 1
    unlisted = tmp_path / "unlisted" / latest.name
    rewrite_dataset(latest, unlisted, "partitions", partitions[~gone])
    code, out, err = run(capsys, "plan", "--snapshot", str(unlisted), "--out", str(tmp_path / "un"), *SPARK)
    assert code == 0, err
    assert "dropped 1 moves" in out
    summary = json.loads((tmp_path / "un" / "summary.json").read_text())
    assert summary["moves_dropped_not_in_metadata"] == 1
    kept = pd.read_parquet(tmp_path / "un" / "moves")
    key = ["cluster", "broker", "topic", "partition"]
    assert len(kept.merge(first.to_frame().T[key].astype(kept[key].dtypes.to_dict()), on=key)) == 0
    entries = json.loads((tmp_path / "un" / f"{first['cluster']}.reassignment.json").read_text())["partitions"]
    assert (first["topic"], first["partition"]) not in {(e["topic"], e["partition"]) for e in entries}
    before = pd.read_parquet(tmp_path / "all" / "disks.parquet").set_index(["cluster", "broker", "log_dir"])
    after = pd.read_parquet(tmp_path / "un" / "disks.parquet").set_index(["cluster", "broker", "log_dir"])
    src = (first["cluster"], first["broker"], first["from_dir"])
    dst = (first["cluster"], first["broker"], first["to_dir"])
    # The planner does not read the partitions dataset: the same plan, less that move.
    assert len(kept) == len(moves) - 1
    assert after.loc[src, "used_after"] == before.loc[src, "used_after"] + first["size_bytes"]
    assert after.loc[dst, "used_after"] == before.loc[dst, "used_after"] - first["size_bytes"]


def test_plan_ignores_replicas_in_dirs_log_dirs_does_not_list(
        fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    replicas = pd.read_parquet(latest / "replicas")
    stray = replicas.iloc[:5].assign(log_dir="/not/listed")
    odd = tmp_path / "stray" / latest.name
    rewrite_dataset(latest, odd, "replicas", pd.concat([replicas, stray]))
    for name, where in (("plain", latest), ("odd", odd)):
        code, _, err = run(capsys, "plan", "--snapshot", str(where), "--out", str(tmp_path / name), *SPARK)
        assert code == 0, err
    plain, with_stray = (pd.read_parquet(tmp_path / n / "moves") for n in ("plain", "odd"))
    assert plain.equals(with_stray)
    assert "/not/listed" not in set(pd.read_parquet(tmp_path / "odd" / "disks.parquet")["log_dir"])
