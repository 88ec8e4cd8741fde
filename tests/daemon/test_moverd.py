"""The real `moverd` process: SIGTERM mid-move, restart, resume; a second daemon on the same dirs is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS
from tests.moverd_process import REPO, Moverd
from tests.moves.records import read_records
from tests.server.harness import RawClient
from tests.storage.batches import make_batch

# Generous bounds for conditions that are polled; a test that waits this long has failed.
DEADLINE_S = 60.0


def wait_for(cond, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def write_partition(d: Path, tp: TopicPartition, batches: int) -> list[bytes]:
    """A partition dir written before the daemon starts (the daemon finds it at start-up, like Kafka's)."""
    d.mkdir(parents=True, exist_ok=True)
    log = Log.open(d / str(tp), tp, LogConfig(segment_bytes=1 << 20))
    values = []
    for b in range(batches):
        vs = [f"{b}-{i}".encode().ljust(1000, b"v") for i in range(10)]
        log.append(make_batch(vs))
        values += vs
    log.flush()
    log.close()
    return values


def move(port: int, tp: TopicPartition, dest: Path) -> int:
    with RawClient(port) as c:
        _, resp = c.call(ALTER_REPLICA_LOG_DIRS, 1, {"dirs": [
            {"path": str(dest), "topics": [{"name": tp.topic, "partitions": [tp.partition]}]}]})
    return resp["results"][0]["partitions"][0]["error_code"]


def move_bytes(path: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0


def test_sigterm_mid_move_keeps_the_move_and_the_next_start_resumes_it(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    values = write_partition(d1, tp, 400)  # ~4 MB
    daemon = Moverd(tmp_path, props={"intra.broker.throttled.rate": 1_000_000})
    with daemon:
        assert move(daemon.port, tp, d2) == 0
        wait_for(lambda: move_bytes(d2 / "t-0.move") > 0, "the copy to start")
        assert daemon.stop() == 0, daemon.log()
        # A clean stop mid-copy leaves the copy where it is, and the source untouched.
        assert (d2 / "t-0.move").is_dir()
        assert 0 < move_bytes(d2 / "t-0.move") < move_bytes(d1 / "t-0")
        assert [v for _, v in read_records(d1 / "t-0")] == values

        del daemon.props["intra.broker.throttled.rate"]  # unlimited: let the resumed move finish
        daemon.start()
        wait_for(lambda: (d2 / "t-0").is_dir() and not (d2 / "t-0.move").exists(), "the resumed move")
        wait_for(lambda: not any(n.startswith("t-0") for n in os.listdir(d1)), "the retired copy's deletion")
    assert [v for _, v in read_records(d2 / "t-0")] == values


def test_second_daemon_on_the_same_dirs_refuses_to_start(tmp_path: Path) -> None:
    with Moverd(tmp_path) as first:
        second = subprocess.run(
            [sys.executable, "-m", "mover.daemon", "--config", str(first.config)],
            cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=DEADLINE_S,
        )
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("moverd: ") and "lock" in lines[-1].lower(), second.stderr


def test_a_throttle_set_at_run_time_governs_the_moves_resumed_after_a_restart(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, tp, 400)
    with Moverd(tmp_path) as daemon:
        cli = [sys.executable, "-m", "mover.cli.log_dirs", "--bootstrap-server", daemon.bootstrap]
        subprocess.run([*cli, "--throttle", "200000"], cwd=REPO, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=DEADLINE_S)
        assert move(daemon.port, tp, d2) == 0
        wait_for(lambda: move_bytes(d2 / "t-0.move") > 0, "the copy to start")
        assert daemon.stop() == 0, daemon.log()
        before = len(daemon.log_file.read_text())
        daemon.start()
        second_run = daemon.log_file.read_text()[before:]
        # The dynamic throttle is in force before the interrupted move resumes, not once the listener is up.
        set_at = second_run.find("intra-broker throttle set to 200000 B/s")
        ready_at = second_run.find("1 moves resumed")
        assert 0 <= set_at < ready_at, second_run
        assert (d2 / "t-0.move").is_dir()
