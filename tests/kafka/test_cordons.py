"""Cordons (KIP-1066) against a real Apache Kafka 3.7, which has none: it takes an unknown broker key without a word
(docs/kafka-compat.md), so `mover-log-dirs --cordon` must refuse from ApiVersions alone, in one line, sending
nothing; the table says "-" (not reported) and collect records null."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from mover.audit import cli as audit_cli
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.log_dirs_tool import cli
from mover.testing.raw import raw_call
from mover.wire.messages import DESCRIBE_CONFIGS


def test_kafka_3_7_has_no_cordons(kafka: KafkaCluster, tmp_path: Path) -> None:
    d1 = str(kafka.log_dirs(1)[0])
    r = cli("--bootstrap-server", kafka.bootstrap, "--cordon", d1, "--broker-list", "1")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip() == ("mover-log-dirs: error: broker 1 does not support cordoned log dirs (KIP-1066 needs "
                                "Kafka 4.3+ or moverd; its DescribeLogDirs stops at v4)")
    port = kafka.bootstrap.split(",")[0].rsplit(":", 1)[1]
    body = raw_call(int(port), DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "1", "configuration_keys": ["cordoned.log.dirs"]}],
        "include_synonyms": False})
    assert body["results"][0]["configs"] == []  # nothing was stored
    table = cli("--bootstrap-server", kafka.bootstrap, "--describe", "--output", "table")
    assert table.returncode == 0 and "Cordoned" in table.stdout
    rows = [line for line in table.stdout.splitlines() if line.startswith("│      1 │")]
    assert len(rows) == 2 and all(line.split("│")[4].strip() == "-" for line in rows), table.stdout
    assert audit_cli.main(["collect", "--local", "--bootstrap-server", kafka.bootstrap, "--cluster", "k",
                           "--out", str(tmp_path / "snaps")]) == 0
    (snap,) = list((tmp_path / "snaps").iterdir())
    assert [r["is_cordoned"] for r in pq.read_table(snap / "log_dirs").to_pylist()] == [None, None]
