"""collect against fake brokers that answer as Kafka 2.3 / 2.4 / 3.9 / 4.1 do: totals from DescribeLogDirs v4, else
from the capacity file, else unknown; brokers that are down, slow or refuse are recorded and the rest go on; the
same snapshot through Spark tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mover.audit.cli import main
from mover.audit.collect import MISSING_BROKER, collect_local, collect_spark
from mover.audit.fleet import ClusterSource, discover
from mover.audit.snapshot import DATASETS, list_snapshots
from mover.testing.fake_kafka import REFUSE, SLOW, VERSIONS, FakeCluster

MB = 1 << 20


def fake(version: str, brokers: int = 2) -> FakeCluster:
    cluster = FakeCluster(VERSIONS[version], brokers=brokers, dirs=["/d1", "/d2"], cluster_id=f"c-{version}")
    for b in range(brokers):
        cluster.add_replica(b, "/d1", "t", 0, 1000 + b)
        cluster.add_replica(b, "/d2", "u", b, 7 * MB)
    return cluster


def rows(snapshot: Path, name: str) -> list[dict[str, Any]]:
    return sorted(pq.read_table(snapshot / name).to_pylist(), key=lambda r: json.dumps(r, default=str))


def only_snapshot(root: Path) -> Path:
    [snap] = list_snapshots(root)
    return snap


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_collect_each_kafka_version(tmp_path: Path, version: str) -> None:
    with fake(version) as cluster:
        assert main(["collect", "--local", "--bootstrap-server", cluster.bootstrap, "--cluster", "east",
                     "--out", str(tmp_path)]) == 0
    snap = only_snapshot(tmp_path)
    dirs = rows(snap, "log_dirs")
    assert [(d["cluster"], d["broker"], d["log_dir"], d["error"]) for d in dirs] == [
        ("east", 0, "/d1", None), ("east", 0, "/d2", None), ("east", 1, "/d1", None), ("east", 1, "/d2", None)]
    if VERSIONS[version].apis[35][1] >= 4:
        assert all(d["total_bytes"] == 10 << 30 and d["total_source"] == "broker" for d in dirs)
        assert dirs[1]["usable_bytes"] == (10 << 30) - 7 * MB
    else:
        # DescribeLogDirs before v4 has no sizes and no capacity file was given: unknown, never guessed.
        assert all(d["total_bytes"] is None and d["usable_bytes"] is None for d in dirs)
    replicas = rows(snap, "replicas")
    assert [(r["broker"], r["log_dir"], r["topic"], r["partition"], r["size_bytes"], r["is_future"])
            for r in replicas] == [(0, "/d1", "t", 0, 1000, False), (0, "/d2", "u", 0, 7 * MB, False),
                                   (1, "/d1", "t", 0, 1001, False), (1, "/d2", "u", 1, 7 * MB, False)]
    assert [(p["cluster"], p["topic"], p["partition"], p["replicas"]) for p in rows(snap, "partitions")] == [
        ("east", "t", 0, [0, 1]), ("east", "u", 0, [0]), ("east", "u", 1, [1])]
    assert [(b["broker"], b["error"]) for b in rows(snap, "brokers")] == [(0, None), (1, None)]


def test_capacity_file_gives_totals_to_a_kafka_2_3_broker(tmp_path: Path) -> None:
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps({"brokerCapacities": [
        {"brokerId": "-1", "capacity": {"DISK": {"/d1": "100", "/d2": "200"}}},
        {"brokerId": "1", "capacity": {"DISK": {"/d1": "50"}}}]}))
    with fake("2.3") as cluster:
        assert main(["collect", "--local", "--bootstrap-server", cluster.bootstrap, "--capacity", str(cap),
                     "--out", str(tmp_path / "snaps")]) == 0
    dirs = {(d["broker"], d["log_dir"]): (d["total_bytes"], d["usable_bytes"], d["total_source"])
            for d in rows(only_snapshot(tmp_path / "snaps"), "log_dirs")}
    assert dirs == {(0, "/d1"): (100 * MB, 100 * MB - 1000, "capacity"),
                    (0, "/d2"): (200 * MB, 193 * MB, "capacity"),
                    (1, "/d1"): (50 * MB, 50 * MB - 1001, "capacity"),
                    (1, "/d2"): (None, None, None)}  # broker 1's own entry names no /d2: unknown


def test_down_slow_and_refusing_brokers_are_recorded_and_the_rest_go_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = fake("3.9", brokers=5)
    cluster.brokers[1].behaviour = SLOW
    cluster.brokers[2].behaviour = REFUSE
    with cluster:
        cluster.brokers[3].stop()
        cluster.brokers[4].offline.add("/d2")
        assert main(["collect", "--local", "--bootstrap-server", f"127.0.0.1:{cluster.brokers[0].port}",
                     "--timeout", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 broker(s) answered, 3 failed" in out
    snap = only_snapshot(tmp_path)
    errors = {b["broker"]: b["error"] for b in rows(snap, "brokers")}
    assert errors[0] is None and errors[4] is None
    assert "did not answer DescribeLogDirs within 1 s" in errors[1]
    assert "closed the connection" in errors[2]
    assert "cannot connect to broker 3" in errors[3]
    dirs = {(d["broker"], d["log_dir"]): d["error"] for d in rows(snap, "log_dirs")}
    assert dirs == {(0, "/d1"): None, (0, "/d2"): None, (4, "/d1"): None, (4, "/d2"): "KAFKA_STORAGE_ERROR"}


def test_a_broker_metadata_no_longer_lists_is_recorded(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A real Kafka leaves a dead broker out of Metadata's brokers once the controller fenced it, while partitions
    still name it (tests/kafka/test_audit_cluster.py sees it on Kafka 3.7): it is a failed row, not forgotten."""
    cluster = fake("3.9", brokers=3)
    with cluster:
        cluster.brokers[2].fence()
        assert main(["collect", "--local", "--bootstrap-server", cluster.bootstrap, "--out", str(tmp_path)]) == 0
    assert "2 broker(s) answered, 1 failed" in capsys.readouterr().out
    brokers = {b["broker"]: b for b in rows(only_snapshot(tmp_path), "brokers")}
    assert sorted(brokers) == [0, 1, 2]
    assert brokers[2]["error"] == MISSING_BROKER and brokers[2]["host"] is None
    assert brokers[0]["error"] is None and brokers[1]["error"] is None


