"""Moves asked through ZooKeeper on a cluster of 3 moverd brokers, against the same moves asked over the wire.

1. Latency, one move at a time (small partitions, so the copy itself is short):
   - znode: the bench writes /admin/reassign_partitions with one entry; "start" = from that write to the broker's
     "queued move" log line; "cleanup" = from the broker's "moved" log line to the znode's deletion by the elected
     broker (seen through a kazoo watch).
   - anchor, the same moves over the wire: AlterReplicaLogDirs sent to the broker; "start" = from the send to the
     "queued move" line; "end seen" = from the "moved" line to a client polling DescribeLogDirs every 20 ms seeing
     the replica in place (what mover-log-dirs --verify does, at a faster poll).
   p50 / p99 of each, and the ratio znode / wire.
2. ZooKeeper restart under 100 queued moves (one move thread per broker, throttled): the reassignment is written,
   ZooKeeper is stopped once moves run and started again 2 s later. "time to resume" = from ZooKeeper answering
   again to every broker's status znode being updated again; "moves lost" = entries not carried out once the znode
   is gone (goal 0).
Log timestamps have millisecond resolution. Usage: python bench/zk_moves.py [--moves 100]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402
from kazoo.retry import KazooRetry  # noqa: E402

from bench.common import bench_root, pct  # noqa: E402
from mover.storage.names import TopicPartition  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import raw_call  # noqa: E402
from mover.testing.records import write_partition  # noqa: E402
from mover.testing.zookeeper import ZooKeeperServer  # noqa: E402
from mover.wire.messages import (  # noqa: E402
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    INCREMENTAL_ALTER_CONFIGS,
)

BROKERS = 3
REASSIGN = "/admin/reassign_partitions"


def log_times(b: Moverd) -> dict[str, dict[str, list[float]]]:
    """{partition: {"queued": [t...], "moved": [t...]}} from the broker's log, in order."""
    out: dict[str, dict[str, list[float]]] = {}
    for line in b.log_file.read_text(errors="replace").splitlines():
        m = re.match(r"^(\S+ \S+) INFO \S+: queued move of (\S+) from", line)
        kind = "queued"
        if m is None:
            m = re.match(r"^(\S+ \S+) INFO \S+: moved (\S+) from", line)
            kind = "moved"
        if m is None:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.setdefault(m.group(2), {"queued": [], "moved": []})[kind].append(t)
    return out


def wait(cond, timeout: float = 120.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("bench condition not met")
        time.sleep(0.005)


def in_place(b: Moverd, tp: TopicPartition, dest: str) -> bool:
    body = raw_call(b.port, DESCRIBE_LOG_DIRS, 1, {"topics": [{"topic": tp.topic, "partitions": [tp.partition]}]})
    where = [(r["log_dir"], p["is_future_key"]) for r in body["results"] for t in r["topics"] for p in t["partitions"]]
    return where == [(dest, False)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=100)
    ap.add_argument("--restart-only", action="store_true", help="only the ZooKeeper restart part")
    args = ap.parse_args()
    root = bench_root()
    per_broker = -(-args.moves // BROKERS)
    brokers: list[Moverd] = []
    try:
        with ZooKeeperServer(root / "zk") as zk_server:
            connect = f"{zk_server.connect_string}/bench"
            for i in range(BROKERS):
                base = root / f"b{i}"
                for p in range(per_broker):
                    write_partition(base / "d1", TopicPartition("t", i * per_broker + p), 4)
                brokers.append(Moverd(base, props={
                    "broker.id": i, "zookeeper.connect": connect, "zookeeper.session.timeout.ms": 4000,
                    "num.replica.alter.log.dirs.threads": 1}).start())
            # The bench's own client reconnects as fast as the brokers, so it does not hide their resume time.
            zk = KazooClient(hosts=connect, connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.25))
            zk.start(30)
            try:
                moves = [(i * per_broker + p, i) for p in range(per_broker) for i in range(BROKERS)][:args.moves]
                if not args.restart_only:
                    znode_phase(zk, brokers, moves)
                    wire_phase(brokers, moves)
                    report(brokers, moves)
                restart_phase(zk, zk_server, brokers, moves)
            finally:
                zk.stop()
                zk.close()
                for b in brokers:
                    if b.proc is not None:
                        b.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


TIMES: dict[str, list[float]] = {"zk_start": [], "zk_cleanup": [], "wire_start": [], "wire_end_seen": []}
SENT: dict[str, list[float]] = {}
SEEN: dict[str, list[float]] = {}


def znode_phase(zk: KazooClient, brokers: list[Moverd], moves: list[tuple[int, int]]) -> None:
    for partition, broker in moves:
        dest = str(brokers[broker].dirs[1])
        gone = threading.Event()
        entry = {"topic": "t", "partition": partition, "replicas": [broker], "log_dirs": [dest]}
        t0 = time.time()
        zk.create(REASSIGN, json.dumps({"version": 1, "partitions": [entry]}).encode(), makepath=True)

        def watch(event: object, gone: threading.Event = gone) -> None:
            gone.set()

        if zk.exists(REASSIGN, watch=watch) is None:
            gone.set()
        assert gone.wait(60), "reassignment not cleaned up"
        SENT.setdefault(f"t-{partition}", []).append(t0)
        SEEN.setdefault(f"t-{partition}", []).append(time.time())


def wire_phase(brokers: list[Moverd], moves: list[tuple[int, int]]) -> None:
    for partition, broker in moves:
        b = brokers[broker]
        dest = str(b.dirs[0])
        t0 = time.time()
        reply = raw_call(b.port, ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
            {"path": dest, "topics": [{"name": "t", "partitions": [partition]}]}]})
        assert reply["results"][0]["partitions"][0]["error_code"] == 0, reply
        tp = TopicPartition("t", partition)
        while not in_place(b, tp, dest):
            time.sleep(0.02)
        SENT[f"t-{partition}"].append(t0)
        SEEN[f"t-{partition}"].append(time.time())


