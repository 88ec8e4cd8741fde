"""`mover-log-dirs` as an operator runs it (the console script, no stdin), for the CLI and system tests and benches:
describe, execute a reassignment file, poll --verify until every replica is where the file says."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from mover.testing import prefork
from mover.testing.history import TP
from mover.testing.moverd import REPO
from mover.testing.wait import WAIT_S

SCRIPT = REPO / ".venv" / "bin" / "mover-log-dirs"
# --verify exit codes (docs/cli.md): 0 all done, 3 some replica still moving, anything else failed.
VERIFY_DONE = 0
VERIFY_IN_PROGRESS = 3
# How often --verify is polled; Kafka's tool is run by hand or a script every few seconds, a test wants less.
VERIFY_INTERVAL_S = 0.2
STORAGE_EXCEPTION = "org.apache.kafka.common.errors.KafkaStorageException"


def cli(*args: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"{SCRIPT} is missing: run .venv/bin/pip install -e '.[test]'"
    env = {k: v for k, v in os.environ.items() if k != "MOVER_DEBUG"}
    # A fixed terminal width, so --output table folds the same way on every machine.
    env["COLUMNS"] = "160"
    # The console script's own process, without its imports (mover/testing/prefork.py).
    return prefork.run([str(SCRIPT), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=timeout, cwd=REPO, env=env)


def describe_json(bootstrap: str, *extra: str) -> dict[str, Any]:
    """The whole --describe answer, {"version": 1, "brokers": [...]}, checking kafka-log-dirs.sh's three lines."""
    r = cli("--bootstrap-server", bootstrap, "--describe", *extra)
    assert r.returncode == 0, f"--describe failed ({r.returncode}): {r.stderr}"
    lines = r.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information", r.stdout
    assert lines[1].startswith("Received log directory information from brokers "), r.stdout
    assert len(lines) == 3, r.stdout
    return json.loads(lines[2])


def describe(bootstrap: str) -> dict[str, Any]:
    """kafka-log-dirs.sh --describe JSON of broker 0 (the only one): {"logDirs": [...]}."""
    brokers = describe_json(bootstrap)["brokers"]
    assert len(brokers) == 1, brokers
    return brokers[0]


def dir_errors(bootstrap: str) -> dict[str, str | None]:
    return {d["logDir"]: d["error"] for d in describe(bootstrap)["logDirs"]}


def placement(bootstrap: str) -> dict[TP, list[tuple[str, bool]]]:
    """Every copy of every partition --describe reports: (topic, partition) -> [(log dir, isFuture)]."""
    out: dict[TP, list[tuple[str, bool]]] = {}
    for d in describe(bootstrap)["logDirs"]:
        for p in d["partitions"]:
            topic, _, partition = p["partition"].rpartition("-")
            out.setdefault((topic, int(partition)), []).append((d["logDir"], p["isFuture"]))
    return out


def replica_dirs(bootstrap: str, topic: str, partition: int) -> dict[str, bool]:
    """{log dir: is_future} for every copy of the partition the broker reports."""
    return dict(placement(bootstrap).get((topic, partition), []))


def reassignment_file(path: Path, where: dict[TP, str], broker: int = 0) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": [broker], "log_dirs": [d]} for (t, p), d in sorted(where.items())]}))
    return path


def execute(bootstrap: str, path: Path) -> dict[TP, str]:
    """--execute; returns the rollback assignment it printed (each replica's dir before the move)."""
    r = cli("--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(path))
    assert r.returncode == 0, f"--execute failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    lines = r.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment", r.stdout
    assert any(line.startswith("Successfully started partition reassignment") for line in lines), r.stdout
    rollback = json.loads(lines[2])
    return {(p["topic"], p["partition"]): p["log_dirs"][0] for p in rollback["partitions"]}


@dataclass
class Verified:
    seconds: float  # from the first --verify to the one that said all done
    polls: int
    in_progress_polls: int  # how many said "still in progress": >0 means the move really ran alongside traffic


def wait_verified(bootstrap: str, path: Path, deadline_s: float = WAIT_S) -> Verified:
    started = time.monotonic()
    polls = in_progress = 0
    while True:
        r = cli("--bootstrap-server", bootstrap, "--verify", "--reassignment-json-file", str(path))
        polls += 1
        if r.returncode == VERIFY_DONE:
            assert "still in progress" not in r.stdout and " failed" not in r.stdout, r.stdout
            return Verified(time.monotonic() - started, polls, in_progress)
        assert r.returncode == VERIFY_IN_PROGRESS, f"--verify failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        assert "is still in progress" in r.stdout, r.stdout
        in_progress += 1
        assert time.monotonic() - started < deadline_s, f"moves not done after {deadline_s:g} s:\n{r.stdout}"
        time.sleep(VERIFY_INTERVAL_S)


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """CreateTopics through kafka-python's admin client, as a user would."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="system-test-admin")
    try:
        reply = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
        errors = {t["name"]: t["error_code"] for t in reply["topics"]} if isinstance(reply, dict) else {}
        assert not any(errors.values()), f"CreateTopics failed: {reply}"
    finally:
        admin.close()
