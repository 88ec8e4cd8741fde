"""Bytes written for a move between brokers with `log_dirs`, on a real Kafka 3.7 (KRaft: a controller and 3 brokers,
2 log dirs each): one partition of MB MB moves from brokers [1, 2] to [2, 3], its new replica on broker 3 asked for
in the dir Kafka would not pick (the one holding more partitions: Kafka puts a new replica in the dir holding the
fewest), by:

* mover-reassign of this tree: AlterReplicaLogDirs before the step, re-sent after it (KIP-113,
  mover/admin/reassign/new_replica_dirs.py): the replica is created in its dir;
* mover-reassign of another tree (BEFORE=/path/to/checkout, e.g. main before this change), when given;
* Kafka 3.7's kafka-reassign-partitions.sh: the reassignment first, the log-dir request after.

Per run: the bytes broker 3's JVM wrote (/proc/PID/io wchar: its log appends, both the fetched replica and any copy
between its dirs, plus its own small checkpoint and log writes) from the start until its copy is in the asked dir with
no future copy left, over the partition's size. No producer runs, so the partition does not grow meanwhile.

    .venv/bin/python bench/reassign_log_dirs.py       # MB=16 RUNS=2 by default; BEFORE=/work/main to compare

Figures depend on the machine and on what else runs on it; the ratio does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import bench_root
from mover.admin.client import Client
from mover.admin.common import TopicPartitionReplica
from mover.admin.log_dir_state import describe_broker, replica_dirs
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.kafka_home import kafka_home
from mover.testing.producers import prefill
from mover.testing.wait import wait_for

MB = int(os.environ.get("MB", "16"))
RUNS = int(os.environ.get("RUNS", "2"))
BEFORE = os.environ.get("BEFORE")
RECORD = 10_000
HEAP = os.environ.get("BENCH_KAFKA_HEAP", "-Xmx256m -Xms64m")
REPO = Path(__file__).resolve().parents[1]


def written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"no wchar in /proc/{pid}/io")


def mover_reassign(tree: Path, state: Path, *args: str) -> None:
    env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(state), "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                       text=True, env=env, cwd=tree, timeout=3600)
    assert r.returncode == 0, r.stdout + r.stderr


def where(client: Client, broker: int, topic: str) -> tuple[str | None, str | None, int]:
    """Broker's current dir, future dir, and current size of topic-0."""
    info = replica_dirs(broker, describe_broker(client, broker, {topic: [0]})).get(
        TopicPartitionReplica(topic, 0, broker))
    return (None, None, 0) if info is None else (info.current, info.future, info.current_size)


def not_kafkas_pick(kafka: KafkaCluster, client: Client, n: int) -> str:
    """Broker 3's dir holding more partitions (a filler partition added there when they are level)."""
    counts = {d.path: len(d.partitions) for d in describe_broker(client, 3)}
    if len(set(counts.values())) == 1:
        kafka.create_topic(f"filler{n}", assignment={0: [3]})
        counts = wait_for(lambda: (lambda c: c if len(set(c.values())) > 1 else None)(
            {d.path: len(d.partitions) for d in describe_broker(client, 3)}), 30, "the filler in a dir")
    return max(counts, key=lambda d: counts[d])


def one_run(kafka: KafkaCluster, base: Path, n: int, how: str) -> tuple[float, int]:
    topic = f"{how.replace(' ', '')}{n}"
    kafka.create_topic(topic, assignment={0: [1, 2]})
    prefill(kafka.bootstrap, [(topic, 0)], MB * (1 << 20) // RECORD, pad=RECORD)
    with Client(kafka.bootstrap, timeout=30) as client:
        size = where(client, 1, topic)[2]
        requested = not_kafkas_pick(kafka, client, n)
        f = base / f"{topic}.json"
        f.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [2, 3], "log_dirs": ["any", requested]}]}))
        pid = kafka.broker(3).pid
        assert pid is not None
        start = written(pid)
        args = ["--bootstrap-server", kafka.bootstrap, "--execute", "--reassignment-json-file", str(f)]
        if how == "kafka":
            kafka.tool("kafka-reassign-partitions.sh", *args)
        else:
            mover_reassign(REPO if how == "this tree" else Path(BEFORE or ""), base / f"state-{topic}", *args,
                           "--poll-interval", "0.2")
        wait_for(lambda: where(client, 3, topic)[:2] == (requested, None), 600,
                 f"{topic} in {requested} on broker 3", interval=0.2)
        return (written(pid) - start) / size, size


def main() -> None:
    home = kafka_home()
    if home is None:
        raise SystemExit("no Kafka (set KAFKA_HOME)")
    base = bench_root()
    hows = ["this tree", *(["before"] if BEFORE else []), "kafka"]
    with KafkaCluster(base / "kafka", home, brokers=3, log_dirs=2, controller=True, heap=HEAP,
                      props={"auto.leader.rebalance.enable": "false"}) as kafka:
        print(f"one partition of {MB} MB, brokers [1, 2] -> [2, 3], broker 3's replica in the dir Kafka would not "
              f"pick; bytes broker 3 wrote / partition size")
        n = 0
        for _ in range(RUNS):
            for how in hows:
                n += 1
                ratio, size = one_run(kafka, base, n, how)
                label = {"this tree": "mover-reassign (KIP-113 order)", "before": f"mover-reassign of {BEFORE}",
                         "kafka": "Kafka 3.7 kafka-reassign-partitions.sh"}[how]
                print(f"  {label:50s} {size / 1e6:6.1f} MB partition: {ratio:.2f}x written", flush=True)


if __name__ == "__main__":
    main()
