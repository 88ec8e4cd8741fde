"""A real daemon process driven through its Python API, for tests that kill it.

`python -m tests.driver --config server.properties` runs the LogManager exactly as moverd does (recovery, move
pool, housekeeping) and takes one JSON command per line on stdin, answering one JSON line on stdout:

    {"op": "create", "topic": "t", "partitions": 2, "dir": "/abs"} -> {"ok": true}  (dir optional)
    {"op": "append", "tp": "t-0", "values": ["a", "b"]}        -> {"ok": true, "first": 0, "last": 1}
    {"op": "move", "tp": "t-0", "dir": "/abs/dir"}             -> {"ok": true, "error_code": 0}
    {"op": "wait_moves", "timeout": 30}                        -> {"ok": true, "idle": true}
    {"op": "throttle", "rate": 1000000}                        -> {"ok": true}
    {"op": "describe"}                                         -> {"ok": true, "dirs": [...]}
    {"op": "stop"}                                             -> clean shutdown, then exit 0

It prints {"ready": true} once started. Crash points come from MOVERD_CRASH_AT (mover/faults.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from mover.config import BrokerConfig
from mover.log_manager import LogManager
from mover.storage.names import TopicPartition
from tests.storage.batches import make_batch


def parse_tp(s: str) -> TopicPartition:
    topic, _, part = s.rpartition("-")
    return TopicPartition(topic, int(part))


def handle(manager: LogManager, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    if op == "create":
        if "dir" in cmd:
            for p in range(cmd["partitions"]):
                manager.remembered[TopicPartition(cmd["topic"], p)] = Path(cmd["dir"])
        manager.create_topic(cmd["topic"], cmd["partitions"])
        return {"ok": True}
    if op == "append":
        batch = make_batch([v.encode() for v in cmd["values"]])
        info = manager.append(parse_tp(cmd["tp"]), batch)
        return {"ok": True, "first": info.first_offset, "last": info.last_offset}
    if op == "move":
        return {"ok": True, "error_code": manager.alter_replica_log_dir(parse_tp(cmd["tp"]), cmd["dir"])}
    if op == "wait_moves":
        deadline = time.monotonic() + cmd.get("timeout", 60)
        while manager.moves() and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"ok": True, "idle": not manager.moves()}
    if op == "throttle":
        manager.set_throttle(cmd["rate"])
        return {"ok": True}
    if op == "describe":
        return {"ok": True, "dirs": [
            {"path": str(d.path), "error_code": d.error_code,
             "partitions": [{"tp": f"{topic}-{row[0]}", "size": row[1], "is_future": row[3]}
                            for topic, rows in d.topics.items() for row in rows]}
            for d in manager.describe_log_dirs()]}
    if op == "pending_deletes":
        return {"ok": True, "paths": [str(p) for p in manager.pending_deletes()]}
    raise ValueError(f"unknown op {op}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    manager = LogManager(BrokerConfig.from_file(args.config))
    manager.startup()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd["op"] == "stop":
            break
        try:
            reply = handle(manager, cmd)
        except Exception as e:  # report to the test; the daemon keeps running
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "code": getattr(e, "code", None)}
        print(json.dumps(reply), flush=True)
    manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