def report(brokers: list[Moverd], moves: list[tuple[int, int]]) -> None:
    logs: dict[str, dict[str, list[float]]] = {}
    for b in brokers:
        logs.update(log_times(b))
    for partition, _broker in moves:
        name = f"t-{partition}"
        queued, moved = logs[name]["queued"], logs[name]["moved"]
        TIMES["zk_start"].append(queued[0] - SENT[name][0])
        TIMES["zk_cleanup"].append(SEEN[name][0] - moved[0])
        TIMES["wire_start"].append(queued[1] - SENT[name][1])
        TIMES["wire_end_seen"].append(SEEN[name][1] - moved[1])
    ms = {k: (pct(v, 50) * 1000, pct(v, 99) * 1000) for k, v in TIMES.items()}
    print(f"{len(moves)} moves on {BROKERS} brokers, one at a time")
    print(f"  write -> move start   znode p50 {ms['zk_start'][0]:7.1f} ms  p99 {ms['zk_start'][1]:7.1f} ms   "
          f"wire p50 {ms['wire_start'][0]:6.1f} ms  p99 {ms['wire_start'][1]:6.1f} ms   "
          f"ratio p50 {ms['zk_start'][0] / max(ms['wire_start'][0], 0.1):.1f}x")
    print(f"  move end -> cleaned   znode p50 {ms['zk_cleanup'][0]:7.1f} ms  p99 {ms['zk_cleanup'][1]:7.1f} ms   "
          f"wire (poll 20 ms) p50 {ms['wire_end_seen'][0]:6.1f} ms  p99 {ms['wire_end_seen'][1]:6.1f} ms   "
          f"ratio p50 {ms['zk_cleanup'][0] / max(ms['wire_end_seen'][0], 0.1):.1f}x")


def restart_phase(zk: KazooClient, server: ZooKeeperServer, brokers: list[Moverd],
                  moves: list[tuple[int, int]]) -> None:
    for b in brokers:
        # Throttled so the moves queue up behind one thread per broker.
        raw_call(b.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 4, "resource_name": str(brokers.index(b)), "configs": [{
                "name": "replica.alter.log.dirs.io.max.bytes.per.second", "config_operation": 0,
                "value": "400000"}]}], "validate_only": False})
    entries = [{"topic": "t", "partition": p, "replicas": [b], "log_dirs": [str(brokers[b].dirs[1])]}
               for p, b in moves]
    zk.create(REASSIGN, json.dumps({"version": 1, "partitions": entries}).encode(), makepath=True)
    status_root = "/admin/reassign_partitions_status"

    def copying() -> bool:
        try:
            return any(b"copying" in zk.get(f"{status_root}/{r}/{c}")[0]
                       for r in zk.get_children(status_root) for c in zk.get_children(f"{status_root}/{r}"))
        except NoNodeError:
            return False

    wait(copying)
    server.stop()
    time.sleep(2)
    server.start()
    t_back = time.time()
    wait(lambda: zk.connected)
    latest = max(int(r) for r in zk.get_children(status_root))

    def all_reporting() -> bool:
        children = zk.get_children(f"{status_root}/{latest}")
        mtimes = [zk.exists(f"{status_root}/{latest}/{c}").mtime / 1000 for c in children]
        return len(children) == BROKERS and all(m >= t_back for m in mtimes)

    wait(all_reporting)
    resumed = time.time() - t_back
    reconnected = []
    for b in brokers:
        times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                 for line in b.log_file.read_text(errors="replace").splitlines()
                 if "mover.zk.client: ZooKeeper connected" in line]
        reconnected.append(min(t for t in times if t >= t_back - 0.001) - t_back)
    wait(lambda: zk.exists(REASSIGN) is None, timeout=300)
    lost = sum(not in_place(brokers[b], TopicPartition("t", p), str(brokers[b].dirs[1])) for p, b in moves)
    print(f"ZooKeeper restart under {len(moves)} queued moves: every broker reconnected "
          f"{max(reconnected) * 1000:.0f} ms and its status rewritten (seen by a polling client) "
          f"{resumed * 1000:.0f} ms after ZooKeeper answered again; moves lost {lost}")


if __name__ == "__main__":
    main()
