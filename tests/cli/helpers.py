"""Running `mover-log-dirs` as the user does (the console script, no stdin) against a real moverd."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mover.client import Client
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from tests.moverd_process import REPO
from tests.storage.batches import make_batch

SCRIPT = REPO / ".venv" / "bin" / "mover-log-dirs"
# Bounds for polled conditions and for one command; a test that waits this long has failed.
DEADLINE_S = 60.0
RECORD_BYTES = 1000


def cli(*args: str, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MOVER_DEBUG"}
    env["COLUMNS"] = "160"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=timeout, cwd=REPO, env=env)


def wait_for(cond: Callable[[], Any], what: str, deadline_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + deadline_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def write_partition(log_dir: Path, tp: TopicPartition, batches: int) -> int:
    """A partition written before the daemon starts (it finds it at start-up, as Kafka does). Returns its size."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = Log.open(log_dir / str(tp), tp, LogConfig(segment_bytes=1 << 20))
    for b in range(batches):
        log.append(make_batch([f"{b}-{i}".encode().ljust(RECORD_BYTES, b"v") for i in range(10)]))
    log.flush()
    size = log.size
    log.close()
    return size


def describe_json(bootstrap: str, *extra: str) -> dict[str, Any]:
    r = cli("--bootstrap-server", bootstrap, "--describe", *extra)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    assert len(lines) == 3, r.stdout
    return json.loads(lines[2])


def replica_dirs(bootstrap: str, topic: str, partition: int) -> dict[str, bool]:
    """{log dir: is_future} for every copy of the partition the broker reports."""
    out = {}
    for broker in describe_json(bootstrap)["brokers"]:
        for d in broker["logDirs"]:
            for p in d["partitions"]:
                if p["partition"] == f"{topic}-{partition}":
                    out[d["logDir"]] = p["isFuture"]
    return out


def reassignment(path: Path, topic: str, partition: int, log_dir: str, broker: int = 0) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": [broker], "log_dirs": [log_dir]}]}))
    return path


def client(bootstrap: str) -> Client:
    return Client(bootstrap)
