"""--execute, --verify, --move and --cancel against a real moverd, checked on disk."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mover.storage.names import TopicPartition
from mover.testing.fake_kafka import growing_copy_broker
from mover.testing.log_dirs_tool import cli, reassignment_file, replica_dirs
from mover.testing.moverd import Moverd
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS

TP = TopicPartition("big", 0)


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_execute_then_verify_until_complete(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 200)
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[:5] == [
            "Current partition replica assignment", "",
            compact({"version": 1, "partitions": [
                {"topic": "big", "partition": 0, "replicas": [0], "log_dirs": [str(d1)]}]}),
            "",
            "Save this to use as the --reassignment-json-file option during rollback",
        ]
        # Kafka 3.x's lines, then the request id moverd gave (KIP-179).
        assert lines[5:7] == ["Successfully started partition reassignment for big-0",
                              "Successfully started log directory move for: big-0-0"]
        assert re.fullmatch(r"Request id: \d+ \(broker 0\)", lines[7]), lines
        assert len(lines) == 8

        def verified() -> str | None:
            v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f))
            out = v.stdout.splitlines()
            assert out[:2] == ["Status of partition reassignment:",
                               "Reassignment of partition big-0 is completed."], v.stdout
            if v.returncode == 3:
                assert out[2:] == ["Reassignment of replica big-0-0 is still in progress."]
                return None
            assert v.returncode == 0, (v.stdout, v.stderr)
            return "\n".join(out[2:])

        assert wait_for(verified, message="--verify to report completion") == (
            "Reassignment of replica big-0-0 completed successfully.\n"
            "Clearing broker-level throttles on broker 0\n"
            "Clearing topic-level throttles on topic big")
        assert (d2 / "big-0").is_dir()
        assert not (d2 / "big-0.move").exists()
        assert replica_dirs(d.bootstrap, "big", 0) == {str(d2): False}


def test_verify_while_throttled_is_in_progress_and_other_cases(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 200)  # ~2 MB
    write_partition(d1, TopicPartition("small", 0), 1)
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": 100_000}) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        assert cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f)).returncode == 0
        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f))
        assert v.returncode == 3, v.stdout
        assert "Reassignment of replica big-0-0 is still in progress." in v.stdout.splitlines()

        # Asked to verify a different destination than the running move's.
        other = reassignment_file(tmp_path / "o.json", {("big", 0): str(d1)})
        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(other))
        assert v.returncode == 1
        assert f"Partition big-0 on broker 0 is being moved to log dir {d2} instead of {d1}." in v.stdout.splitlines()

        # A replica that is elsewhere and not moving.
        small = reassignment_file(tmp_path / "s.json", {("small", 0): str(d2)})
        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(small))
        assert v.returncode == 1
        assert f"Partition small-0 on broker 0 is not being moved from log dir {d1} to {d2}." in v.stdout.splitlines()


def test_execute_errors_are_one_line(tmp_path: Path) -> None:
    d1 = tmp_path / "d1"
    write_partition(d1, TP, 1)
    with Moverd(tmp_path) as d:
        def err(f: Path) -> str:
            r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f))
            assert r.returncode == 1, r.stdout
            assert r.stdout == ""  # nothing was started, nothing claimed
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in r.stderr
            return lines[0]

        assert "is not a log dir of broker 0" in err(reassignment_file(tmp_path / "a.json", {("big",
                                                                                              0): "/nonexistent"}))
        assert "non-existent partitions: nope-0" in err(reassignment_file(tmp_path / "b.json", {("nope", 0): str(d1)}))
        assert "non-existent partitions: big-7" in err(reassignment_file(tmp_path / "c.json", {("big", 7): str(d1)}))
        assert "non-existent brokerIDs: 3" in err(reassignment_file(tmp_path / "d.json", {("big", 0): str(d1)},
                                                                    broker=3))
        assert not (tmp_path / "d2" / "big-0.move").exists()


def test_execute_to_the_current_dir_is_a_no_op(tmp_path: Path) -> None:
    d1 = tmp_path / "d1"
    write_partition(d1, TP, 1)
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d1)})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 0, r.stderr
        assert "Request id" not in r.stdout  # no move was started, so no request
        v = cli("--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file", str(f))
        assert v.returncode == 0
        assert "Reassignment of replica big-0-0 completed successfully." in v.stdout.splitlines()


def test_move_with_kafka_log_dirs_assignment_file(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 20)
    with Moverd(tmp_path) as d:
        f = tmp_path / "m.json"
        f.write_text(json.dumps({"version": 1, "partitions": [{"topic": "big", "partition": 0, "log_dir": str(d2)}]}))
        r = cli("--bootstrap-server", d.bootstrap, "--move", "--broker", "0", "--assignment", str(f))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[2] == compact({"version": 1, "partitions": [{"topic": "big", "partition": 0, "log_dir": str(d1)}]})
        assert "Successfully started moving replicas." in lines
        wait_for(lambda: replica_dirs(d.bootstrap, "big", 0) == {str(d2): False}, message="the move")
        assert (d2 / "big-0").is_dir()

        bad = cli("--bootstrap-server", d.bootstrap, "--move", "--broker", "4", "--assignment", str(f))
        assert bad.returncode == 1 and "broker 4 is not in the cluster" in bad.stderr


def test_cancel_leaves_no_move_dir(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 200)
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": 100_000}) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        assert cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f)).returncode == 0
        wait_for(lambda: (d2 / "big-0.move").exists(), message="the copy to start")
        r = cli("--bootstrap-server", d.bootstrap, "--cancel", "--reassignment-json-file", str(f))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"Cancelled the move of replica big-0-0 to {d2}; it stays in {d1}"
        wait_for(lambda: not (d2 / "big-0.move").exists(), message="the cancelled copy to be deleted")
        assert replica_dirs(d.bootstrap, "big", 0) == {str(d1): False}
        assert (d1 / "big-0").is_dir()
        # Nothing left to cancel.
        r = cli("--bootstrap-server", d.bootstrap, "--cancel", "--reassignment-json-file", str(f))
        assert r.returncode == 0
        assert r.stdout.strip() == f"Replica big-0-0 is not being moved (it is in {d1})"


def test_execute_to_an_offline_dir_names_the_replica_and_the_error(tmp_path: Path) -> None:
    write_partition(tmp_path / "d1", TP, 1)
    (tmp_path / "d2").write_text("not a directory")  # the daemon marks this log dir offline
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(tmp_path / "d2")})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 1
        assert r.stderr.strip() == (f"mover-log-dirs: error: Failed to move replica big-0-0 to log dir "
                                    f"{tmp_path / 'd2'}: KAFKA_STORAGE_ERROR")
        assert "Successfully started log directory move" not in r.stdout


class AlterAnswers:
    """AlterReplicaLogDirs that answers REPLICA_NOT_AVAILABLE `not_yet` times, then NONE with request id 42."""

    def __init__(self, not_yet: int) -> None:
        self.not_yet = not_yet
        self.times: list[float] = []

    def __call__(self, header: object, request: dict[str, Any]) -> dict[str, Any]:
        self.times.append(time.monotonic())
        [d] = request["dirs"]
        assert d["path"] == "/d2" and d["topics"] == [{"name": "big", "partitions": [0]}]
        done = len(self.times) > self.not_yet
        return {"results": [{"topic_name": "big", "partitions": [{"partition_index": 0,
                                                                  "error_code": 0 if done else 9}]}],
                "request_id": 42 if done else -1}


def test_execute_retries_replica_not_available_every_100ms(tmp_path: Path) -> None:
    alter = AlterAnswers(not_yet=3)
    fake, server = growing_copy_broker({ALTER_REPLICA_LOG_DIRS.key: alter})
    with server as running:
        fake.port = running.port
        f = reassignment_file(tmp_path / "r.json", {("big", 0): "/d2"})
        r = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-2:] == ["Successfully started log directory move for: big-0-0",
                                              "Request id: 42 (broker 0)"]
        assert len(alter.times) == 4
        gaps = [b - a for a, b in zip(alter.times, alter.times[1:], strict=False)]
        assert all(g >= 0.09 for g in gaps), gaps


def test_execute_gives_up_after_timeout(tmp_path: Path) -> None:
    alter = AlterAnswers(not_yet=10**6)
    fake, server = growing_copy_broker({ALTER_REPLICA_LOG_DIRS.key: alter})
    with server as running:
        fake.port = running.port
        f = reassignment_file(tmp_path / "r.json", {("big", 0): "/d2"})
        start = time.monotonic()
        r = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--execute", "--reassignment-json-file", str(f),
                "--timeout", "1500")
        assert r.returncode == 1
        assert "Timed out after 1.5 s" in r.stderr and "big-0-0" in r.stderr
        # Re-sent every 100 ms until the timeout: at most 16 sends; at least a few even when a loaded machine
        # makes each round trip slow (0.5 s and "at least 3" failed under load 15).
        assert 3 <= len(alter.times) <= 16
        assert time.monotonic() - start < 15


def test_cancel_of_an_unknown_partition_is_an_error(tmp_path: Path) -> None:
    write_partition(tmp_path / "d1", TP, 1)
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("nope", 0): str(tmp_path / "d2")})
        r = cli("--bootstrap-server", d.bootstrap, "--cancel", "--reassignment-json-file", str(f))
        assert r.returncode == 1
        assert r.stderr.strip() == "mover-log-dirs: error: The proposed assignment contains non-existent " \
                                   "partitions: nope-0"


def test_mover_reassign_of_a_log_dir_only_file_needs_no_kip455(tmp_path: Path, reassign_cli: Callable[..., Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """moverd has no KIP-455 APIs (it moves replicas between log dirs only): mover-reassign's --execute of a file
    whose replicas are all on their brokers already, then --verify and --progress, send none of its requests."""
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 200)
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file",
                                     str(f)])
        assert rc == 0, out + err

        def verified() -> list[str] | None:
            rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file",
                                         str(f)])
            assert rc in (0, 3), out + err
            lines = out.splitlines()
            assert lines[:2] == ["Status of partition reassignment:",
                                 "Reassignment of partition big-0 is completed."], out
            return lines[2:] if rc == 0 else None

        # Kafka 3.7's lines: the replica's, then (nothing moving any more) the throttles' without a blank line.
        assert wait_for(verified, message="--verify to report completion") == [
            "Reassignment of replica big-0-0 completed successfully.",
            "Clearing broker-level throttles on broker 0",
            "Clearing topic-level throttles on topic big"]
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--progress"])
        assert rc == 0, out + err
        size = sum(p.stat().st_size for p in (d2 / "big-0").glob("*.log"))
        assert out.splitlines() == [
            "Request 0: log dir moves started, 1 partitions",
            "Partition big-0: completed, replicas 0",
            f"Replica big-0-0: {size} of {size} bytes (100.0%), complete",
            "Total: 1 of 1 partitions done, 0 with a step running; running steps 0 of 0 bytes"], out
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--progress", "--watch", "--poll-interval",
                                     "0.1"])
        assert rc == 0 and "request 0: partitions done" in out, out + err


def test_mover_reassign_progress_follows_a_running_log_dir_move(tmp_path: Path, reassign_cli: Callable[..., Any],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """While moverd copies the replica (throttled), --progress of the log-dir-only request is not done: its
    partition is on its brokers, but the replica's future copy holds only part of the current copy's bytes."""
    monkeypatch.setenv("MOVER_REASSIGN_STATE_DIR", str(tmp_path / "state"))
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 200)  # ~2 MB: 20 s at the throttle, far longer than the test
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": 100_000}) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file",
                                     str(f)])
        assert rc == 0, out + err
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--progress"])
        assert rc == 3, out + err
        lines = out.splitlines()
        assert lines[:2] == ["Request 0: log dir moves started, 1 partitions",
                             "Partition big-0: completed, replicas 0"], out
        assert re.fullmatch(r"Replica big-0-0: \d+ of \d+ bytes \(\d+\.\d%\), in progress", lines[2]), out
        rc, out, err = reassign_cli(["--bootstrap-server", d.bootstrap, "--verify", "--reassignment-json-file",
                                     str(f)])
        assert rc == 3 and "Reassignment of replica big-0-0 is still in progress." in out.splitlines(), out + err
        assert "Clearing" not in out  # the copy still needs its throttle
