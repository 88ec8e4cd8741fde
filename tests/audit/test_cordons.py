"""mover-audit and cordoned log dirs (KIP-1066): collect records is_cordoned from brokers that answer as Kafka 4.3
does (null from 3.9), audit lists the cordoned dirs and the bytes still on them, plan never targets a cordoned dir and
drains one when asked, execute cordons a drained dir before its first move (and says so where it cannot); and the
same on a real moverd, whose new partitions then avoid the drained disk."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from mover.audit import planner
from mover.audit.cli import build_parser
from mover.audit.execute import run as execute_run
from mover.storage.names import TopicPartition
from mover.testing.audit_cli import SPARK, run
from mover.testing.fake_kafka import VERSIONS, FakeCluster
from mover.testing.log_dirs_tool import create_topics, placement
from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.records import dir_of, write_partition
from mover.wire.messages import DESCRIBE_LOG_DIRS

MB = 1 << 20
DIRS = ["/d1", "/d2", "/d3"]


def fleet(version: str = "4.3") -> FakeCluster:
    """Broker 0: 2 GB on /d1, nothing on /d2, /d3 cordoned and empty. Broker 1: 300 MB in each dir, /d3 cordoned."""
    cluster = FakeCluster(VERSIONS[version], brokers=2, dirs=DIRS, move_step=64 * MB)
    for p in range(10):
        cluster.add_replica(0, "/d1", "big", p, 200 * MB)
    for i, d in enumerate(DIRS):
        for p in range(3):
            cluster.add_replica(1, d, f"t{i}", p, 100 * MB)
    for b in cluster.brokers.values():
        b.static_configs["cordoned.log.dirs"] = "/d3"
    return cluster


def only(root: Path) -> Path:
    (snap,) = [p for p in root.iterdir() if p.is_dir()]
    return snap


def cordon_flags(snap: Path) -> dict[tuple[int, str], Any]:
    return {(r["broker"], r["log_dir"]): r["is_cordoned"] for r in pq.read_table(snap / "log_dirs").to_pylist()}


def test_collect_records_cordons_as_each_version_reports_them(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for version, want in (("4.3", {"/d1": False, "/d2": False, "/d3": True}),
                          ("3.9", {"/d1": None, "/d2": None, "/d3": None})):
        with fleet(version) as cluster:
            code, _, err = run(capsys, "collect", "--local", "--bootstrap-server", cluster.bootstrap, "--cluster",
                               "east", "--out", str(tmp_path / version))
            assert code == 0, err
        flags = cordon_flags(only(tmp_path / version))
        assert flags == {(b, d): v for b in (0, 1) for d, v in want.items()}, version


def test_audit_plan_execute_honour_cordons(tmp_path: Path, capsys, spark) -> None:  # noqa: ANN001
    with fleet() as cluster:
        code, _, err = run(capsys, "collect", "--local", "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
                           "--out", str(tmp_path / "snaps"))
        assert code == 0, err
        snap = only(tmp_path / "snaps")

        code, out, err = run(capsys, "audit", "--snapshot", str(snap), "--out", str(tmp_path / "audit"),
                             "--skip-duplicates", *SPARK)
        assert code == 0, err
        assert "cordoned dirs: 2 (300.0 MiB still on them)" in out and "Cordoned dirs (KIP-1066)" in out
        findings = json.loads((tmp_path / "audit" / "findings.json").read_text())
        assert sorted((r["broker"], r["log_dir"], r["used_bytes"], r["replicas"])
                      for r in findings["cordoned_dirs"]) == [(0, "/d3", 0, 0), (1, "/d3", 300 * MB, 3)]

        # Broker 0 is out of band: its bytes go to /d2 only, never to the empty but cordoned /d3. Broker 1 drains
        # /d2 (not cordoned yet) into /d1 only: /d3 is cordoned. Within brokers: broker 0, on two disks once /d3
        # leaves its average, is above the cluster's band, and would send replicas to broker 1 too.
        code, _, err = run(capsys, "plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan"),
                           "--drain", "1:/d2", "--within-brokers", *SPARK)
        assert code == 0, err
        moves = pd.read_parquet(tmp_path / "plan" / "moves")
        assert set(moves["to_dir"]) == {"/d2", "/d1"} and "/d3" not in set(moves["to_dir"])
        assert set(moves[moves["broker"] == 0]["to_dir"]) == {"/d2"}
        assert set(moves[moves["broker"] == 1]["from_dir"]) == {"/d2"}
        assert set(moves[moves["broker"] == 1]["to_dir"]) == {"/d1"}
        disks = pd.read_parquet(tmp_path / "plan" / "disks.parquet").set_index(["broker", "log_dir"])
        assert disks.loc[(1, "/d2"), "drained"] and disks.loc[(1, "/d3"), "cordoned"]
        assert disks.loc[(0, "/d3"), "used_after"] == 0

        # execute cordons the drained dir first, then moves; the cordon stays.
        argv = ["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", cluster.bootstrap, "--cluster",
                "east", "--poll-interval", "0.005"]
        parser, _ = build_parser(argv)
        buffer = io.StringIO()
        assert execute_run(parser.parse_args(argv), buffer) == 0, buffer.getvalue()
        text = buffer.getvalue()
        assert "cordoned /d2 on broker 1 of east before draining it (KIP-1066)" in text
        # Before any move was asked for; server.properties' /d3 kept (a SET of the whole list, not Kafka's APPEND,
        # which would start from the empty dynamic value and lift /d3's cordon).
        assert cluster.brokers[1].config_history[0] == ("cordoned.log.dirs", "/d3,/d2")
        assert cluster.brokers[1].cordoned() == {"/d2", "/d3"}
        assert not cluster.brokers[1].replicas["/d2"] and not cluster.brokers[0].replicas["/d3"]


def test_execute_drains_without_a_cordon_on_kafka_3_9(tmp_path: Path, capsys, spark) -> None:  # noqa: ANN001
    with fleet("3.9") as cluster:
        code, _, err = run(capsys, "collect", "--local", "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
                           "--out", str(tmp_path / "snaps"))
        assert code == 0, err
        # 3.9 reports no cordon: broker 0's /d3 would be a destination, so it is drained to keep it empty.
        code, _, err = run(capsys, "plan", "--snapshot", str(only(tmp_path / "snaps")), "--out",
                           str(tmp_path / "plan"), "--drain", "0:/d3", *SPARK)
        assert code == 0, err
        argv = ["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", cluster.bootstrap, "--cluster",
                "east", "--poll-interval", "0.005"]
        parser, _ = build_parser(argv)
        buffer = io.StringIO()
        assert execute_run(parser.parse_args(argv), buffer) == 0, buffer.getvalue()
        assert ("not cordoned: /d3 on broker 0 of east (the broker has no cordons, KIP-1066 needs Kafka 4.3+ or "
                "moverd): new partitions may still land there while it drains") in buffer.getvalue()
        assert all(k != "cordoned.log.dirs" for k, _ in cluster.brokers[0].config_history)
        assert not cluster.brokers[0].replicas["/d3"]
        assert cluster.brokers[0].replicas["/d2"]


def test_drain_on_a_real_moverd_cordons_then_new_partitions_avoid_it(tmp_path: Path, capsys,  # noqa: ANN001
                                                                      spark) -> None:  # noqa: ANN001
    (tmp_path / "broker").mkdir()
    d = Moverd(tmp_path / "broker", n_dirs=3)
    with d:
        create_topics(d.bootstrap, {"data": 6})
        where = dirs_of(d, "data")
    for p in range(6):
        tp = TopicPartition("data", p)
        write_partition(dir_of(d.dirs, "data", p), tp, 4, records_per_batch=8, record_bytes=1024)
    drained = str(d.dirs[1])
    assert drained in where.values()
    with d:
        code, _, err = run(capsys, "collect", "--local", "--bootstrap-server", d.bootstrap, "--cluster", "m",
                           "--out", str(tmp_path / "snaps"))
        assert code == 0, err
        code, _, err = run(capsys, "plan", "--snapshot", str(only(tmp_path / "snaps")), "--out",
                           str(tmp_path / "plan"), "--drain", f"0:{drained}", *SPARK)
        assert code == 0, err
        argv = ["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", d.bootstrap, "--cluster", "m",
                "--poll-interval", "0.02"]
        parser, _ = build_parser(argv)
        buffer = io.StringIO()
        assert execute_run(parser.parse_args(argv), buffer) == 0, buffer.getvalue()
        assert f"cordoned {drained} on broker 0 of m before draining it (KIP-1066)" in buffer.getvalue()
        body = raw_call(d.port, DESCRIBE_LOG_DIRS, 5, {"topics": None})
        state = {r["log_dir"]: (r["is_cordoned"], sum(len(t["partitions"]) for t in r["topics"]))
                 for r in body["results"]}
        assert state[drained] == (True, 0)
        # What lands after the drain avoids the disk.
        create_topics(d.bootstrap, {"later": 6})
        assert drained not in dirs_of(d, "later").values()


def dirs_of(d: Moverd, topic: str) -> dict[int, str]:
    return {p: copies[0][0] for (t, p), copies in placement(d.bootstrap).items() if t == topic}


def test_planner_never_targets_a_cordoned_dir() -> None:
    disks = pd.DataFrame({"log_dir": DIRS, "error": [None] * 3, "total_bytes": [1000.0] * 3,
                          "usable_bytes": [1000.0, 1000.0, 1000.0], "used_bytes": [600, 0, 0],
                          "cordoned": [False, False, True]})
    replicas = pd.DataFrame({"log_dir": ["/d1"] * 6, "topic": ["t"] * 6, "partition": np.arange(6),
                             "size_bytes": [100] * 6, "is_future": [False] * 6})
    plan = planner.plan_broker(disks, replicas)
    assert set(plan.moves["to_dir"]) == {"/d2"}
    assert plan.disks.set_index("log_dir").loc["/d3", "used_after"] == 0
    # A cordoned dir keeps what it holds unless drained; drained, it empties into the uncordoned ones.
    held = disks.assign(used_bytes=[0, 300, 300])
    on_d3 = replicas.assign(log_dir=["/d2"] * 3 + ["/d3"] * 3)
    assert planner.plan_broker(held, on_d3).moves.empty or "/d3" not in set(
        planner.plan_broker(held, on_d3).moves["from_dir"])
    drained = planner.plan_broker(held, on_d3, drain={"/d3"})
    assert set(drained.moves["from_dir"]) == {"/d3"} and set(drained.moves["to_dir"]) == {"/d1"}
    # Every dir cordoned, nothing drained: nothing moves, nothing is refused.
    frozen = planner.plan_broker(disks.assign(cordoned=True), replicas)
    assert frozen.moves.empty and frozen.status == "cordoned"
