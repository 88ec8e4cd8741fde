"""CreateTopics and DeleteTopics of 1,000 and 10,000 partitions through a real moverd (raw requests, 4 log dirs).

Prints each time, the 10,000 / 1,000 ratio (issue 8: under 10 s for 10,000, ratio no worse than 11) and, side by side
in the same run, an anchor: the bare file-system work of the same partitions (mkdir, create an empty segment file,
one syncfs per log dir; then rename each dir, fsync each log dir) done by this process,
so the ratio to it shows our overhead.
Reference from the issue: Apache Kafka 2.3 created 10,000 partitions in 112 s on the same kind of machine.
Usage: python bench/create_delete_topics.py [--small 1000] [--large 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_root  # noqa: E402
from mover.storage.files import fsync_dir, sync_filesystem  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import RawClient  # noqa: E402
from mover.wire.messages import CREATE_TOPICS, DELETE_TOPICS  # noqa: E402

KAFKA_23_CREATE_10000_S = 112.0


def _create(c: RawClient, name: str, n: int) -> float:
    t0 = time.perf_counter()
    body = c.call(CREATE_TOPICS, 4, {"topics": [{"name": name, "num_partitions": n, "replication_factor": 1,
                                                 "assignments": [], "configs": []}],
                                     "timeout_ms": 600000, "validate_only": False})[1]
    took = time.perf_counter() - t0
    assert body["topics"][0]["error_code"] == 0, body
    return took


def _delete(c: RawClient, name: str) -> float:
    t0 = time.perf_counter()
    body = c.call(DELETE_TOPICS, 4, {"topic_names": [name], "timeout_ms": 600000})[1]
    took = time.perf_counter() - t0
    assert body["responses"][0]["error_code"] == 0, body
    return took


def _anchor(dirs: list[Path], n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    made = []
    for p in range(n):
        d = dirs[p % len(dirs)] / f"anchor{n}-{p}"
        d.mkdir()
        os.close(os.open(d / "00000000000000000000.log", os.O_CREAT | os.O_RDWR, 0o644))
        made.append(d)
    for d in dirs:
        sync_filesystem(d)  # what moverd does for a create of more than 64 partitions
    create = time.perf_counter() - t0
    t0 = time.perf_counter()
    for d in made:
        os.rename(d, d.with_name(d.name + ".delete"))
    for d in dirs:
        fsync_dir(d)
    took = time.perf_counter() - t0
    for d in made:
        shutil.rmtree(d.with_name(d.name + ".delete"))
    return create, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=10_000)
    args = ap.parse_args()
    root = bench_root()
    dirs = [root / f"d{i}" for i in range(1, 5)]
    try:
        with Moverd(root, dirs=dirs, props={"log.segment.delete.delay.ms": 60000}) as d, RawClient(d.port) as c:
            c.sock.settimeout(600)
            times = {}
            for n in (args.small, args.large):
                times[("create", n)] = _create(c, f"t{n}", n)
                times[("delete", n)] = _delete(c, f"t{n}")
        anchors = {n: _anchor(dirs, n) for n in (args.small, args.large)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    s, lg = args.small, args.large
    for op, i in (("create", 0), ("delete", 1)):
        ours_s, ours_l = times[(op, s)], times[(op, lg)]
        anc_s, anc_l = anchors[s][i], anchors[lg][i]
        print(f"{op:6} {s:>6} partitions: {ours_s:6.2f} s, bare fs {anc_s:6.2f} s, ratio {ours_s / anc_s:5.1f}")
        print(f"{op:6} {lg:>6} partitions: {ours_l:6.2f} s, bare fs {anc_l:6.2f} s, ratio {ours_l / anc_l:5.1f}")
        print(f"{op:6} {lg} / {s} time ratio: {ours_l / ours_s:.1f} (goal <= {1.1 * lg / s:.0f}; bare fs "
              f"{anc_l / anc_s:.1f})")
    print(f"create {lg}: {times[('create', lg)]:.2f} s (goal < 10 s); vs Apache Kafka 2.3's "
          f"{KAFKA_23_CREATE_10000_S:.0f} s: {times[('create', lg)] / KAFKA_23_CREATE_10000_S:.3f}")


if __name__ == "__main__":
    main()
