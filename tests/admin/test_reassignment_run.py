"""The reassignment run as a library (mover/admin/reassign/run.py), without a command line: against brokers that answer
as Apache Kafka 3.9 does (mover/testing/fake_kafka/), with the cluster's own request store. What it has to say
comes to the callback, what it did comes back as a RunResult, a plan it cannot carry out is an AdminError before
anything changes; nothing is printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget
from mover.admin.client import Client
from mover.admin.common import AdminError
from mover.admin.limits import RunLimits
from mover.admin.reassign.progress import replica_statuses
from mover.admin.reassign.replication_throttle import BROKER_KEYS, TOPIC_KEYS
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.run import DONE, ReassignmentRun
from mover.admin.reassign.status_store import COMPLETED
from mover.admin.reassign.steps import Limits
from mover.testing.fake_kafka import VERSIONS, FakeCluster

TARGET = (2, 3)


def cluster_of_two_partitions() -> FakeCluster:
    cluster = FakeCluster(VERSIONS["3.9"], brokers=[1, 2, 3], dirs=["/d1", "/d2"])
    for p in range(2):
        for b in (1, 2):
            cluster.add_replica(b, "/d1", "t", p, 1000)
    return cluster


def targets(*partitions: int, replicas: tuple[int, ...] = TARGET, topic: str = "t") -> list[PartitionTarget]:
    return [PartitionTarget(topic, p, replicas, (ANY_LOG_DIR,) * len(replicas)) for p in partitions]


def test_a_run_says_what_it_does_to_its_callback_and_returns_what_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    with cluster_of_two_partitions() as cluster, Client(cluster.bootstrap) as client, \
            ClusterRequestStore.open(client, tool="a library") as store:
        run = ReassignmentRun(client, targets(0, 1), limits=RunLimits(Limits(1, 1, 1), 1_000_000), store=store,
                              say=lines.append, poll_s=0.02)
        checked = run.check()
        # What to roll back to: the partitions as they were.
        assert [(t.name, t.replicas) for t in checked.current] == [("t-0", (1, 2)), ("t-1", (1, 2))]
        result = run.execute()
        request = store.request(result.request_id)  # type: ignore[arg-type]
    assert capsys.readouterr().out == ""  # the library prints nothing: everything went to `say`
    assert result.outcome == DONE and sorted(result.done) == ["t-0", "t-1"]
    assert not result.failed and not result.remaining
    assert result.request_id is not None and request["state"] == COMPLETED
    assert lines[0] == f"Request id: {result.request_id}"
    assert any(line.startswith("Limits: max 1 partition movements") for line in lines), lines
    assert any(line.startswith("Estimate: ") for line in lines), lines
    assert any(line.startswith("Partition t-0: step 1 [1, 2] -> ") for line in lines), lines
    assert lines[-1].startswith("Throttles removed: broker:"), lines
    # The limit held at every poll, and the throttles it set are back.
    assert max(s.partitions for s in result.samples) == 1
    assert result.restored and not cluster.reassigning
    assert {tp: tuple(r) for tp, r in cluster.assignment.items()} == {("t", 0): TARGET, ("t", 1): TARGET}
    for b in cluster.brokers.values():
        assert not set(b.configs) & set(BROKER_KEYS), b.configs
    assert not set(cluster.topic_configs.get("t", {})) & set(TOPIC_KEYS)


@pytest.mark.parametrize(("plan", "error"), [
    (targets(0, replicas=(2, 9)), "Unknown broker id 9"),
    (targets(0, 7), "Unable to find partition: t-7"),
    (targets(0, replicas=(2, 2)), "Partition t-0: "),
])
def test_a_plan_it_cannot_carry_out_is_an_admin_error_before_anything_changes(
        plan: list[PartitionTarget], error: str) -> None:
    lines: list[str] = []
    with cluster_of_two_partitions() as cluster, Client(cluster.bootstrap) as client, \
            ClusterRequestStore.open(client, tool="a library") as store:
        run = ReassignmentRun(client, plan, limits=RunLimits(), store=store, say=lines.append, poll_s=0.02)
        with pytest.raises(AdminError) as raised:
            run.execute()
        assert str(raised.value).startswith(error), raised.value
        assert store.requests() == []  # no request claimed
    assert lines == [] and not cluster.reassigning
    assert {tp: tuple(r) for tp, r in cluster.assignment.items()} == {("t", 0): (1, 2), ("t", 1): (1, 2)}


def test_the_one_per_replica_call_on_brokers(tmp_path: Path) -> None:
    """replica_statuses against the fake brokers: each replica's dir and bytes, its lag, the leader's bytes as the
    denominator, and a replica its broker does not host."""
    with cluster_of_two_partitions() as cluster, Client(cluster.bootstrap) as client:
        got = replica_statuses(client, [("t", 0, 2), ("t", 0, 3)], lag=False)
    hosted, not_hosted = got
    assert (hosted.log_dir, hosted.bytes, hosted.progress.numerator, hosted.progress.denominator) == (
        "/d1", 1000, 1000, 1000)
    assert hosted.progress.complete and hosted.status == "In sync" and hosted.status_ms > 0
    assert not_hosted.status == "Broker does not host this partition" and not_hosted.log_dir is None
    assert not_hosted.progress.error is not None and not not_hosted.progress.complete
