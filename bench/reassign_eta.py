"""How close `mover-reassign --execute --dry-run`'s estimate comes to the run it estimates (issue 34, item 7).

A real Kafka 3.7 KRaft cluster (a controller and four brokers, one log dir each, at kafka-server-start.sh's own 1 GB
heap), one topic per throttle of PARTS partitions x MB MB, replication factor 2 on brokers 1-2, moved to brokers 3-4
in KIP-435 steps. For each throttle: the `Estimate:` line of `--execute --dry-run --throttle T`, then the wall time
of `--execute --throttle T` (which runs the steps to the end), and the error of the estimate against it.

    .venv/bin/python bench/reassign_eta.py          # PARTS=6 MB=16, throttles 2 MB/s and 6 MB/s (env THROTTLES)

The estimate counts only the copies at the throttle; the gaps between steps (the tool's poll, the controller's
metadata propagation, leader elections) are not in it, so it is low by about a step's overhead per batch. Figures
depend on the machine's load (a shared 2-core machine): compare within one run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.testing.kafka_cluster import KafkaCluster  # noqa: E402
from mover.testing.kafka_home import kafka_home  # noqa: E402
from mover.testing.kafka_node import KAFKA_DEFAULT_PROPS, KAFKA_START_SCRIPT_HEAP  # noqa: E402
from mover.testing.producers import prefill  # noqa: E402

PARTS = int(os.environ.get("PARTS", "6"))
MB = int(os.environ.get("MB", "16"))
THROTTLES = [int(t) for t in os.environ.get("THROTTLES", "2000000,6000000").split(",")]
RECORD = 10_000
# The console script beside this interpreter: the tool as operators run it.
TOOL = str(Path(sys.executable).parent / "mover-reassign")
_DURATION = re.compile(r"about ((?:(\d+) h )?(?:(\d+) min )?(?:(\d+) s)?) at the throttle")


def parse_eta(text: str) -> float:
    m = _DURATION.search(text)
    if m is None:
        raise SystemExit(f"no estimate in the dry run's output:\n{text}")
    h, mins, s = (int(g) if g else 0 for g in m.groups()[1:])
    return h * 3600 + mins * 60 + s


def reassign(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SystemExit(f"mover-reassign {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def one(kafka: KafkaCluster, base: Path, throttle: int) -> tuple[float, float, str]:
    topic = f"eta-{throttle}"
    kafka.create_topic(topic, assignment={p: [1 + p % 2, 1 + (p + 1) % 2] for p in range(PARTS)})
    prefill(kafka.bootstrap, [(topic, p) for p in range(PARTS)], MB * (1 << 20) // RECORD, pad=RECORD)
    f = base / f"{topic}.json"
    f.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": [3 + p % 2, 3 + (p + 1) % 2]} for p in range(PARTS)]}))
    common = ["--bootstrap-server", kafka.bootstrap, "--reassignment-json-file", str(f), "--throttle", str(throttle)]
    dry = reassign("--execute", "--dry-run", *common)
    estimate = parse_eta(dry.stdout)
    line = next(x for x in dry.stdout.splitlines() if x.startswith("Estimate:"))
    t0 = time.monotonic()
    reassign("--execute", *common)
    return estimate, time.monotonic() - t0, line


def main() -> None:
    home = kafka_home()
    if home is None:
        print("no Kafka (set KAFKA_HOME)")
        return
    base = bench_root()
    with KafkaCluster(base / "kafka", home, brokers=4, log_dirs=1, controller=True, heap=KAFKA_START_SCRIPT_HEAP,
                      props={**KAFKA_DEFAULT_PROPS, "auto.leader.rebalance.enable": "false"}) as kafka:
        print(f"{PARTS} partitions x {MB} MB, RF 2, brokers 1-2 -> 3-4, Kafka 3.7 at its 1 GB heap; "
              f"load average {os.getloadavg()[0]:.1f} at the start")
        for throttle in THROTTLES:
            estimate, actual, line = one(kafka, base, throttle)
            print(f"  throttle {throttle:>10,} B/s: {line}")
            print(f"    estimate {estimate:6.0f} s, measured {actual:6.1f} s, estimate / measured "
                  f"{estimate / actual:.2f} (error {abs(estimate - actual) / actual:.0%})", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
