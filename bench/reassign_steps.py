"""mover-reassign in KIP-435 steps against Kafka 3.7's own kafka-reassign-partitions.sh (all at once), side by side
on one real KRaft cluster (a controller and 10 brokers), with a producer (idempotent, acks=all) running throughout.

1. KIP-435's worked example on the cluster: one partition (1,2,3,4,5) -> (6,7,8,9,10) (the specification's
   (0..4) -> (5..9), ids shifted by one), max 2 replica movements: the replica lists the cluster went through, as
   mover-reassign read them from Metadata after each step, against the specification's.
2. The same reassignment (PARTS partitions x MB MB, replication factor 3, brokers 1-3 -> 4-6, a disjoint set) of
   four identical topics by: Kafka's tool without a throttle, Kafka's tool with --throttle, mover-reassign in steps
   (its default limits) without and with the same --throttle. Per run: total time, peak replication rate (bytes
   arriving on the target brokers, DescribeLogDirs every 0.5 s, 1 s windows), producer latency p50/p99 during it.

    .venv/bin/python bench/reassign_steps.py            # PARTS=12 MB=8 THROTTLE=10000000 by default (env to change)

Figures depend on the machine and on what else runs on it (a shared 2-core machine here): compare within one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import bench_root, pct
from mover.admin.client import Client, ClientError
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import list_reassignments, partition_states
from mover.admin.reassign.steps import plan_steps
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.kafka_home import kafka_home
from mover.testing.producers import PyProducer, prefill
from mover.testing.wait import wait_for

PARTS = int(os.environ.get("PARTS", "12"))
MB = int(os.environ.get("MB", "8"))
THROTTLE = int(os.environ.get("THROTTLE", "10000000"))
RECORD = 10_000
HEAP = os.environ.get("BENCH_KAFKA_HEAP", "-Xmx256m -Xms64m")  # 160m ran out in the fetchers
REPO = Path(__file__).resolve().parents[1]


def mover_reassign(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(state)}
    return subprocess.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=3600)


def write_file(path: Path, topic: str, targets: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in sorted(targets.items())]}))
    return path


def worked_example(kafka: KafkaCluster, base: Path) -> None:
    kafka.create_topic("example", assignment={0: [1, 2, 3, 4, 5]}, configs={"min.insync.replicas": 2})
    prefill(kafka.bootstrap, [("example", 0)], 200, pad=1000)
    f = write_file(base / "example.json", "example", {0: [6, 7, 8, 9, 10]})
    r = mover_reassign(base / "state", "--bootstrap-server", kafka.bootstrap, "--execute",
                       "--reassignment-json-file", str(f), "--max-replica-movements", "2", "--poll-interval", "0.2")
    assert r.returncode == 0, r.stdout + r.stderr
    observed = [(1, 2, 3, 4, 5)]
    for line in r.stdout.splitlines():
        if "done, replicas [" in line:
            observed.append(tuple(json.loads(line.split("replicas ")[1].split("]")[0] + "]")))
    spec = [(1, 2, 3, 4, 5)] + [s.target for s in plan_steps((1, 2, 3, 4, 5), (6, 7, 8, 9, 10), 2, 2)]
    print("worked example, KIP-435 (0..4)->(5..9) as broker ids 1..10:")
    for i, (o, s) in enumerate(zip(observed, spec, strict=False)):
        print(f"  step {i}: cluster {o}  specification {s}  {'same' if o == s else 'DIFFERENT'}")
    print(f"  observed == specification: {observed == spec}")


class RateSampler:
    """Bytes of `topic` on the target brokers every 0.5 s; the peak of 1 s windows."""

    def __init__(self, bootstrap: str, topic: str, brokers: list[int]) -> None:
        self.bootstrap, self.topic, self.brokers = bootstrap, topic, brokers
        self.points: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Client(self.bootstrap, timeout=30) as client:
            while not self._stop.is_set():
                total = 0
                try:
                    for b in self.brokers:
                        for d in describe_broker(client, b, {self.topic: list(range(PARTS))}):
                            total += sum(p.size for p in d.partitions)
                except ClientError:
                    for b in self.brokers:  # a broker too busy to answer in time: ask again on a fresh connection
                        try:
                            client.reconnect(b)
                        except ClientError:
                            pass
                    continue
                self.points.append((time.monotonic(), total))
                self._stop.wait(0.5)

    def __enter__(self) -> RateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def peak(self) -> float:
        best = 0.0
        for i, (t0, b0) in enumerate(self.points):
            for t1, b1 in self.points[i + 1:]:
                if t1 - t0 >= 1.0:
                    best = max(best, (b1 - b0) / (t1 - t0))
                    break
        return best


def wait_done(bootstrap: str, topic: str, targets: dict[int, list[int]]) -> None:
    def done() -> bool:
        with Client(bootstrap, timeout=10) as client:
            if any(tp[0] == topic for tp in list_reassignments(client)):
                return False
            states, _ = partition_states(client, [topic])
        return all(list(states[(topic, p)].replicas) == r for p, r in targets.items())
    wait_for(done, 3600, f"{topic} to reach its target", interval=0.5)


def one_run(kafka: KafkaCluster, base: Path, label: str, topic: str, how: str) -> dict[str, float]:
    kafka.create_topic(topic, assignment={p: [1, 2, 3] for p in range(PARTS)}, configs={"min.insync.replicas": 2})
    tps = [(topic, p) for p in range(PARTS)]
    prefill(kafka.bootstrap, tps, MB * (1 << 20) // RECORD, pad=RECORD)
    targets = {p: [4 + (p + i) % 3 for i in range(3)] for p in range(PARTS)}
    f = write_file(base / f"{topic}.json", topic, targets)
    producer = PyProducer(f"lat-{topic}", kafka.bootstrap, tps, rate=100, pad=200).start()
    time.sleep(2)  # the producer's warm-up (connections, metadata) stays out of the latency window
    started = time.monotonic()
    with RateSampler(kafka.bootstrap, topic, [4, 5, 6]) as rates:
        if how.startswith("steps"):
            extra = ["--throttle", str(THROTTLE)] if how == "steps-throttled" else []
            r = mover_reassign(base / "state", "--bootstrap-server", kafka.bootstrap, "--execute",
                               "--reassignment-json-file", str(f), *extra)
            assert r.returncode == 0, r.stdout + r.stderr
        else:
            args = ["--bootstrap-server", kafka.bootstrap, "--execute", "--reassignment-json-file", str(f)]
            if how == "kafka-throttled":
                args += ["--throttle", str(THROTTLE)]
            kafka.tool("kafka-reassign-partitions.sh", *args)
            wait_done(kafka.bootstrap, topic, targets)
            if how == "kafka-throttled":
                kafka.tool("kafka-reassign-partitions.sh", "--bootstrap-server", kafka.bootstrap, "--verify",
                           "--reassignment-json-file", str(f))
        ended = time.monotonic()
    producer.stop()
    acked, failed = producer.snapshot()
    lat = [a.at - a.sent for a in acked if a.sent is not None and started <= a.sent <= ended]
    return {"total_s": ended - started, "peak_mb_s": rates.peak() / 1e6, "p50_ms": pct(lat, 50) * 1000,
            "p99_ms": pct(lat, 99) * 1000, "failed": len(failed)}


def main() -> None:
    home = kafka_home()
    if home is None:
        print("no Kafka (set KAFKA_HOME)")
        return
    base = bench_root()
    with KafkaCluster(base / "kafka", home, brokers=10, log_dirs=1, controller=True, heap=HEAP,
                      props={"auto.leader.rebalance.enable": "false"}) as kafka:
        worked_example(kafka, base)
        print(f"\n{PARTS} partitions x {MB} MB, RF 3, brokers 1-3 -> 4-6; producer 100 records/s throughout")
        results = {}
        for label, topic, how in (("Kafka 3.7 tool, all at once", "allatonce", "kafka"),
                                  (f"Kafka 3.7 tool, --throttle {THROTTLE}", "throttled", "kafka-throttled"),
                                  ("mover-reassign steps (5 partitions, 1 replica, 2 leaders)", "steps", "steps"),
                                  (f"mover-reassign steps + --throttle {THROTTLE}", "stepsthrottled",
                                   "steps-throttled")):
            results[how] = r = one_run(kafka, base, label, topic, how)
            print(f"  {label:60s} total {r['total_s']:7.1f} s  peak {r['peak_mb_s']:7.1f} MB/s  "
                  f"producer p50 {r['p50_ms']:7.1f} ms p99 {r['p99_ms']:7.1f} ms  failed sends {r['failed']:.0f}",
                  flush=True)
        a, s = results["kafka"], results["steps"]
        print(f"\nsteps / all-at-once: total time x{s['total_s'] / a['total_s']:.2f}, "
              f"peak rate x{s['peak_mb_s'] / max(a['peak_mb_s'], 1e-9):.2f}, "
              f"p99 latency x{s['p99_ms'] / max(a['p99_ms'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
