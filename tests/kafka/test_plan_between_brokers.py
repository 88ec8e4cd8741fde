"""`mover-audit plan` moving replicas between brokers, executed on a real Apache Kafka 3.7 cluster (KRaft, three
brokers with two log dirs each): broker 1 holds far more bytes than the others (a topic of replication factor 1
placed on it alone), so its disks together are above the cluster's band. collect -> plan gives `to_broker` rows,
each with the log dir chosen on its new broker; execute carries them out on the step engine, each new replica is
created in that dir (KIP-113's log_dirs at creation), and every acknowledged record reads back once."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mover.admin.client import Client
from mover.audit.cli import build_parser, main
from mover.audit.execute import run
from mover.audit.snapshot import list_snapshots
from mover.testing.exactly_once import read_back
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.placement import describe_placement
from mover.testing.producers import prefill

CLUSTER = "k"
HEAVY = "heavy"  # replication factor 1, on broker 1 only
SHARED = "shared"  # replication factor 2, on brokers 1 and 2: never moved to broker 2 (it holds a replica)
LIGHT = "light"  # replication factor 2, on brokers 2 and 3
EXECUTE_S = 300  # the moves take seconds: a bound for a run that hangs


@pytest.fixture(scope="module")
def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster(brokers=3, log_dirs=2, controller=True)


@pytest.mark.timeout(600)
def test_a_broker_above_its_clusters_band_sheds_replicas_into_the_dirs_the_plan_chose(
        cluster: KafkaCluster, tmp_path: Path, spark: Any) -> None:
    cluster.create_topic(HEAVY, assignment={p: [1] for p in range(6)})
    cluster.create_topic(SHARED, assignment={p: [1, 2] if p % 2 else [2, 1] for p in range(4)})
    cluster.create_topic(LIGHT, assignment={p: [2, 3] if p % 2 else [3, 2] for p in range(4)})
    tps = [(HEAVY, p) for p in range(6)] + [(SHARED, p) for p in range(4)] + [(LIGHT, p) for p in range(4)]
    counts = {tp: 40 + 8 * (tp[1] % 3) if tp[0] == HEAVY else 12 for tp in tps}
    acked = prefill(cluster.bootstrap, tps, counts, 1000)
    source = ["--bootstrap-server", cluster.bootstrap, "--cluster", CLUSTER]

    assert main(["collect", "--local", *source, "--out", str(tmp_path / "snapshots")]) == 0
    [snap] = list_snapshots(tmp_path / "snapshots")
    assert main(["plan", "--snapshot", str(snap), "--out", str(tmp_path / "plan")]) == 0
    summary = json.loads((tmp_path / "plan" / "summary.json").read_text())
    moves = pd.read_parquet(tmp_path / "plan" / "moves")
    between = moves[moves["to_broker"].notna()]
    assert summary["moves_between_brokers"] == len(between) > 0, (
        summary, pd.read_parquet(tmp_path / "plan" / "disks.parquet").to_string())
    assert set(between["broker"]) == {1} and set(between["to_broker"].astype(int)) <= {2, 3}
    assert not ((between["topic"] == SHARED) & (between["to_broker"] == 2)).any()
    chosen = {(m.topic, m.partition): (int(m.to_broker), m.to_dir) for m in between.itertuples()}
    assert all(d in {str(x) for x in cluster.log_dirs(b)} for b, d in chosen.values())
    # Broker 1 sheds what it must, to within a whole partition of the cluster's upper edge (whole partitions of
    # 12-56 KB against a band of +-8.1% of about 80 KB per disk).
    disks = pd.read_parquet(tmp_path / "plan" / "disks.parquet")
    per = disks.groupby("broker")[["used_before", "used_after", "total_bytes"]].sum()
    high = per["used_before"].sum() / per["total_bytes"].sum() * 1.081
    assert per.at[1, "used_before"] > high * per.at[1, "total_bytes"]
    assert per.at[1, "used_after"] <= high * per.at[1, "total_bytes"] + 56_000 * 1.1, per
    assert (per["used_after"] - per["used_before"]).sum() == 0

    argv = ["execute", "--plan", str(tmp_path / "plan"), *source, "--throttle", "-1", "--poll-interval", "0.2",
            "--stall-seconds", "60"]
    out = io.StringIO()
    # On a thread, so that a run that never ends fails with what execute said (in CI once it ran until the test's
    # timeout, and the timeout's stacks could not say which move it waited for).
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(run(build_parser(argv)[0].parse_args(argv), out)),
                              daemon=True)
    worker.start()
    worker.join(EXECUTE_S)
    assert result == [0], out.getvalue()
    with Client(cluster.bootstrap) as client:
        for (topic, p), (broker, log_dir) in chosen.items():
            info = describe_placement(client, broker)[(topic, p)]
            assert (info.current, info.future) == (log_dir, None), (topic, p, out.getvalue())
            assert (topic, p) not in describe_placement(client, 1)
    read_back("between-reader", cluster.bootstrap, tps, acked)
