"""mover-reassign's answers that move nothing, on a real Kafka 3.7 (tests/kafka/reassign/conftest.py: a controller and
5 brokers): --generate against Kafka's own kafka-reassign-partitions.sh, and --progress of a reassignment file
(KIP-179's table, each replica asked of its own broker)."""

from __future__ import annotations

import json
from pathlib import Path

from mover.admin.replica_assignment import assign_replicas
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.producers import prefill
from mover.testing.reassign_checks import create_topic
from mover.testing.reassign_process import mover_reassign


def test_generate_proposes_what_kafkas_tool_proposes(cluster: KafkaCluster, state_dir: Path,
                                                     tmp_path: Path) -> None:
    """--generate against Kafka 3.7's own: the same current block, and a proposal from Kafka's algorithm (random
    start and follower shift: Kafka's proposal and ours are each one of the 25 that 5 brokers allow)."""
    name = "generated"
    create_topic(cluster, name, 7, [1, 2, 3])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": name}]}))
    possible = {tuple(tuple(r) for _, r in sorted(assign_replicas([1, 2, 3, 4, 5], {}, 7, 3, start=i,
                                                                   shift=j).items()))
                for i in range(5) for j in range(5)}

    def proposal(text: str) -> tuple[str, tuple[tuple[int, ...], ...]]:
        lines = text.splitlines()
        assert lines[0] == "Current partition replica assignment" and lines[3] == (
            "Proposed partition reassignment configuration"), text
        parts = json.loads(lines[4])["partitions"]
        assert [p["partition"] for p in parts] == list(range(7)) and {p["topic"] for p in parts} == {name}
        return lines[1], tuple(tuple(p["replicas"]) for p in parts)

    theirs = cluster.tool("kafka-reassign-partitions.sh", "--bootstrap-server", cluster.bootstrap, "--generate",
                          "--topics-to-move-json-file", str(topics), "--broker-list", "1,2,3,4,5").stdout
    ours = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--generate",
                          "--topics-to-move-json-file", str(topics), "--broker-list", "5,4,3,2,1")
    assert ours.returncode == 0, ours.stdout + ours.stderr
    their_current, their_proposal = proposal(theirs)
    our_current, our_proposal = proposal(ours.stdout)
    assert our_current == their_current
    assert their_proposal in possible, theirs
    assert our_proposal in possible, ours.stdout


def test_progress_table_of_a_reassignment_file(cluster: KafkaCluster, topic: str, state_dir: Path,
                                               tmp_path: Path) -> None:
    """`--progress --reassignment-json-file`: KIP-179's table, where each replica the file names stands on a real
    Kafka 3.7 (each replica's log end offset asked of its own broker as a debugging replica)."""
    create_topic(cluster, topic, 2, [1, 2])
    prefill(cluster.bootstrap, [(topic, 0), (topic, 1)], 50, pad=100)  # acks=all: both replicas have every record
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2, 3]},
        {"topic": topic, "partition": 1, "replicas": [1, 42]},
        {"topic": topic, "partition": 7, "replicas": [1]},
        {"topic": "no-such-topic", "partition": 0, "replicas": [1]}]}))
    r = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--progress", "--reassignment-json-file",
                       str(f))
    assert r.returncode == 3, r.stdout + r.stderr  # not every replica is in sync: in progress
    rows = [line.split(None, 3) for line in r.stdout.splitlines()[2:]]
    assert rows == [[topic, "0", "1", "In sync"], [topic, "0", "2", "In sync"],
                    [topic, "0", "3", "Broker does not host this partition"],
                    [topic, "1", "1", "In sync"], [topic, "1", "42", "Unknown broker"],
                    [topic, "7", "1", "Unknown partition"], ["no-such-topic", "0", "1", "Unknown topic"]], r.stdout
