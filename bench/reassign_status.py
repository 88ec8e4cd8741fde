"""How long a second machine waits for the cluster's record of a 1,000-partition reassignment (issue 34): one run
claims 1,000 partitions on a moverd, heartbeats and records per-replica progress as a long run does, then a fresh
store (another machine: its own connection, nothing on disk) lists the requests and reads the request, as
`mover-reassign --list` and `--progress --request N` do before they ask the cluster where partitions stand.

Usage: python bench/reassign_status.py [--partitions 1000] [--heartbeats 360] [--progress 60]
(360 heartbeats: an hour at the default period; 60 progress records: one a minute.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import scratch_root  # noqa: E402
from mover.admin.client import Client  # noqa: E402
from mover.admin.reassign.status_store import StatusStore  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--partitions", type=int, default=1000)
    p.add_argument("--heartbeats", type=int, default=360)
    p.add_argument("--progress", type=int, default=60)
    args = p.parse_args()
    with scratch_root() as root:
        return _run(args, root)


def _run(args: argparse.Namespace, root: Path) -> int:
    with Moverd(root) as d, Client(d.bootstrap) as writer_client, Client(d.bootstrap) as reader_client:
        writer = StatusStore(writer_client, tool="bench")
        parts = [{"topic": f"topic-{i // 10}", "partition": i % 10, "replicas": [1, 2, 3]}
                 for i in range(args.partitions)]
        t0 = time.perf_counter()
        rid, _ = writer.claim(parts)
        claim_s = time.perf_counter() - t0
        for _ in range(args.heartbeats):
            writer.heartbeat(rid)
        progress = [{"topic": q["topic"], "partition": q["partition"], "broker": 3, "numerator": 1 << 20,
                     "denominator": 1 << 30} for q in parts]
        for _ in range(args.progress):
            writer.record_progress(rid, progress)
        reader = StatusStore(reader_client, tool="bench-reader")
        t0 = time.perf_counter()
        listed = reader.list()
        list_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = reader.get(rid)
        get_s = time.perf_counter() - t0
        assert len(got.partitions) == args.partitions and listed
        assert len(got.progress) == (args.partitions if args.progress else 0)
        print(f"claim of {args.partitions} partitions: {claim_s * 1000:.0f} ms; log after {args.heartbeats} "
              f"heartbeats and {args.progress} progress records: second machine's list {list_s * 1000:.0f} ms, "
              f"get {get_s * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