def test_a_cluster_nobody_answers_for_is_recorded(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    with fake("4.1") as cluster:
        fleet.write_text(f'[clusters.up]\nbootstrap = "{cluster.bootstrap}"\n'
                         '[clusters.gone]\nbootstrap = "127.0.0.1:1"\n')
        assert main(["collect", "--local", "--fleet", str(fleet), "--out", str(tmp_path / "s")]) == 0
    brokers = rows(only_snapshot(tmp_path / "s"), "brokers")
    gone = [b for b in brokers if b["cluster"] == "gone"]
    assert len(gone) == 1 and gone[0]["broker"] is None and "cannot connect" in gone[0]["error"]
    assert gone[0]["error"].startswith("cannot connect to broker 127.0.0.1:1")
    assert sorted(b["broker"] for b in brokers if b["cluster"] == "up") == [0, 1]


def test_collect_in_spark_tasks_writes_the_same_snapshot(tmp_path: Path, spark: Any) -> None:
    from mover.audit import snapshot

    cluster = fake("2.3", brokers=3)
    cluster.brokers[2].behaviour = REFUSE
    with cluster:
        views = [discover(ClusterSource("east", bootstrap=cluster.bootstrap))]
        spark_path = collect_spark(spark, views, tmp_path / "spark", parallelism=2)
        local_path = collect_local(views, tmp_path / "local")
    drop = {"collected_at", "elapsed_ms"}
    for name in [*DATASETS, "brokers"]:
        got = [{k: v for k, v in r.items() if k not in drop} for r in rows(spark_path, name)]
        want = [{k: v for k, v in r.items() if k not in drop} for r in rows(local_path, name)]
        assert got == want, name
    # What audit and plan read: the contract's columns and types.
    snap = snapshot.read(spark, spark_path)
    assert snap.replicas.count() == 4 and snap.log_dirs.count() == 4 and snap.partitions.count() == 4


def test_nobody_answering_is_exit_1_with_the_snapshot_written(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--local", "--bootstrap-server", "127.0.0.1:1", "--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert err == (f"mover-audit: error: no broker of the fleet answered (snapshot {only_snapshot(tmp_path)} records "
                   "why; each failure is above)\n")
    assert "0 broker(s) answered, 1 failed" in out
    assert "  cluster default: cannot connect to broker 127.0.0.1:1" in out
    assert len(rows(only_snapshot(tmp_path), "brokers")) == 1


def test_a_brokers_copies_are_listed_by_partition_and_a_move_keeps_its_place(tmp_path: Path) -> None:
    """Each broker's replicas listed by topic and partition, not dir by dir as it answers: a copy moved to another
    dir of its broker keeps its place, so the snapshot holds the same copies placed alike (the forecast's map of
    the copies then stands, only the dirs read: replica_map.PLACED)."""
    from datetime import UTC, datetime

    from mover.audit.forecast import replica_map

    cluster = FakeCluster(VERSIONS["3.9"], brokers=1, dirs=["/d1", "/d2"], cluster_id="c")
    for log_dir, topic, partition in (("/d1", "z", 0), ("/d1", "b", 1), ("/d2", "a", 0), ("/d2", "b", 0)):
        cluster.add_replica(0, log_dir, topic, partition, 1000)
    with cluster:
        views = [discover(ClusterSource("east", bootstrap=cluster.bootstrap))]
        first = collect_local(views, tmp_path, collected_at=datetime(2026, 12, 1, tzinfo=UTC))
        with cluster.lock:  # z-0 moved from /d1 to /d2
            cluster.brokers[0].replicas["/d2"][("z", 0)] = cluster.brokers[0].replicas["/d1"].pop(("z", 0))
        second = collect_local(views, tmp_path, collected_at=datetime(2026, 12, 2, tzinfo=UTC))
    listed = [[(r["topic"], r["partition"], r["log_dir"]) for r in pq.read_table(s / "replicas").to_pylist()]
              for s in (first, second)]
    assert listed == [[("a", 0, "/d2"), ("b", 0, "/d2"), ("b", 1, "/d1"), ("z", 0, "/d1")],
                      [("a", 0, "/d2"), ("b", 0, "/d2"), ("b", 1, "/d1"), ("z", 0, "/d2")]]
    (one, placed), (other, placed_again) = (replica_map.fingerprints(s) for s in (first, second))
    assert one != other and placed == placed_again is not None
