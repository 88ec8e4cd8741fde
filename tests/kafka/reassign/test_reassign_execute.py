"""mover-reassign --execute on a real Kafka 3.7 (tests/kafka/reassign/conftest.py: a controller and 5 brokers, topics
with replication factor 3 and min.insync.replicas=2): KIP-435 steps under small limits with idempotent acks=all
producers and consumers running, limits changed mid-run, the replication throttle measured, bad input refused, and
mover-log-dirs --execute and mover-audit execute on the same engine.

Afterwards: the assignment is the target, every acknowledged record is read back once, no throttle config is left
(each resource has its own values back), and no sample of the cluster (ListPartitionReassignments, polled on a
thread) ever saw more partitions moving, or more replicas added per partition, than the limits allowed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    alter_configs,
    alter_reassignments,
    list_reassignments,
    own_configs,
)
from mover.admin.reassign.replication_throttle import (
    BROKER_KEYS,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    TOPIC_KEYS,
)
from mover.testing import prefork
from mover.testing.exactly_once import read_back
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.producers import prefill
from mover.testing.reassign_checks import Load, Sampler, create_topic, partitions, throttles_left
from mover.testing.reassign_process import Lines, mover_reassign, reassignment_file, start_reassign, state_env
from mover.testing.wait import wait_for

# Kafka's replication quota is measured over 11 one-second windows (docs/kafka-compat.md): a fresh throttle lets
# about 11 s worth of its rate through before it bites, so a copy of 15 s worth must take at least the other 4
# (unthrottled it takes about a second here). One fetch (replica.fetch.max.bytes, 1 MiB) may pass the quota.
RATE = 1_000_000
THROTTLED_BYTES = 15 * RATE
FREE_WINDOWS_S = 11
FETCH_BYTES = 1 << 20


def test_steps_under_load_with_limits_changed_mid_run(cluster: KafkaCluster, topic: str, state_dir: Path,
                                                      tmp_path: Path) -> None:
    create_topic(cluster, topic, 6, [1, 2, 3])
    load = Load(cluster, topic, 6, prefill_records=1500)
    targets = {p: [3, 4, 5] if p % 2 else [4, 5, 1] for p in range(6)}
    f = reassignment_file(tmp_path / "r.json", topic, targets)
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"max_partition_movements": 1}))
    with Sampler(cluster.bootstrap, topic) as sampler:
        run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                                   "--reassignment-json-file", str(f), "--max-replica-movements", "1",
                                   "--max-leader-movements", "1", "--limits", str(limits), "--throttle", "20000000",
                                   "--poll-interval", "0.3"))
        run.wait("Request id: ")
        first = run.wait("step 1 [")
        # A throttle is in place for the step that runs: the topic's follower list names its new replica.
        with Client(cluster.bootstrap, timeout=10) as client:
            during = own_configs(client, TOPIC_RESOURCE, [topic], TOPIC_KEYS)[topic]
        assert "follower.replication.throttled.replicas" in during, (first, during)
        run.wait("step 2 done")
        changed_at = time.monotonic()
        limits.write_text(json.dumps({"max_partition_movements": 3}))
        run.wait("Limits changed: max 3 partition movements")
        rc, out = run.finish()
    assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
    assert "Successfully reassigned partitions" in out
    # Never more than the limits: 1 partition before the change, 3 after; one replica added at a time.
    assert sampler.max_partitions(until=changed_at) <= 1
    assert sampler.max_partitions() <= 3
    assert sampler.max_adding() <= 1
    # The engine's own count at each poll, leader movements included (--max-leader-movements 1). The raised limit is
    # judged by it, not by the sampler: a step of these small partitions can start and end between two of the
    # sampler's polls, so the sampler can only bound from above.
    peak = next(line for line in out.splitlines() if line.startswith("Most at once: "))
    assert ", 1 leader movements," in peak or ", 0 leader movements," in peak, peak
    assert 2 <= int(peak.split()[3]) <= 3, ("the raised limit was never used", peak)
    placed = partitions(cluster, topic)
    assert {p: r for p, (r, _) in placed.items()} == targets
    assert {p: leader for p, (_, leader) in placed.items()} == {p: r[0] for p, r in targets.items()}
    assert throttles_left(cluster, topic) == {}
    load.check()


def test_bad_input_is_one_line_and_starts_nothing(cluster: KafkaCluster, state_dir: Path, tmp_path: Path) -> None:
    topic = "badinput"
    create_topic(cluster, topic, 2, [1, 2, 3])

    def refused(targets: dict[int, list[int]], name: str = topic) -> str:
        f = reassignment_file(tmp_path / "bad.json", name, targets)
        r = mover_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                           "--reassignment-json-file", str(f))
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stdout + r.stderr
        return r.stderr.strip()

    assert refused({0: [1, 2, 9]}).endswith("Unknown broker id 9")
    assert refused({0: [1, 2, 4]}, "nope").endswith("Topic nope not found.")
    assert "duplicate" in refused({0: [1, 2, 2]})
    assert "fewer than min.insync.replicas=2" in refused({0: [4]})
    assert "Unable to find partition: badinput-7" in refused({7: [1, 2, 4]})
    # Someone else's reassignment, heading elsewhere, held back by a 1 B/s throttle (set as Kafka's tool sets it).
    prefill(cluster.bootstrap, [(topic, 1)], 500, pad=1000)
    rates = {str(b): {"leader.replication.throttled.rate": "1", "follower.replication.throttled.rate": "1"}
             for b in (1, 2, 3, 4, 5)}
    with Client(cluster.bootstrap, timeout=10) as client:
        alter_configs(client, TOPIC_RESOURCE, {topic: {"leader.replication.throttled.replicas": "1:1,1:2,1:3",
                                                       "follower.replication.throttled.replicas": "1:4,1:5"}})
        alter_configs(client, BROKER_RESOURCE, rates)
        assert alter_reassignments(client, {(topic, 1): (3, 4, 5)}) == {}
        try:
            assert "already being reassigned to [3, 4, 5] by someone else" in refused({1: [1, 2, 4]})
        finally:
            alter_reassignments(client, {(topic, 1): None})
            alter_configs(client, TOPIC_RESOURCE, {topic: {k: None for k in TOPIC_KEYS}})
            alter_configs(client, BROKER_RESOURCE, {b: {k: None for k in BROKER_KEYS} for b in rates})
        assert list_reassignments(client) == {}
    assert not state_dir.exists() or all("requests\": {}" in p.read_text() for p in state_dir.iterdir())


def test_mover_log_dirs_execute_runs_the_same_engine(cluster: KafkaCluster, state_dir: Path, tmp_path: Path) -> None:
    topic = "logdirsexec"
    create_topic(cluster, topic, 1, [3, 4, 5])
    f = reassignment_file(tmp_path / "r.json", topic, {0: [3, 4, 1]})
    r = prefork.run([sys.executable, "-m", "mover.cli.log_dirs", "--bootstrap-server", cluster.bootstrap,
                     "--execute", "--reassignment-json-file", str(f)], capture_output=True, text=True,
                    env=state_env(state_dir), timeout=240, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Partition {topic}-0: step 1 [3, 4, 5] -> [3, 4, 1] +[1] -[5]" in r.stdout
    assert {p: rep for p, (rep, _) in partitions(cluster, topic).items()} == {0: [3, 4, 1]}


def test_mover_audit_execute_moves_replicas_between_brokers_on_the_same_engine(cluster: KafkaCluster,
                                                                               tmp_path: Path) -> None:
    """A mover-audit plan whose rows carry `to_broker` runs in execute's loop on the step engine: KIP-435 steps under
    --max-moves, the replication throttle set for the run and removed at its end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mover.audit.cli import build_parser
    from mover.audit.execute import run

    name = "audit_between_brokers"
    create_topic(cluster, name, 4, [1, 2, 3])
    acked = prefill(cluster.bootstrap, [(name, p) for p in range(4)], 50, pad=1000)
    rows = [{"cluster": "k", "broker": 3, "topic": name, "partition": p, "from_dir": "any", "to_dir": "any",
             "size_bytes": 50_000, "step": 0, "to_broker": 4} for p in range(4)]
    rows += [{"cluster": "k", "broker": 2, "topic": name, "partition": p, "from_dir": "any", "to_dir": "any",
              "size_bytes": 50_000, "step": 0, "to_broker": 5} for p in range(2)]
    schema = pa.schema([("cluster", pa.string()), ("broker", pa.int32()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("from_dir", pa.string()), ("to_dir", pa.string()),
                        ("size_bytes", pa.int64()), ("step", pa.int32()), ("to_broker", pa.int32())])
    (tmp_path / "plan" / "moves").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "plan" / "moves" / "part-0.parquet")
    argv = ["execute", "--plan", str(tmp_path / "plan"), "--bootstrap-server", cluster.bootstrap, "--cluster", "k",
            "--max-moves", "2", "--throttle", "50000000", "--poll-interval", "0.2"]
    parser, _ = build_parser(argv)
    out = io.StringIO()
    with Sampler(cluster.bootstrap, name) as sampler:
        rc = run(parser.parse_args(argv), out)
    text = out.getvalue()
    assert rc == 0, text
    assert {p: r for p, (r, _) in partitions(cluster, name).items()} == {0: [1, 5, 4], 1: [1, 5, 4], 2: [1, 2, 4],
                                                                          3: [1, 2, 4]}, text
    assert "executed: 6 done" in text, text
    assert sampler.max_partitions() <= 2 and sampler.max_adding() <= 1, text
    assert throttles_left(cluster, name) == {}, text
    read_back("audit-reader", cluster.bootstrap, [(name, p) for p in range(4)], acked)


