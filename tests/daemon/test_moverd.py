"""The real `moverd` process: SIGTERM mid-move, restart, resume; a second daemon on the same dirs is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mover.storage.names import DirKind, PartitionDirName, TopicPartition, parse_partition_dir
from mover.testing import prefork
from mover.testing.moverd import REPO, Moverd
from mover.testing.raw import RawClient, alter_dir
from mover.testing.records import read_records, write_partition
from mover.testing.wait import WAIT_S, wait_for


def move(port: int, tp: TopicPartition, dest: Path) -> int:
    with RawClient(port) as c:
        return alter_dir(c, tp.topic, tp.partition, dest, version=1)


def move_bytes(path: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0


def test_sigterm_mid_move_parks_the_copy_and_the_next_start_resumes_it(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    values = write_partition(d1, tp, 400).values  # ~4 MB
    # What a Kafka broker writes beside the segments: the topic id (a KRaft broker refuses a copy without it) and the
    # leader epochs.
    kafka_files = {"partition.metadata": b"version: 0\ntopic_id: XuPzYfwWTNK7w6m8Tiw79Q\n",
                   "leader-epoch-checkpoint": b"0\n1\n0 0\n"}
    for name, data in kafka_files.items():
        (d1 / "t-0" / name).write_bytes(data)
    daemon = Moverd(tmp_path, props={"intra.broker.throttled.rate": 1_000_000})
    with daemon:
        assert move(daemon.port, tp, d2) == 0
        wait_for(lambda: move_bytes(d2 / "t-0.move") > 0, message="the copy to start")
        # The copy has the topic id from the start: after a kill -9 it is one rename from a -future Kafka resumes.
        assert (d2 / "t-0.move" / "partition.metadata").read_bytes() == kafka_files["partition.metadata"]
        assert daemon.stop() == 0, daemon.log()
        # A clean stop mid-copy leaves the copy where it is, under Kafka's `-future` name (a Kafka broker started
        # on the dirs resumes it; one refuses a `.move`), and the source untouched.
        assert not (d2 / "t-0.move").exists()
        (parked,) = [p for p in d2.iterdir()
                     if parse_partition_dir(p.name) == PartitionDirName(tp, DirKind.KAFKA_FUTURE)]
        assert 0 < move_bytes(parked) < move_bytes(d1 / "t-0")
        assert {name: (parked / name).read_bytes() for name in kafka_files} == kafka_files
        assert [v for _, v in read_records(d1 / "t-0")] == values

        del daemon.props["intra.broker.throttled.rate"]  # unlimited: let the resumed move finish
        daemon.start()
        wait_for(lambda: (d2 / "t-0").is_dir() and not (d2 / "t-0.move").exists(), message="the resumed move")
        wait_for(lambda: not any(n.startswith("t-0") for n in os.listdir(d1)), message="the retired copy's deletion")
    assert [v for _, v in read_records(d2 / "t-0")] == values


def test_second_daemon_on_the_same_dirs_refuses_to_start(tmp_path: Path) -> None:
    with Moverd(tmp_path) as first:
        second = prefork.run(
            [sys.executable, "-m", "mover.daemon", "--config", str(first.config)],
            cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT_S,
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
                       capture_output=True, timeout=WAIT_S)
        assert move(daemon.port, tp, d2) == 0
        wait_for(lambda: move_bytes(d2 / "t-0.move") > 0, message="the copy to start")
        assert daemon.stop() == 0, daemon.log()
        before = len(daemon.log_file.read_text())
        daemon.start()
        second_run = daemon.log_file.read_text()[before:]
        # The dynamic throttle is in force before the interrupted move resumes, not once the listener is up.
        set_at = second_run.find("intra-broker throttle set to 200000 B/s")
        ready_at = second_run.find("1 moves resumed")
        assert 0 <= set_at < ready_at, second_run
        assert (d2 / "t-0.move").is_dir()


def test_a_stand_alone_moverd_loads_no_zookeeper_code() -> None:
    """docs/architecture.md: without zookeeper.connect moverd imports none of mover/zk's coordination, nor kazoo (a
    broker host without ZooKeeper starts faster and carries less). Checked in a fresh interpreter."""
    code = ("import sys, mover.daemon.main, mover.daemon.broker_server, mover.api\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('kazoo') or m.startswith('mover.zk.')\n"
            "                and m != 'mover.zk.bounded_json')\n"
            "print(loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_a_restart_after_kill_9_listens_on_the_same_port_below_the_ephemeral_range(tmp_path: Path) -> None:
    """The harness's moverd port is chosen below the ephemeral range (mover/testing/ports.py), where no client
    connection of the machine takes its local port: a restart after kill -9 binds the same port again (a port the
    kernel chose for port 0 was once taken by another test's connection between the kill and the restart)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    with Moverd(tmp_path) as d:
        port = d.port
        assert port < low
        d.kill()
        d.start()
        assert d.port == port
        with RawClient(port):
            pass
