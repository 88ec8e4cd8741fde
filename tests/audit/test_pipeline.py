"""synth -> audit -> plan -> report on a small generated fleet, on the real local Spark of the test run; the commands
run in-process through mover.audit.cli.main, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mover.admin.assignment import load_reassignment
from mover.audit import cli, columns, partitions, snapshot, synth

SPARK = ["--shuffle-partitions", "2"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def fleet(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001 (the SparkSession fixture)
    """Two snapshots ten minutes apart of 2 clusters x 8 brokers x 3 disks, with moves running (half of them stuck),
    an offline dir and a broker of unknown capacity."""
    root = tmp_path_factory.mktemp("fleet") / "snapshots"
    code = cli.main(["synth", "--out", str(root), "--clusters", "2", "--brokers", "8", "--disks", "3",
                     "--replicas-per-disk", "40", "--moving", "0.02", "--offline", "0.05", "--unknown-capacity",
                     "0.15", "--history", "--seed", "3", *SPARK])
    assert code == 0
    return root


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


def check_report_in_chromium(page: Path, tmp_path: Path) -> str:
    """Renders the page in headless Chromium, checks its figures drew and it is not blank; returns the DOM."""
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report must not load anything"
    assert "<script" not in text
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed to render the report"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium'}",
              "--window-size=1200,2400"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, check=True).stdout
    figures = re.findall(r'<div class="figure" id="(\w+)">(.*?)</div>', dom, re.S)
    assert {name for name, _ in figures} >= {"distribution", "deviation", "clusters", "worst", "plan"}
    for name, svg in figures:
        assert "<svg" in svg, f"{name}: no SVG in the rendered page"
        # Bars, boxes and lines are paths: a plot that drew has many (an empty axes has a handful).
        assert svg.count("<path") >= 20, f"{name}: only {svg.count('<path')} paths"
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120,
                   stdin=subprocess.DEVNULL, check=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[0] >= 1000
    not_white = (pixels < 0.95).any(axis=2).mean()
    colors = len({tuple(p) for p in (pixels[::7, ::7] * 255).astype(int).reshape(-1, 3)})
    assert not_white > 0.05 and colors > 20, f"the screenshot looks blank ({not_white:.3f} inked, {colors} colors)"
    return dom


def test_fail_on_exit_codes(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(tmp_path / "a"),
                       "--fail-on", "stuck,imbalance", "--skip-duplicates", *SPARK)
    assert code == cli.EXIT_FINDINGS
    assert err.strip().splitlines() == [err.strip()] and "stuck" in err and "imbalance" in err
    # Partitions in two dirs: synth makes none, so alerting on them alone passes.
    code, _, err = run(capsys, "audit", "--snapshots", str(fleet), "--out", str(tmp_path / "b"),
                       "--fail-on", "duplicate", *SPARK)
    assert code == 0, err
    # With a band wide enough for any disk and no earlier snapshot, imbalance and stuck are not found.
    latest = snapshot.list_snapshots(fleet)[-1]
    code, _, err = run(capsys, "audit", "--snapshot", str(latest), "--out", str(tmp_path / "c"),
                       "--balance-threshold", "1.99", "--balance-margin", "1", "--fail-on", "imbalance,stuck",
                       "--skip-duplicates", *SPARK)
    assert code == 0, err


def test_bad_snapshots_are_one_line(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    # A dataset that is not Parquet.
    broken = tmp_path / "broken" / latest.name
    shutil.copytree(latest, broken)
    for part in (broken / "log_dirs").glob("*.parquet"):
        part.write_bytes(b"this is not parquet\n" * 10)
    code, out, err = run(capsys, "audit", "--snapshot", str(broken), "--out", str(tmp_path / "x"), *SPARK)
    assert code == cli.EXIT_ERROR
    assert len(err.strip().splitlines()) == 1 and err.startswith("mover-audit: error:"), err
    assert "log_dirs" in err and "Traceback" not in err
    # A dataset without a declared column.
    missing = tmp_path / "missing" / latest.name
    shutil.copytree(latest, missing)
    frame = pd.read_parquet(latest / "replicas").drop(columns=["size_bytes"])
    shutil.rmtree(missing / "replicas")
    (missing / "replicas").mkdir()
    # Microseconds, as Spark writes them: Spark cannot read pandas' default nanosecond timestamps (docs/audit.md).
    frame.to_parquet(missing / "replicas" / "part-0.parquet", coerce_timestamps="us")
    code, out, err = run(capsys, "plan", "--snapshot", str(missing), "--out", str(tmp_path / "p"), *SPARK)
    assert code == cli.EXIT_ERROR
    assert err.strip() == (f"mover-audit: error: snapshot {missing}: replicas: missing column size_bytes "
                           f"(has {', '.join(frame.columns)})")
    # No such snapshot; a dataset missing.
    code, _, err = run(capsys, "audit", "--snapshot", str(tmp_path / "nowhere"), *SPARK)
    assert code == cli.EXIT_ERROR
    assert err.strip() == f"mover-audit: error: snapshot {tmp_path / 'nowhere'}: no such directory"
    shutil.rmtree(missing / "replicas")
    shutil.copytree(latest / "replicas", missing / "replicas")
    shutil.rmtree(missing / "partitions")
    code, _, err = run(capsys, "plan", "--snapshot", str(missing), "--out", str(tmp_path / "q"), *SPARK)
    assert code == cli.EXIT_ERROR and "no partitions dataset" in err and len(err.strip().splitlines()) == 1


def test_drain_refused_when_it_cannot_fit(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          spark) -> None:  # noqa: ANN001
    latest = snapshot.list_snapshots(fleet)[-1]
    dirs = snapshot.read(spark, latest).log_dirs.toPandas()
    # Two of three disks at ~50%: the third cannot take a whole disk's worth and stay under 80%.
    online = dirs[dirs["error"].isna() & dirs["total_bytes"].notna()]
    broker = online.groupby(["cluster", "broker"]).filter(lambda g: len(g) == 3).iloc[0]
    target = f"{broker['cluster']}/{broker['broker']}:{broker['log_dir']}"
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "p"), "--drain", target,
                       "--headroom", "0.5", *SPARK)
    assert code == cli.EXIT_ERROR
    assert err.startswith(f"mover-audit: error: cannot drain on broker {broker['broker']} of {broker['cluster']}")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p" / "summary.json").exists()
    code, _, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "p2"), "--drain",
                       f"{broker['cluster']}/{broker['broker']}:/no/such/dir", *SPARK)
    assert code == cli.EXIT_ERROR and "has no log dir /no/such/dir" in err


def test_help_starts_no_jvm_and_a_missing_subcommand_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    probe = ("import sys\nfrom mover.audit import cli\nassert cli.main(['--help']) == 0\n"
             "assert 'pyspark' not in sys.modules and 'pandas' not in sys.modules, sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    for name in cli.COMMANDS:
        assert name in done.stdout
    monkeypatch.setitem(cli.COMMANDS, "collect", ("mover.audit.not_written_yet", "x"))
    code, out, err = run(capsys, "collect", "--fleet", "f.toml")
    assert code == cli.EXIT_USAGE
    assert err == "mover-audit: error: collect is not available in this installation\n"
    code, _, err = run(capsys, "audit", "--fail-on", "nonsense", "--snapshot", "x")
    assert code == cli.EXIT_USAGE and len(err.strip().splitlines()) == 1 and "--fail-on" in err
    code, _, err = run(capsys, "audit", "--snapshot", "x", "--exclude-topics", "^__")
    assert code == cli.EXIT_USAGE
    assert err == "mover-audit: error: --exclude-topics is an option of the plan: give --plan PLANDIR too\n"


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
    assert code == cli.EXIT_FINDINGS, err
    found = json.loads((tmp_path / "a" / "findings.json").read_text())["duplicate_partitions"]
    assert [(d["cluster"], d["broker"], d["topic"], d["partition"], d["copies"]) for d in found] == \
        [(one["cluster"], one["broker"], one["topic"], one["partition"], 2)]
    assert sorted(found[0]["log_dirs"]) == sorted([one["log_dir"], other])


def _rewrite(src: Path, dst: Path, name: str, frame: pd.DataFrame) -> None:
    """A copy of snapshot `src` at `dst` whose dataset `name` is `frame`."""
    shutil.copytree(src, dst)
    shutil.rmtree(dst / name)
    (dst / name).mkdir()
    frame.to_parquet(dst / name / "part-0.parquet", coerce_timestamps="us", index=False)


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
    _rewrite(latest, unlisted, "partitions", partitions[~gone])
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


def test_plan_joins_dirs_by_hash_or_by_name_alike(fleet: Path, spark) -> None:  # noqa: ANN001
    from mover.audit import planner
    from mover.audit.plan import encoding

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    dirs = encoding.listed_dirs(snap)
    rules = planner.Rules()
    hashed = encoding.replica_rows(spark, snap, dirs, rules, by_hash=True).toPandas()
    named = encoding.replica_rows(spark, snap, dirs, rules, by_hash=False).toPandas()
    assert len(hashed) == snap.replicas.count()  # every replica's dir is listed in this snapshot
    columns = ["code", "sf", "pkey"]
    assert hashed.sort_values(columns).reset_index(drop=True).equals(named.sort_values(columns).reset_index(drop=True))
    # A small snapshot's rows in the driver: Spark hashes, the driver looks each dir's code up by its hash; the
    # same rows in the same order as the join (the planner's stable sort keeps that order).
    driver = encoding.driver_rows(spark, snap, dirs, rules).to_pandas()
    assert driver.equals(hashed)
    # A replica whose dir log_dirs does not list gets -1, as from the join's null.
    unlisted = dirs[dirs["cluster"] != dirs["cluster"].iloc[0]].reset_index(drop=True)
    driver = encoding.driver_rows(spark, snap, unlisted, rules).to_pandas()
    joined = encoding.replica_rows(spark, snap, unlisted, rules, by_hash=True).toPandas()
    assert (driver["code"] == -1).sum() > 0 and driver.equals(joined)
    # The driver's own read (pyarrow, spark_hash): the same rows as Spark's, nulls and excluded topics included.
    # (in the files' order, where Spark reads bigger files first: compared as sets of rows)
    assert _rows(encoding.local_rows(snap, dirs, rules).to_pandas()).equals(_rows(hashed))
    # The packing: size and flags come back out as written.
    replicas = snap.replicas.toPandas()
    assert sorted((hashed["sf"] // 8).tolist()) == sorted(replicas["size_bytes"].tolist())
    assert int((hashed["sf"] // 2 % 2).sum()) == int(replicas["is_future"].sum())


def _rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns), kind="mergesort").reset_index(drop=True)


def test_the_driver_keys_replicas_as_spark_does(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """encoding.local_rows (the driver reads the replicas with pyarrow and keys them with spark_hash) against
    replica_rows (Spark reads, hashes and joins): the same (code, sf, pkey) row for row, on a snapshot with null
    sizes, null is_future, a null topic, partition, cluster, broker and log dir, a dir log_dirs does not list, and
    excluded topics; two dirs that hash alike, or a layout the footers do not vouch for, leave it to Spark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit import planner
    from mover.audit.plan import encoding

    latest = snapshot.list_snapshots(fleet)[-1]
    table = pq.read_table(latest / "replicas").select(list(snapshot.REPLICAS))
    table = table.cast(pa.schema([f.with_nullable(True).with_type(pa.timestamp("us", "UTC"))
                                  if f.name == "collected_at" else f.with_nullable(True) for f in table.schema]))
    listed = pq.read_table(latest / "log_dirs").to_pandas()
    c, b, d = (listed[k].tolist() for k in ("cluster", "broker", "log_dir"))
    odd = pa.table({  # rows 0, 5 and 6 are in listed dirs
        "cluster": [c[0], None, c[1], c[0], c[1], c[5], c[6]],
        "broker": pa.array([b[0], b[1], None, b[3], b[4], b[5], b[6]], pa.int32()),
        "log_dir": [d[0], d[1], d[2], None, "/not/listed", d[5], d[6]],
        "topic": ["t-x", "t-y", None, "t-x", "t-z", "t-y", "t-x"],
        "partition": pa.array([0, 1, 2, None, 4, 5, 6], pa.int32()),
        "size_bytes": pa.array([None, 5, 6, 7, 8, 9, 10], pa.int64()),
        "offset_lag": pa.array([0] * 7, pa.int64()),
        "is_future": pa.array([None, True, False, None, False, True, False], pa.bool_()),
        "collected_at": table.column("collected_at").slice(0, 7)}, schema=table.schema)
    where = tmp_path / "nulls" / latest.name
    shutil.copytree(latest, where)
    shutil.rmtree(where / "replicas")
    (where / "replicas").mkdir()
    pq.write_table(table.slice(0, 500), where / "replicas" / "part-0.parquet", coerce_timestamps="us")
    pq.write_table(pa.concat_tables([odd, table.slice(500)]), where / "replicas" / "part-1.parquet",
                   coerce_timestamps="us")
    snap = snapshot.read(spark, where)
    dirs = encoding.listed_dirs(snap)
    # (also 3 rows a step, so that the odd rows fall in several steps)
    for rules, rows in ((planner.Rules(), columns.STEP_ROWS), (planner.Rules(exclude_topics=re.compile("1$|^t-x")), 3),
                        (planner.Rules(exclude_topics=re.compile("1$|^t-x")), columns.STEP_ROWS)):
        monkeypatch.setattr(columns, "STEP_ROWS", rows)
        local = encoding.local_rows(snap, dirs, rules)
        assert local is not None
        spark_rows = encoding.replica_rows(spark, snap, dirs, rules, by_hash=True).toPandas()
        pd.testing.assert_frame_equal(_rows(local.to_pandas()), _rows(spark_rows))
        assert int((spark_rows["code"] == -1).sum()) == 4
        assert (int((spark_rows["sf"] & 1).sum()) > 0) == (rules.exclude_topics is not None)
    # Two dirs that hash alike: Spark joins on the names.
    alike = dirs.copy()
    alike.loc[1, "dk"] = alike.loc[0, "dk"]
    assert encoding.local_rows(snap, alike, planner.Rules()) is None
    # A dataset whose footer lacks a declared column: Spark reads it (and says what is wrong).
    pq.write_table(table.drop(["size_bytes"]).slice(0, 10), where / "replicas" / "part-2.parquet")
    shutil.move(where / "replicas" / "part-2.parquet", where / "replicas" / "part-.parquet")
    assert encoding.local_rows(snapshot.Snapshot(where, {}), dirs, planner.Rules()) is None