def test_throttle_limits_replication_and_own_values_come_back(cluster: KafkaCluster, state_dir: Path,
                                                               tmp_path: Path) -> None:
    """--throttle on a real cluster: the rates on the step's brokers only, the topic's throttled replicas are the
    step's (current replicas lead, the new one follows), the bytes arriving on the new replica's broker stay within
    what Kafka's quota lets through, and afterwards each broker and the topic have their own values back."""
    name = "throttled"
    create_topic(cluster, name, 1, [1, 2, 3])
    prefill(cluster.bootstrap, [(name, 0)], THROTTLED_BYTES // 10_000, pad=10_000)
    own_broker = {FOLLOWER_RATE: "999999999"}
    own_topic = {FOLLOWER_REPLICAS: "0:5"}
    with Client(cluster.bootstrap, timeout=10) as client:
        alter_configs(client, BROKER_RESOURCE, {"4": dict(own_broker)})
        alter_configs(client, TOPIC_RESOURCE, {name: dict(own_topic)})
        size = next(p.size for d in describe_broker(client, 1, {name: [0]}) for p in d.partitions
                    if not p.is_future)
    assert size >= THROTTLED_BYTES
    arrived: list[tuple[float, int]] = []  # (monotonic time, bytes of the new replica on broker 4)
    stop = threading.Event()

    def sample() -> None:
        with Client(cluster.bootstrap, timeout=10) as client:
            while not stop.is_set():
                got = [p.size for d in describe_broker(client, 4, {name: [0]}) for p in d.partitions
                       if not p.is_future]
                arrived.append((time.monotonic(), got[0] if got else 0))
                stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    f = reassignment_file(tmp_path / "r.json", name, {0: [1, 2, 4]})
    try:
        run = Lines(start_reassign(state_dir, "--bootstrap-server", cluster.bootstrap, "--execute",
                                   "--reassignment-json-file", str(f), "--throttle", str(RATE),
                                   "--poll-interval", "0.3"))
        run.wait("step 1 [1, 2, 3] -> [1, 2, 4] +[4] -[3]")
        started = time.monotonic()  # after the step started: the elapsed time below is if anything too short
        with Client(cluster.bootstrap, timeout=10) as client:
            during_topic = own_configs(client, TOPIC_RESOURCE, [name], TOPIC_KEYS)[name]
            during_brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids], BROKER_KEYS)
        rc, out = run.finish()
        assert rc == 0, out + run.proc.stderr.read()  # type: ignore[union-attr]
        wait_for(lambda: arrived and arrived[-1][1] >= size, 30, "the new replica's last bytes sampled")
    finally:
        stop.set()
        sampler.join(10)
        with Client(cluster.bootstrap, timeout=10) as client:
            after_brokers = own_configs(client, BROKER_RESOURCE, [str(b) for b in cluster.broker_ids], BROKER_KEYS)
            after_topic = own_configs(client, TOPIC_RESOURCE, [name], TOPIC_KEYS)[name]
            alter_configs(client, BROKER_RESOURCE, {"4": {k: None for k in BROKER_KEYS}})
            alter_configs(client, TOPIC_RESOURCE, {name: {k: None for k in TOPIC_KEYS}})
    # During the step: the leader side is the step's current replicas, the follower side its new one (with the
    # topic's own entry kept); the rate only on the brokers the step involves.
    assert during_topic == {LEADER_REPLICAS: "0:1,0:2,0:3", FOLLOWER_REPLICAS: "0:4,0:5"}, out
    assert during_brokers == {**{str(b): {LEADER_RATE: str(RATE), FOLLOWER_RATE: str(RATE)} for b in (1, 2, 3, 4)},
                              "5": {}}, out
    # Afterwards: each resource's own values, nothing of the run's.
    assert after_brokers == {"1": {}, "2": {}, "3": {}, "4": own_broker, "5": {}}, out
    assert after_topic == own_topic, out
    # Observed: the copy took at least what the quota's free windows leave, and at no sample had more bytes
    # arrived than the rate allows since the step started, plus the free windows and one fetch.
    done_at = next(t for t, n in arrived if n >= size)
    elapsed = done_at - started
    held_back = (size - FREE_WINDOWS_S * RATE) / RATE
    over = max(((n - (RATE * (t - started + FREE_WINDOWS_S) + FETCH_BYTES), t - started) for t, n in arrived
                if t >= started), default=(0, 0.0))
    free_end = next(((t, n) for t, n in arrived if t >= started + FREE_WINDOWS_S), None)
    after_free = (f"{(size - free_end[1]) / max(done_at - free_end[0], 1e-3) / RATE:.2f}x the rate after the free "
                  f"windows" if free_end is not None and done_at > free_end[0] else "done within the free windows")
    print(f"copied {size} B at {RATE} B/s in {elapsed:.1f} s (at least {held_back:.1f} s expected, size/rate "
          f"{size / RATE:.1f} s), {after_free}; closest to the quota's allowance: {-over[0]:.0f} B under, "
          f"{over[1]:.1f} s in")
    assert elapsed >= held_back, f"{size} B at {RATE} B/s took only {elapsed:.1f} s: the throttle did not hold"
    assert over[0] <= 0, f"{over[0]:.0f} B more than the throttle allows had arrived {over[1]:.1f} s in"
    assert {p: r for p, (r, _) in partitions(cluster, name).items()} == {0: [1, 2, 4]}
