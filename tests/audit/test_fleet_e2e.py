"""The whole pipeline on a real fleet: three moverd daemons with three log dirs each, filled unevenly by an acks=1
kafka-python producer; collect -> audit -> plan -> execute. Afterwards every disk is inside its broker's band, every
acknowledged record can still be consumed, and a second plan is empty."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from mover.audit.cli import main
from mover.audit.snapshot import list_snapshots
from mover.testing.log_dirs_tool import create_topics, placement
from mover.testing.moverd import Moverd

TOPIC = "skew"
PARTITIONS = 30
VALUE = b"v" * 2000
CLUSTERS = ("c0", "c1", "c2")


@pytest.fixture
def fleet(tmp_path: Path, moverd: Callable[..., Moverd]) -> list[Moverd]:
    bases = [tmp_path / name for name in CLUSTERS]
    for base in bases:
        base.mkdir()
    return [moverd(base=base, n_dirs=3) for base in bases]


def fill_unevenly(d: Moverd, seed: int) -> dict[int, int]:
    """Partitions on the first dir get many records, on the second a few, on the third fewer: per partition the
    number of records the broker acknowledged."""
    create_topics(d.bootstrap, {TOPIC: PARTITIONS})
    where = {p: dirs[0][0] for (t, p), dirs in placement(d.bootstrap).items() if t == TOPIC}
    assert len(where) == PARTITIONS
    heavy, light = str(d.dirs[0]), str(d.dirs[1])
    producer = KafkaProducer(bootstrap_servers=d.bootstrap, acks=1, linger_ms=5, retries=0)
    acked: dict[int, int] = {}
    try:
        futures = []
        for p, log_dir in where.items():
            # Varied sizes on the heavy dir, so the band can be reached with whole partitions.
            n = 10 + (p * 7 + seed) % 50 if log_dir == heavy else 1 + p * 3 % 9 if log_dir == light else 1 + p % 3
            futures += [(p, producer.send(TOPIC, VALUE, partition=p)) for _ in range(n)]
        for p, f in futures:
            f.get(timeout=30)
            acked[p] = acked.get(p, 0) + 1
    finally:
        producer.close()
    return acked


def consumed(d: Moverd) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=d.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        counts: dict[int, int] = {}
        ends = consumer.end_offsets(tps)
        for record in consumer:
            counts[record.partition] = counts.get(record.partition, 0) + 1
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
        return counts
    finally:
        consumer.close()


def test_collect_audit_plan_execute_on_three_moverds(tmp_path: Path, fleet: list[Moverd], spark: Any) -> None:
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

    assert main(["execute", "--plan", str(tmp_path / "plan"), "--fleet", str(fleet_file),
                 "--throttle", str(50 << 20), "--poll-interval", "0.1"]) == 0

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
        assert consumed(d) == acked[name], name
