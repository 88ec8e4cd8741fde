"""The whole pipeline on a real fleet, with clients working through the moves: three moverd daemons with three log
dirs each, filled unevenly by kafka-python; collect -> audit -> plan, then `execute` while on every daemon a
kafka-python producer keeps writing small records to every partition of the moved topic and a consumer keeps
reading them. Afterwards every disk is inside its broker's band, a second plan is empty, and every acknowledged
record (before and during the moves) is read back exactly once at the offset it was acknowledged with, both by the
consumer that ran through the moves and by a fresh one.

The moves really overlap the traffic: a watcher per daemon polls DescribeLogDirs for future copies, and on every
daemon with moves some records must have been sent and acknowledged while their own partition was being copied
(mover.testing.move_watcher.MoveWatcher). The throttle is what makes the moves last: each broker copies about 0.8 MB at
THROTTLE, around three seconds, and the three daemons are moved at once.

Why the band check stays valid with writes during the moves: they are small (about 40 KB per broker, a few % of
its data, against a band of +-9% of the average disk) and spread evenly over the partitions, so a disk grows with
its number of partitions and the band with the mean number (10: the topic's 30 partitions are spread evenly at
creation, checked in fill_unevenly). A disk the plan emptied down to its upper edge holds fewer partitions than the
mean and drifts back in, one it filled up to its lower edge holds more and drifts back in too, and one it left
alone holds the mean. Measured: max/mean 1.01-1.03 after the moves, the band allows 1.09.

The second test is one cluster of two moverd brokers found through ZooKeeper. A moverd's Metadata describes itself
as the whole cluster (mover/api/metadata.py), so the partitions come from /brokers/topics, where every broker merges
its id (mover/zk/registration.py), and execute reaches the broker the bootstrap's Metadata does not name through
its registration. Without both, the plan dropped the other broker's moves ("dropped 5 moves whose partition the
snapshot's Metadata does not list on that broker") and execute could not reach it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mover.audit.cli import main
from mover.audit.snapshot import list_snapshots
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.exactly_once import assert_clean, check
from mover.testing.history import TP, Acked
from mover.testing.log_dirs_tool import create_topics
from mover.testing.move_watcher import MoveWatcher
from mover.testing.moverd import Moverd
from mover.testing.placement import replica_placement
from mover.testing.producers import PyProducer, prefill
from mover.testing.wait import wait_for
from mover.testing.zk_cluster import moverd_cluster, new_chroot, read_json, zk_client
from mover.testing.zookeeper import ZooKeeperServer

TOPIC = "skew"
PARTITIONS = 30
TPS: list[TP] = [(TOPIC, p) for p in range(PARTITIONS)]
CLUSTERS = ("c0", "c1", "c2")
# The prefill: records of this size, many per partition on the first dir, few on the others (fill_unevenly).
FILL_BYTES = 4000
# Each broker moves about 0.8 MB (5 partitions, one at a time: they all leave the first dir) at this rate, so every
# move lasts long enough (0.1-0.7 s) for records to reach the partition while it is copied.
THROTTLE = 300_000
# During the moves: per partition this many records per second, each this big, from one producer per daemon.
PER_PARTITION_RATE = 4
LIVE_BYTES = 50


@pytest.fixture
def fleet(tmp_path: Path, moverd: Callable[..., Moverd]) -> list[Moverd]:
    bases = [tmp_path / name for name in CLUSTERS]
    for base in bases:
        base.mkdir()
    return [moverd(base=base, n_dirs=3) for base in bases]


def fill_unevenly(d: Moverd, seed: int) -> list[Acked]:
    """Partitions on the first dir get many records, on the second a few, on the third fewer: the records the
    broker acknowledged."""
    create_topics(d.bootstrap, {TOPIC: PARTITIONS})
    where = {tp: info.current for tp, info in replica_placement(d.bootstrap).items() if tp[0] == TOPIC}
    assert sorted(where) == TPS
    # The band argument of the module docstring: new partitions go to the dir with the fewest, 10 each.
    assert Counter(where.values()) == {str(x): PARTITIONS // len(d.dirs) for x in d.dirs}, where
    heavy, light = str(d.dirs[0]), str(d.dirs[1])
    # Varied sizes on the heavy dir, so the band can be reached with whole partitions.
    counts = {(t, p): 10 + (p * 7 + seed) % 50 if log_dir == heavy else 1 + p * 3 % 9 if log_dir == light
              else 1 + p % 3 for (t, p), log_dir in where.items()}
    return prefill(d.bootstrap, TPS, counts, FILL_BYTES, name="fill")


def planned_moves(plan: Path) -> dict[str, set[TP]]:
    """Cluster -> the partitions the plan moves there."""
    out: dict[str, set[TP]] = {name: set() for name in CLUSTERS}
    for m in pq.read_table(plan / "moves").to_pylist():
        out[m["cluster"]].add((m["topic"], m["partition"]))
    return out


def read_back(name: str, d: Moverd, acked: list[Acked]) -> None:
    """A fresh consumer from the beginning: every acknowledged record, at its offset, nothing else."""
    ends = end_offsets(d.bootstrap, TPS)
    consumer = PyConsumer(f"after_{name}", d.bootstrap, TPS).start()
    try:
        wait_caught_up([consumer], ends)
    finally:
        consumed = consumer.stop()
    assert sum(ends.values()) == len(acked), f"{name}: the log holds records nobody got an ack for"
    assert_clean(check(f"{name} (read after the moves)", consumed, ends, acked))


def test_collect_audit_plan_execute_on_three_moverds_under_load(tmp_path: Path, fleet: list[Moverd],
                                                                spark: Any) -> None:
    acked = {name: fill_unevenly(d, i) for i, (name, d) in enumerate(zip(CLUSTERS, fleet, strict=True))}
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text("".join(f'[clusters.{name}]\nbootstrap = "{d.bootstrap}"\n'
                                  for name, d in zip(CLUSTERS, fleet, strict=True)))

    assert main(["collect", "--local", "--fleet", str(fleet_file), "--out", str(tmp_path / "before")]) == 0
    [before] = list_snapshots(tmp_path / "before")
    assert main(["audit", "--snapshot", str(before), "--out", str(tmp_path / "audit-before")]) == 0
    findings = json.loads((tmp_path / "audit-before" / "findings.json").read_text())
    assert findings["fleet"]["disks"] == 9 and findings["fleet"]["disks_out_of_band"] > 0

    assert main(["plan", "--snapshot", str(before), "--out", str(tmp_path / "plan")]) == 0
    summary = json.loads((tmp_path / "plan" / "summary.json").read_text())
    assert summary["moves"] > 0 and summary["disks_out_of_band_after"] == 0
    planned = planned_moves(tmp_path / "plan")

    producers: list[PyProducer] = []
    consumers: list[PyConsumer] = []
    watchers: list[MoveWatcher] = []
    try:
        for i, (name, d) in enumerate(zip(CLUSTERS, fleet, strict=True)):
            # Both delivery guarantees a user picks: kafka-python's default (idempotent, acks=all) and plain acks=1.
            config = {} if i % 2 == 0 else {"acks": 1, "enable_idempotence": False}
            producers.append(PyProducer(f"live_{name}", d.bootstrap, TPS, rate=PER_PARTITION_RATE * PARTITIONS,
                                        pad=LIVE_BYTES, config=config).start())
            consumers.append(PyConsumer(f"live_{name}", d.bootstrap, TPS).start())
            watchers.append(MoveWatcher(name, d.bootstrap).start())
        wait_for(lambda: all(p.acked_count() > 0 for p in producers), message="every producer's first ack")
        wait_for(lambda: all(c.count() > 0 for c in consumers), message="every consumer's first records")

        read_before = [c.count() for c in consumers]
        started = time.monotonic()
        assert main(["execute", "--plan", str(tmp_path / "plan"), "--fleet", str(fleet_file),
                     "--throttle", str(THROTTLE), "--poll-interval", "0.1"]) == 0
        ended = time.monotonic()
        read_during = [c.count() for c in consumers]

        for w in watchers:
            w.stop()
        for p in producers:
            p.stop()
        for name, d, p, c, w, n_before, n_during in zip(CLUSTERS, fleet, producers, consumers, watchers,
                                                        read_before, read_during, strict=True):
            ok, failed = p.snapshot()
            # kafka-python retries what is retriable by itself; what reaches us failed for good.
            assert not failed, f"{name}: {len(failed)} records failed, e.g. {failed[:3]}"
            assert len(ok) == p.sent, f"{name}: sent {p.sent}, acknowledged {len(ok)}"
            during = sum(started <= a.at <= ended for a in ok)
            moving = w.written_while_moving(ok)
            print(f"{name}: moves {sorted(planned[name])}; {len(ok)} acked while running, {during} during execute "
                  f"({ended - started:.1f} s), {len(moving)} to a partition being moved; consumer read "
                  f"{n_during - n_before} during execute")
            # A poll every 50 ms may miss the shortest move (40 KB), never invent one.
            assert w.moved() <= planned[name], f"{name}: the watcher saw other moves than the plan's"
            if planned[name]:
                assert moving, f"{name}: no record was written to a partition while it was being moved"
            assert during > 0, f"{name}: nothing acknowledged while execute ran"
            assert n_during > n_before, f"{name}: the consumer read nothing while execute ran"
            acked[name] += ok
            ends = end_offsets(d.bootstrap, TPS)
            wait_caught_up([c], ends)
            assert_clean(check(f"{name} (read through the moves)", c.stop(), ends, acked[name]))
        consumers = []
    finally:
        for w in watchers:
            w.close()
        for p in producers:
            p.close()
        for c in consumers:
            c.close()

    assert main(["collect", "--local", "--fleet", str(fleet_file), "--out", str(tmp_path / "after")]) == 0
    [after] = list_snapshots(tmp_path / "after")
    assert main(["audit", "--snapshot", str(after), "--out", str(tmp_path / "audit-after")]) == 0
    findings = json.loads((tmp_path / "audit-after" / "findings.json").read_text())
    assert findings["fleet"]["disks"] == 9
    assert findings["fleet"]["disks_out_of_band"] == 0, findings["worst_brokers"]
    assert findings["fleet"]["moves_in_progress"] == 0

    assert main(["plan", "--snapshot", str(after), "--out", str(tmp_path / "plan-again")]) == 0
    assert json.loads((tmp_path / "plan-again" / "summary.json").read_text())["moves"] == 0

    for name, d in zip(CLUSTERS, fleet, strict=True):
        read_back(name, d, acked[name])


def test_a_moverd_cluster_found_through_zookeeper(tmp_path: Path, zookeeper: ZooKeeperServer, spark: Any) -> None:
    """Two moverd brokers registered in one ZooKeeper chroot, each holding a copy of every partition of the topic:
    each one's Metadata names only itself, so the partitions come from /brokers/topics (where both merged their
    ids) and execute reaches the broker Metadata does not name through its registration."""
    connect = new_chroot(zookeeper)
    with moverd_cluster(tmp_path, connect, 2, n_dirs=3) as brokers:
        acked = {str(i): fill_unevenly(d, i) for i, d in enumerate(brokers)}
        with zk_client(connect) as zk:
            # Each broker merges its id into /brokers/topics/<topic> on its own ZooKeeper worker's tick.
            def both_listed() -> bool:
                parts = (read_json(zk, f"/brokers/topics/{TOPIC}") or {}).get("partitions", {})
                return len(parts) == PARTITIONS and all(sorted(ids) == [0, 1] for ids in parts.values())

            wait_for(both_listed, message="both brokers in every partition's assignment")
        source = ["--zookeeper", connect, "--cluster", "zk"]
        assert main(["collect", "--local", *source, "--out", str(tmp_path / "before")]) == 0
        [before] = list_snapshots(tmp_path / "before")
        listed = {(r["topic"], r["partition"]): sorted(r["replicas"])
                  for r in pq.read_table(before / "partitions").to_pylist()}
        assert listed == {tp: [0, 1] for tp in TPS}

        assert main(["plan", "--snapshot", str(before), "--out", str(tmp_path / "plan")]) == 0
        summary = json.loads((tmp_path / "plan" / "summary.json").read_text())
        assert summary["moves_dropped_not_in_metadata"] == 0 and summary["disks_out_of_band_after"] == 0
        moved_on = {m["broker"] for m in pq.read_table(tmp_path / "plan" / "moves").to_pylist()}
        assert moved_on == {0, 1}

        assert main(["execute", "--plan", str(tmp_path / "plan"), *source, "--poll-interval", "0.1"]) == 0
        assert main(["collect", "--local", *source, "--out", str(tmp_path / "after")]) == 0
        [after] = list_snapshots(tmp_path / "after")
        assert main(["audit", "--snapshot", str(after), "--out", str(tmp_path / "audit-after")]) == 0
        findings = json.loads((tmp_path / "audit-after" / "findings.json").read_text())
        assert findings["fleet"]["disks"] == 6
        assert findings["fleet"]["disks_out_of_band"] == 0, findings["worst_brokers"]
        assert main(["plan", "--snapshot", str(after), "--out", str(tmp_path / "plan-again")]) == 0
        assert json.loads((tmp_path / "plan-again" / "summary.json").read_text())["moves"] == 0
        for i, d in enumerate(brokers):
            read_back(f"broker {i}", d, acked[str(i)])