def test_audit_plan_reads_the_replicas_once_with_the_audits_sums(
        fleet: Path, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """`audit --plan`: the plan's pass gives disk_usage's frame exactly (in the driver and in Spark's workers), so
    the audit does not aggregate the replicas again, and `audit` alone sums a small snapshot by that pass; with
    replicas in a dir log_dirs does not list, it gives none and the audit aggregates them itself (and shows that
    dir)."""
    from mover.audit import audit, plan, planner
    from mover.audit.plan import options

    latest = snapshot.list_snapshots(fleet)[-1]
    snap = snapshot.read(spark, latest)
    own = audit.disk_usage(snap)
    # The driver reads the replicas; Spark reads and hashes them, the driver plans; Spark's workers plan.
    for local_rows, driver_rows in ((options.LOCAL_SCAN_ROWS, options.DRIVER_PLAN_ROWS),
                                    (0, options.DRIVER_PLAN_ROWS), (0, 0)):
        monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", local_rows)
        monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", driver_rows)
        shared = plan.audit_usage(plan.scan(spark, snap, planner.Rules()))
        assert shared is not None
        pd.testing.assert_frame_equal(shared, own)
        assert shared.attrs == own.attrs == {}  # (pandas writes attrs into the Parquet files)
        # `audit` alone sums a small snapshot by the same pass, without planning it.
        summed = plan.driver_usage(spark, snap)
        assert (summed is None) == (driver_rows == 0)
        if summed is not None:
            pd.testing.assert_frame_equal(summed, own)
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 30_000_000)
    replicas = pd.read_parquet(latest / "replicas")
    odd = tmp_path / "stray" / latest.name
    _rewrite(latest, odd, "replicas", pd.concat([replicas, replicas.iloc[:3].assign(log_dir="/not/listed")]))
    stray = snapshot.read(spark, odd)
    assert plan.audit_usage(plan.scan(spark, stray, planner.Rules())) is None
    monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", 1_000_000)
    assert plan.driver_usage(spark, stray) is None
    assert cli.main(["audit", "--snapshot", str(odd), "--out", str(tmp_path / "alone"), *SPARK]) == 0
    assert "/not/listed" in set(pd.read_parquet(tmp_path / "alone" / "disks.parquet")["log_dir"])
    code = cli.main(["audit", "--snapshot", str(odd), "--out", str(tmp_path / "a"), "--plan", str(tmp_path / "p"),
                     *SPARK])
    assert code == 0
    assert "/not/listed" in set(pd.read_parquet(tmp_path / "a" / "disks.parquet")["log_dir"])


