"""The forecast's append of a snapshot of a real Kafka 3.7 (KRaft, two log dirs) after a replica moved between its
dirs (AlterReplicaLogDirs, swapped in): `collect` lists the broker's copies by partition, so the moved copy keeps its
place, the snapshot shares the kept copies' fingerprint without the log dirs (not the whole one), and the append
reads only its sizes and dirs (mover/audit/forecast/replica_moves.py), with the forecast of the same append reading
the snapshot whole.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from mover.audit.collect import collect_local
from mover.audit.fleet import ClusterSource, discover
from mover.audit.forecast import driver as forecast_driver
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import members as forecast_members
from mover.audit.forecast import replica_adds, replica_map, replica_moves
from mover.audit.snapshot import list_snapshots
from mover.testing.forecast_history import Calls
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.producers import prefill
from mover.testing.raw import RawClient, move

BROKER = 1
TOPIC = "grow"
PARTITIONS = 4


def test_a_copy_moved_between_kafkas_dirs_is_appended_by_its_sizes_and_dirs(
        kafka: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kafka.create_topic(TOPIC, partitions=PARTITIONS)
    tps = [(TOPIC, p) for p in range(PARTITIONS)]
    root = tmp_path / "fleet"
    views = [discover(ClusterSource("k", bootstrap=kafka.bootstrap))]
    start = datetime(2026, 12, 1, tzinfo=UTC)

    def grow_then_collect(i: int) -> None:  # every partition a little larger, then a snapshot 6 hours on
        prefill(kafka.bootstrap, tps, 20, pad=500, name=f"grow-{i}")
        collect_local(views, root, collected_at=start + timedelta(hours=6 * i))

    for i in range(4):
        grow_then_collect(i)
    assert forecast_driver.compute(list_snapshots(root)).kept == "rebuilt"
    dirs = kafka.log_dirs(BROKER)
    here = kafka.dir_of(BROKER, TOPIC, 0)
    assert here is not None
    with RawClient(int(kafka.broker(BROKER).address.rsplit(":", 1)[1])) as c:
        move(c, dirs, TOPIC, 0, next(d for d in dirs if d != here))
    grow_then_collect(4)
    paths = list_snapshots(root)
    (before, placed_before), (now, placed_now) = (replica_map.fingerprints(p) for p in paths[-2:])
    assert before != now and placed_before == placed_now is not None
    history = forecast_history.where(root)
    before_append = tmp_path / "history-before"
    shutil.copytree(history, before_append)
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1"
    # The same append from the same history with the snapshot read whole gives the same forecast. Not compared with
    # the pandas reference of every snapshot: a kept fit carried on (forecast_kept.reused) may differ from one found
    # afresh when a real broker's sizes are not on a line, and once in CI, on a loaded machine, both dirs' rates
    # differed from it by 0.07% (2026-12-07).
    shutil.rmtree(history)
    shutil.copytree(before_append, history)
    with monkeypatch.context() as m:
        m.setattr(replica_moves, "read_as_moved", lambda *_: None)
        m.setattr(replica_adds, "MOST_EDITS", 0)  # nor as a copy gone and one added
        reads = Calls(m, replica_adds, "frame_of")  # read whole, from the names read as codes
        whole = forecast_driver.compute(paths)
    assert whole.kept == "appended 1" and reads.firsts
    pd.testing.assert_frame_equal(appended.disks, whole.disks, check_exact=False, rtol=1e-9)


def test_a_topic_created_on_kafka_is_appended_by_its_copies_added(
        kafka: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic created between two snapshots of a real Kafka 3.7: its copies come among the others' (collect lists
    the broker's copies by partition), the snapshot shares neither fingerprint, and the append finds the kept copies
    by the runs the two lists share and looks up only the new topic's (mover/audit/forecast/replica_adds.py), with
    the forecast of the same append reading the snapshot whole."""
    # "a-grow" and "z-grow" list before and after the topic created ("m-new"), whose copies then come between.
    topics = {"a-grow": 3, "z-grow": 3}
    for name, count in topics.items():
        kafka.create_topic(name, partitions=count)
    tps = [(name, p) for name, count in topics.items() for p in range(count)]
    root = tmp_path / "fleet"
    views = [discover(ClusterSource("k", bootstrap=kafka.bootstrap))]
    start = datetime(2026, 12, 1, tzinfo=UTC)

    def grow_then_collect(i: int, also: list[tuple[str, int]]) -> None:
        prefill(kafka.bootstrap, tps + also, 20, pad=500, name=f"grow-{i}")
        collect_local(views, root, collected_at=start + timedelta(hours=6 * i))

    for i in range(4):
        grow_then_collect(i, [])
    assert forecast_driver.compute(list_snapshots(root)).kept == "rebuilt"
    kafka.create_topic("m-new", partitions=2)
    grow_then_collect(4, [("m-new", 0), ("m-new", 1)])
    paths = list_snapshots(root)
    (before, placed_before), (now, placed_now) = (replica_map.fingerprints(p) for p in paths[-2:])
    assert before != now and placed_before != placed_now
    history = forecast_history.where(root)
    before_append = tmp_path / "history-before"
    shutil.copytree(history, before_append)
    with monkeypatch.context() as m:
        Calls(m, forecast_members, "read_replicas", refuse=True)
        looked_up = Calls(m, replica_adds, "_looked_up")
        appended = forecast_driver.compute(paths)
    assert appended.kept == "appended 1" and len(looked_up.firsts) == 1
    # Every copy on its disk, the new topic's too (the module's cluster may hold other tests' topics).
    replicas = pd.read_parquet(paths[-1] / "replicas")
    assert (replicas["topic"] == "m-new").sum() == 2
    assert int(appended.disks["partitions"].sum()) == len(replicas)
    shutil.rmtree(history)
    shutil.copytree(before_append, history)
    with monkeypatch.context() as m:
        m.setattr(replica_adds, "MOST_EDITS", 0)  # not found by runs: read whole
        reads = Calls(m, replica_adds, "frame_of")  # read whole, from the names read as codes
        whole = forecast_driver.compute(paths)
    assert whole.kept == "appended 1" and reads.firsts
    pd.testing.assert_frame_equal(appended.disks, whole.disks, check_exact=False, rtol=1e-9)
