"""A real daemon process driven through its Python API, for tests that kill it.

`python -m mover.testing.driver --config server.properties` runs the LogManager exactly as moverd does (recovery, move
pool, housekeeping) and takes one JSON command per line on stdin, answering one JSON line on stdout:

    {"op": "create", "topic": "t", "partitions": 2, "dir": "/abs"} -> {"ok": true}  (dir optional)
    {"op": "append", "tp": "t-0", "values": ["a", "b"]}        -> {"ok": true, "first": 0, "last": 1}
    {"op": "move", "tp": "t-0", "dir": "/abs/dir"}             -> {"ok": true, "error_code": 0}
    {"op": "wait_moves", "timeout": 30}                        -> {"ok": true, "idle": true}
    {"op": "throttle", "rate": 1000000}                        -> {"ok": true}
    {"op": "describe"}                                         -> {"ok": true, "dirs": [...]}
    {"op": "stop"}                                             -> clean shutdown, then exit 0

It prints {"ready": true} once started. Crash points come from MOVERD_CRASH_AT (mover/faults.py).
`Driver` starts one such process and talks to it; `write_config` writes the small-segment server.properties the crash
tests use.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.storage.names import TopicPartition
from mover.testing import log_manager, prefork
from mover.testing.batches import make_batch
from mover.testing.moverd import REPO


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
        return {"ok": True, "error_code": log_manager.alter_replica_log_dir(manager, parse_tp(cmd["tp"]), cmd["dir"])}
    if op == "wait_moves":
        deadline = time.monotonic() + cmd.get("timeout", 60)
        while log_manager.moves(manager) and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"ok": True, "idle": not log_manager.moves(manager)}
    if op == "throttle":
        log_manager.set_throttle(manager, cmd["rate"])
        return {"ok": True}
    if op == "describe":
        return {"ok": True, "dirs": [
            {"path": str(d.path), "error_code": d.error_code,
             "partitions": [{"tp": f"{topic}-{row[0]}", "size": row[1], "is_future": row[3]}
                            for topic, rows in d.topics.items() for row in rows]}
            for d in manager.describe_log_dirs()]}
    if op == "pending_deletes":
        return {"ok": True, "paths": [str(p) for p in log_manager.pending_deletes(manager)]}
    raise ValueError(f"unknown op {op}")


class Driver:
    def __init__(self, config: Path, crash_at: str | None = None, prefix: tuple[str, ...] = (),
                 pause_at: str | None = None) -> None:
        """`crash_at`, `pause_at`: MOVERD_CRASH_AT and MOVERD_PAUSE_AT (`<point>:<seconds>`) of mover/faults.py."""
        env = dict(os.environ)
        env.pop("MOVERD_CRASH_AT", None)
        env.pop("MOVERD_PAUSE_AT", None)
        if crash_at:
            env["MOVERD_CRASH_AT"] = crash_at
        if pause_at:
            env["MOVERD_PAUSE_AT"] = pause_at
        # Through the zygote (mover/testing/prefork.py) unless a prefix such as setpriv needs an exec of its own.
        self.proc = prefork.Popen(
            [*prefix, sys.executable, "-m", "mover.testing.driver", "--config", str(config)],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        ready = self._read()
        assert ready == {"ready": True}, ready

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(f"driver exited with {self.proc.wait(10)}")
        return json.loads(line)

    def call(self, **cmd: Any) -> Any:
        reply = self.try_call(**cmd)
        assert reply.get("ok"), reply
        return reply

    def try_call(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0

    def wait_dead(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def call_then_die(self, **cmd: Any) -> int:
        """Send a command that makes the daemon kill itself; the answer may or may not come out first, as the
        crash point runs on a move thread. Returns the exit status."""
        try:
            reply = self.try_call(**cmd)
            assert reply.get("ok") and reply.get("error_code") == 0, reply
        except EOFError:
            pass
        return self.wait_dead()


def write_config(tmp_path: Path, **extra: Any) -> tuple[Path, list[Path]]:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    props = {"log.dirs": ",".join(map(str, dirs)), "log.segment.bytes": 40_000,
             "log.segment.delete.delay.ms": 100, "log.flush.interval.ms": 3_600_000}
    props.update(extra)
    conf = tmp_path / "server.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return conf, dirs


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