def test_plan_in_the_driver_or_in_spark_workers_alike(fleet: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A small snapshot is planned in the driver's process, a big one in Spark's Python workers (mapInArrow): the
    same function, the same plan."""
    from mover.audit import plan, planner
    from mover.audit.plan import options, replica_pass, task

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    assert snapshot.dataset_rows(snap.path / "replicas") == snap.replicas.count()
    rules = planner.Rules(exclude_topics=re.compile("1$"))
    here = plan.compute(spark, snap, rules)  # the driver reads, keys and plans the replicas
    # What prefetch started in its thread (before the JVM, in a command) is the same pass.
    plan.prefetch(snap.path, rules)
    fetched = plan.compute(spark, snapshot.read(spark, snap.path), rules)
    assert snap.path not in replica_pass._pending
    # The driver's pass a few rows at a time (a step per broker, or several brokers to a step), with the rows sorted
    # by their dir codes rather than by radix on the dirs' places, and with a helper process planning some of the
    # steps: the same plan.
    chunked = []
    for rows, radix, helper in ((7, task.RADIX_SORT_DIRS, options.HELPER_ROWS), (1_500, task.RADIX_SORT_DIRS, 0),
                                (columns.STEP_ROWS, 0, options.HELPER_ROWS), (100, task.RADIX_SORT_DIRS, 0)):
        monkeypatch.setattr(columns, "STEP_ROWS", rows)
        monkeypatch.setattr(task, "RADIX_SORT_DIRS", radix)
        monkeypatch.setattr(options, "HELPER_ROWS", helper)
        chunked.append(plan.compute(spark, snap, rules))
    monkeypatch.undo()
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 0)
    hashed = plan.compute(spark, snap, rules)  # Spark reads and keys them, the driver plans
    monkeypatch.setattr(options, "DRIVER_PLAN_ROWS", 0)
    workers = plan.compute(spark, snap, rules)
    assert len(here.moves) > 0
    for other in (fetched, *chunked, hashed, workers):
        pd.testing.assert_frame_equal(here.moves, other.moves)
        pd.testing.assert_frame_equal(here.disks, other.disks)
        pd.testing.assert_frame_equal(here.brokers, other.brokers)
        assert here.reassignments == other.reassignments and here.dropped == other.dropped


def test_a_helper_process_plans_some_steps_alike(fleet: Path, spark, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The driver's pass of a big task plans some of its steps in a second process, once no JVM is starting, or in
    one started ahead: the same rows out as planned here alone; a step the helper fails, or every step once its
    process died, is planned here."""
    import operator

    import pyarrow as pa

    from mover.audit import planner
    from mover.audit.plan import encoding, options, replica_pass, task

    snap = snapshot.read(spark, snapshot.list_snapshots(fleet)[-1])
    dirs, _, plan_partition = replica_pass.prepare(snap, planner.Rules(), None, True)
    rows = encoding.local_rows(snap, dirs, planner.Rules())

    def run(helper: bool | task.Helper) -> pd.DataFrame:
        return pa.Table.from_batches(list(plan_partition(iter(rows.to_batches()), helper=helper))).to_pandas()

    monkeypatch.setattr(columns, "STEP_ROWS", 100)  # fewer rows than a broker has: a step per broker
    alone = run(False)
    here: list[int] = []
    real = task.plan_step

    def counted(known, step, *arrays):  # noqa: ANN001, ANN202
        here.append(step[0][0])
        return real(known, step, *arrays)

    monkeypatch.setattr(task, "plan_step", counted)
    monkeypatch.setattr(options, "HELPER_ROWS", 0)
    helped = run(True)
    brokers = dirs["bkey"].nunique()
    # The first two steps go to the helper (whatever its start takes), and no step is planned twice.
    assert len(here) == len(set(here)) <= brokers - 2
    # While a JVM starts here (its start keeps the cores busy), no helper.
    from mover.audit import spark as audit_spark

    here.clear()
    audit_spark._starting.set()
    try:
        waited = run(True)
    finally:
        audit_spark._starting.clear()
    assert len(here) == brokers
    # A helper started ahead (the scan's, while it reads) plans from the first step on.
    here.clear()
    ahead = task.Helper(plan_partition)
    try:
        early = run(ahead)
    finally:
        ahead.close()
    assert len(here) == len(set(here)) <= brokers - 2
    # One whose process died before its first step: every step planned here.
    dead = task.Helper(plan_partition)
    try:
        dead.pool.submit(int).result(timeout=120)
        for process in list(dead.pool._processes.values()):
            process.kill()
            process.join()
        here.clear()
        orphaned = run(dead)
    finally:
        dead.close()
    assert len(here) == len(set(here)) == brokers
    # The helper fails every step (a call it cannot make): each is planned here.
    monkeypatch.setattr(task, "_helper_plan", operator.truediv)
    here.clear()
    failed = run(True)
    assert len(here) == len(set(here)) == brokers
    for other in (helped, waited, early, orphaned, failed):
        pd.testing.assert_frame_equal(alone, other)


def test_small_datasets_read_on_the_driver_or_by_spark_alike(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The duplicate check's per-broker sums and the naming of the plan's moves read the partitions dataset on the
    driver (mover/audit/partitions.py) when it is small enough, else in Spark jobs; so do the stuck moves and the
    duplicate check's suspects with the replicas (audit.DRIVER_ROWS): the same answers. The snapshot
    has a copy twice, and Metadata lists no replica of a tenth of the partitions any more (their moves are dropped)."""
    from mover.audit import audit, partitions, plan, planner
    from mover.audit.plan import options

    latest = snapshot.list_snapshots(fleet)[-1]
    replicas = pd.read_parquet(latest / "replicas")
    dirs = pd.read_parquet(latest / "log_dirs")
    one = replicas[~replicas["is_future"]].iloc[0]
    other = dirs[(dirs["cluster"] == one["cluster"]) & (dirs["broker"] == one["broker"])
                 & (dirs["log_dir"] != one["log_dir"]) & dirs["error"].isna()].iloc[0]["log_dir"]
    odd = tmp_path / "odd" / latest.name
    _rewrite(latest, odd, "replicas", pd.concat([replicas, replicas.iloc[[0]].assign(log_dir=other)]))
    parts = pd.read_parquet(odd / "partitions")
    parts["replicas"] = [[] if i % 10 == 3 else list(r) for i, r in enumerate(parts["replicas"])]
    shutil.rmtree(odd / "partitions")
    (odd / "partitions").mkdir()
    parts.to_parquet(odd / "partitions" / "part-0.parquet", index=False)
    rules = planner.Rules()

    def both() -> tuple[pd.DataFrame, pd.DataFrame, plan.PlanResult, bool, pd.DataFrame]:
        snap = snapshot.read(spark, odd)  # a new read: what the driver read is kept per snapshot
        listed = audit.listed_per_broker(snap).sort_values(["cluster", "broker"]).reset_index(drop=True)
        dups = audit.duplicate_partitions(snap, audit.disk_usage(snap))
        stuck = audit.stuck_moves(snap, snapshot.read(spark, snapshot.list_snapshots(fleet)[-2]))
        return listed, dups, plan.compute(spark, snap, rules), snap.local["partitions"] is not None, stuck

    here = both()
    # The driver's reads a few rows a step (mover/audit/columns.py): the same answers.
    monkeypatch.setattr(columns, "STEP_ROWS", 7)
    stepped = both()
    monkeypatch.undo()
    for a, b in zip(here[:2], stepped[:2], strict=True):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(here[2].moves, stepped[2].moves)
    assert here[2].reassignments == stepped[2].reassignments
    # Spark reads the partitions, and the replicas the stuck moves and the suspects of the duplicate check need.
    monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", 0)
    monkeypatch.setattr(partitions, "LOCAL_ROWS", 0)
    monkeypatch.setattr(audit, "DRIVER_ROWS", 0)
    there = both()
    assert here[3] and not there[3]
    assert len(here[4]) > 0
    pd.testing.assert_frame_equal(here[4], there[4])
    pd.testing.assert_frame_equal(here[0], there[0])
    assert len(here[1]) == 1 and here[1]["copies"].tolist() == [2]
    pd.testing.assert_frame_equal(here[1], there[1])
    assert len(here[2].moves) > 0 and here[2].dropped > 0 and here[2].dropped == there[2].dropped
    pd.testing.assert_frame_equal(here[2].moves, there[2].moves)
    assert here[2].reassignments == there[2].reassignments


def test_a_small_fleet_runs_no_spark_job(fleet: Path, tmp_path: Path, spark,  # noqa: ANN001
                                        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit --snapshots --plan --report` of a small fleet runs no Spark job, nor does `plan` alone: the driver
    reads the snapshot itself (docs/audit.md#performance); the datasets it reads are not made Spark DataFrames at
    all. With the replicas left to Spark, one job (their keys to Arrow: no broadcast of the dirs, whose codes are
    looked up in the driver)."""
    latest, earlier = snapshot.list_snapshots(fleet)[-1], snapshot.list_snapshots(fleet)[-2]
    snap = snapshot.read(spark, earlier)
    assert snap.deferred() == list(snapshot.DATASETS)  # the footers vouch for Spark's own files
    assert snap.replicas.count() == snapshot.dataset_rows(earlier / "replicas") and snap.deferred() == [
        "log_dirs", "partitions"]
    from mover.audit.plan import options

    context = spark.sparkContext
    jobs = {}
    for local_rows in (options.LOCAL_SCAN_ROWS, 0):
        monkeypatch.setattr(options, "LOCAL_SCAN_ROWS", local_rows)
        for name, argv in (("plan", ["plan", "--snapshot", str(latest), "--out", str(tmp_path / f"p{local_rows}")]),
                           ("pipeline", ["audit", "--snapshots", str(fleet), "--out", str(tmp_path / f"a{local_rows}"),
                                         "--plan", str(tmp_path / f"q{local_rows}"), "--report",
                                         str(tmp_path / f"r{local_rows}.html")])):
            group = f"jobs-{name}-{local_rows}"
            context.setJobGroup(group, name)
            try:
                code, _, err = run(capsys, *argv, *SPARK)
            finally:
                context.setLocalProperty("spark.jobGroup.id", None)
            assert code == 0, err
            jobs[name, bool(local_rows)] = len(context.statusTracker().getJobIdsForGroup(group))
    assert jobs == {("plan", True): 0, ("pipeline", True): 0, ("plan", False): 1, ("pipeline", False): 1}


def test_plan_ignores_replicas_in_dirs_log_dirs_does_not_list(
        fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    latest = snapshot.list_snapshots(fleet)[-1]
    replicas = pd.read_parquet(latest / "replicas")
    stray = replicas.iloc[:5].assign(log_dir="/not/listed")
    odd = tmp_path / "stray" / latest.name
    _rewrite(latest, odd, "replicas", pd.concat([replicas, stray]))
    for name, where in (("plain", latest), ("odd", odd)):
        code, _, err = run(capsys, "plan", "--snapshot", str(where), "--out", str(tmp_path / name), *SPARK)
        assert code == 0, err
    plain, with_stray = (pd.read_parquet(tmp_path / n / "moves") for n in ("plain", "odd"))
    assert plain.equals(with_stray)
    assert "/not/listed" not in set(pd.read_parquet(tmp_path / "odd" / "disks.parquet")["log_dir"])


@pytest.mark.timeout(900)  # two JVMs, one writing the archive: slow on a loaded machine
def test_a_command_that_succeeds_writes_nothing_to_stderr(tmp_path: Path) -> None:
    """The JVM's own start-up notice (Spark adds an incubator module) is not passed on: stderr is for errors. With
    the class-data archive on (docs/audit.md#performance): the first command writes it at its JVM's exit, under its
    final name only once complete; neither says a word about it. (The second, an `audit --plan` of a snapshot the
    driver reads itself, starts no JVM: spark.Deferred.)"""
    from mover.testing.spark_cluster import DRIVER_JAVA_OPTS, DRIVER_OPTS_ENV

    script = Path(sys.executable).with_name("mover-audit")
    cds = tmp_path / "cds"
    # The JVM runs C1 only (as the test run's session): what is tested, its stderr and the archive's dump at exit,
    # is the same, for 52 s of CPU instead of 66 (synth's own C2 compiling).
    env = {k: v for k, v in os.environ.items() if k != "MOVER_AUDIT_CDS"} | {"MOVER_AUDIT_CDS_DIR": str(cds),
                                                                             DRIVER_OPTS_ENV: DRIVER_JAVA_OPTS}
    done = subprocess.run([str(script), "synth", "--out", str(tmp_path / "s"), "--clusters", "1", "--brokers", "3",
                           "--disks", "2", "--replicas-per-disk", "5", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "Wrote a snapshot" in done.stdout
    archives = sorted(p.name for p in cds.iterdir())
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives
    latest = snapshot.list_snapshots(tmp_path / "s")[-1]
    done = subprocess.run([str(script), "audit", "--snapshot", str(latest), "--out", str(tmp_path / "a"), "--plan",
                           str(tmp_path / "p"), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "Plan written to" in done.stdout and (tmp_path / "p" / "summary.json").exists()
    assert sorted(p.name for p in cds.iterdir()) == archives


def test_the_driver_jvm_hands_methods_to_c2_later(spark) -> None:  # noqa: ANN001
    """The JVM mover-audit starts runs with raised C2 thresholds (mover/audit/spark.py: C2's compiling was a quarter
    of the CPU of a 20M-replica `audit --plan`): the running JVM's own arguments say so. (The test run's JVM also
    runs C1 only, tests/conftest.py: an option given beside mover-audit's, which leaves them as they are.)"""
    from mover.audit import spark as audit_spark

    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    for flag in audit_spark._JIT.split():
        assert flag in arguments, arguments


def test_a_snapshot_the_driver_reads_starts_no_jvm(fleet: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """On a local master, `plan` and `audit` of a snapshot the driver reads itself run no Spark job, and start no
    JVM either (spark.Deferred: the JVM's start was most of their CPU at 20M replicas, issue 38): with no Java to be
    found they still succeed, and write what they write with Spark's session (the test run's, in-process)."""
    latest = snapshot.list_snapshots(fleet)[-1]
    env = os.environ | {"JAVA_HOME": str(tmp_path / "no-java"), "SPARK_HOME": str(tmp_path / "no-spark")}
    for name, argv in (("plan", ["plan", "--snapshot", str(latest), "--out"]),
                       ("audit", ["audit", "--snapshot", str(latest), "--out"])):
        done = subprocess.run([sys.executable, "-m", "mover.audit", *argv, str(tmp_path / f"{name}-alone"),
                               "--master", "local[2]"], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        code, _, err = run(capsys, *argv, str(tmp_path / f"{name}-spark"), *SPARK)
        assert code == 0, err
    for file in ("moves", "disks.parquet", "brokers.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "plan-alone" / file),
                                      pd.read_parquet(tmp_path / "plan-spark" / file))
    for file in ("disks.parquet", "brokers.parquet", "clusters.parquet", "duplicates.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "audit-alone" / file),
                                      pd.read_parquet(tmp_path / "audit-spark" / file))


def test_a_deferred_session_starts_on_first_use(fleet: Path, spark, tmp_path: Path,  # noqa: ANN001
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from mover.audit import spark as audit_spark
    from mover.audit.plan import options

    parser = cli.build_parser(["plan"])[0]
    args = parser.parse_args(["plan", "--snapshot", "x", "--out", "y", "--master", "local[2]"])
    assert audit_spark.from_args(args) is spark  # deferred only when the caller asks
    deferred = audit_spark.from_args(args, defer=True)
    assert isinstance(deferred, audit_spark.Deferred) and not deferred.started
    assert deferred.version == spark.version and deferred.started  # the test run's session, on first use
    assert deferred.get() is spark
    assert audit_spark.from_args(args, defer=False) is spark
    args.master = "spark://127.0.0.1:1"  # executors elsewhere: never deferred (the running session is taken)
    assert audit_spark.from_args(args, defer=True) is spark
    latest = snapshot.list_snapshots(fleet)[-1]
    limits = (options.LOCAL_SCAN_ROWS, partitions.LOCAL_ROWS)
    assert snapshot.driver_readable(latest, *limits)
    assert not snapshot.driver_readable(latest, snapshot.dataset_rows(latest / "replicas") - 1, limits[1])
    assert not snapshot.driver_readable(latest, limits[0], snapshot.dataset_rows(latest / "partitions") - 1)
    partial = tmp_path / latest.name
    shutil.copytree(latest, partial)
    shutil.rmtree(partial / "partitions")
    assert not snapshot.driver_readable(partial, *limits)
