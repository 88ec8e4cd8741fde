"""Metrics of a real moverd on `metrics.listener`, scraped over HTTP and parsed with prometheus-client's own
parser: values move with the broker (bytes copied by a move, the offline dir count after chmod 000, requests
counted per API), the endpoint is off unless configured."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mover.metrics.collector import DIR_OFFLINE, OFFLINE_DIRS
from mover.metrics.exporter import BACKLOG, MAX_CONNECTIONS, RENDER_THREADS
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch as batch
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.notify import NotifySocket
from mover.testing.ports import free_port
from mover.testing.raw import RawClient, alter_dir, move, produce
from mover.testing.records import dir_of, write_partition
from mover.testing.wait import wait_for
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.messages import DESCRIBE_LOG_DIRS

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def metrics_moverd(tmp_path: Path, **kwargs: object) -> tuple[Moverd, int]:
    port = free_port()
    props = {"metrics.listener": f"http://127.0.0.1:{port}", **kwargs.pop("props", {})}  # type: ignore[dict-item]
    return Moverd(tmp_path, props=props, **kwargs), port  # type: ignore[arg-type]


def test_page_lists_every_metric_and_the_dirs(tmp_path: Path) -> None:
    d, port = metrics_moverd(tmp_path)
    with d:
        got = scrape(port)
        for name in ("mover_move_bytes_copied_total", "mover_move_bytes_per_second", "mover_moves_running",
                     "mover_moves_queued", "mover_replica_lock_hold_seconds_count", OFFLINE_DIRS):
            assert sample(got, name) is not None, name
        assert OFFLINE_DIRS == "kafka_log_logmanager_offlinelogdirectorycount"  # what Kafka alert rules query
        assert sample(got, OFFLINE_DIRS) == 0
        for log_dir in map(str, d.dirs):
            assert sample(got, "mover_log_dir_online", log_dir=log_dir) == 1
            assert sample(got, "mover_log_dir_total_bytes", log_dir=log_dir) > 0
            assert 0 < sample(got, "mover_log_dir_usable_bytes", log_dir=log_dir) <= sample(
                got, "mover_log_dir_total_bytes", log_dir=log_dir)
            assert sample(got, "mover_log_dir_used_bytes", log_dir=log_dir) == 0
        # Stand-alone (no zookeeper.connect) until the ZooKeeper component reports a session.
        assert sample(got, "mover_zookeeper_session_state", state="standalone") == 1
        assert sample(got, "mover_zookeeper_session_state", state="connected") == 0
        # Its own registry: none of prometheus-client's default process/platform collectors.
        assert not [k for k in got if k[0].startswith(("process_", "python_"))]


def test_bytes_copied_and_lock_hold_follow_a_move(tmp_path: Path) -> None:
    d, port = metrics_moverd(tmp_path)
    with d, RawClient(d.port) as c:
        for _ in range(20):
            assert produce(c, "t", 0, batch([b"x" * 1000] * 50))["error_code"] == 0
        source = dir_of(d.dirs, "t", 0)
        dest = next(x for x in d.dirs if x != source)
        before = scrape(port)
        used = sample(before, "mover_log_dir_used_bytes", log_dir=str(source))
        assert used > 1_000_000  # the Log's size, kept in memory
        assert sample(before, "mover_move_bytes_copied_total") == 0
        move(c, d.dirs, "t", 0, dest)
        wait_for(lambda: sample(scrape(port), "mover_moves_ended_total", outcome="completed") == 1,
                 message="the move's end")
        after = scrape(port)
        assert sample(after, "mover_move_bytes_copied_total") >= used
        assert sample(after, "mover_replica_lock_hold_seconds_count") == 1
        assert sample(after, "mover_log_dir_used_bytes", log_dir=str(dest)) == used
        assert sample(after, "mover_log_dir_used_bytes", log_dir=str(source)) == 0
        assert sample(after, "mover_moves_running") == 0 and sample(after, "mover_moves_queued") == 0


def test_request_latency_counts_each_request_per_api(tmp_path: Path) -> None:
    d, port = metrics_moverd(tmp_path)
    with d, RawClient(d.port) as c:
        for _ in range(7):
            c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})
        got = scrape(port)
        assert sample(got, "mover_request_duration_seconds_count", api="DescribeLogDirs") == 7
        assert sample(got, "mover_request_duration_seconds_bucket", api="DescribeLogDirs", le="+Inf") == 7
        assert sample(got, "mover_request_duration_seconds_count", api="Produce") is None  # none sent


def test_offline_dir_count_after_chmod_000(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline dir gauges, and systemd's STATUS= line, once a dir fails."""
    notify = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    d, port = metrics_moverd(tmp_path, props={"log.dir.health.check.interval.ms": 50}, prefix=SETPRIV)
    with notify, d:
        d.dirs[1].chmod(0)
        try:
            wait_for(lambda: sample(scrape(port), OFFLINE_DIRS) == 1, message="the offline dir count")
            got = scrape(port)
            assert sample(got, "mover_log_dir_online", log_dir=str(d.dirs[1])) == 0
            assert sample(got, "mover_log_dir_online", log_dir=str(d.dirs[0])) == 1
            assert sample(got, DIR_OFFLINE, logDirectory=str(d.dirs[1])) == 1
            assert sample(got, DIR_OFFLINE, logDirectory=str(d.dirs[0])) == 0
            wait_for(lambda: any("log dirs: 1 of 2 offline" in s for s in notify.lines("STATUS=")),
                     message="STATUS with the offline dir")
        finally:
            d.dirs[1].chmod(0o755)


def test_every_dir_unreadable_at_start_up_still_starts_and_says_why(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka halts when no log dir is left online; moverd starts and reports it (docs/operations.md#failures):
    the gauges, systemd's STATUS= line, and DescribeLogDirs' error 56 on each dir."""
    notify = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    d, port = metrics_moverd(tmp_path, prefix=SETPRIV)
    for path in d.dirs:
        path.mkdir()
        path.chmod(0)
    try:
        with notify, d, RawClient(d.port) as c:
            assert sample(scrape(port), OFFLINE_DIRS) == 2
            wait_for(lambda: any("log dirs: 2 of 2 offline" in s for s in notify.lines("STATUS=")),
                     message="STATUS with both dirs offline")
            _, body = c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})
            assert [(r["log_dir"], r["error_code"]) for r in body["results"]] == [(str(p), 56) for p in d.dirs]
    finally:
        for path in d.dirs:
            path.chmod(0o755)


def test_metrics_are_off_unless_configured(tmp_path: Path) -> None:
    port = free_port()
    with Moverd(tmp_path):
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_metrics_port_taken_refuses_to_start(tmp_path: Path) -> None:
    d, port = metrics_moverd(tmp_path)
    with d:
        other = Moverd(tmp_path / "b", props={"metrics.listener": f"http://127.0.0.1:{port}"})
        (tmp_path / "b").mkdir()
        with pytest.raises(RuntimeError, match="exited with 1"):
            other.start()
        assert "cannot serve metrics on 127.0.0.1" in other.log()


def test_zookeeper_session_state_follows_the_session(tmp_path: Path, zookeeper: ZooKeeperServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics gauge and systemd's STATUS= line both follow the ZooKeeper session."""
    def state() -> str:
        got = scrape(port)
        (current,) = [k[1][0][1] for k, v in got.items() if k[0] == "mover_zookeeper_session_state" and v == 1]
        return current

    def status_says(what: str) -> bool:
        return bool(notify.lines("STATUS=")) and notify.lines("STATUS=")[-1].endswith(f"; zookeeper: {what}")

    notify = NotifySocket(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    d, port = metrics_moverd(tmp_path, props={"zookeeper.connect": f"{zookeeper.connect_string}/metrics",
                                              "zookeeper.session.timeout.ms": 30000})
    with notify, d:
        assert state() == "connected"
        wait_for(lambda: status_says("connected"), message="STATUS with the session connected")
        zookeeper.stop()
        try:
            wait_for(lambda: state() == "suspended", message="the session to be suspended")
            wait_for(lambda: status_says("suspended"), message="STATUS with the session suspended")
        finally:
            zookeeper.start()  # same port and data: the session is still alive within its timeout
        wait_for(lambda: state() == "connected", message="the session to be back")
        wait_for(lambda: status_says("connected"), message="STATUS with the session back")


def test_a_resumed_move_counts_only_what_it_copies_after_the_restart(tmp_path: Path) -> None:
    tp = TopicPartition("t", 0)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    written = write_partition(d1, tp, 400, records_per_batch=10, record_bytes=1000)  # ~4 MB
    d, port = metrics_moverd(tmp_path, props={"intra.broker.throttled.rate": 1_000_000})
    with d, RawClient(d.port) as c:
        assert alter_dir(c, "t", 0, d2) == 0
        wait_for(lambda: sum(p.stat().st_size for p in (d2 / "t-0.move").glob("*.log")) > 0
                 if (d2 / "t-0.move").is_dir() else False, message="the copy to start")
    # Stopped mid-copy (SIGTERM): the copy stays (parked under Kafka's -future name at a clean stop); its prefix was
    # copied by the previous run.
    (parked,) = [p for p in d2.iterdir()
                 if p.name == "t-0.move" or (p.name.startswith("t-0.") and p.name.endswith("-future"))]
    prefix = sum(p.stat().st_size for p in parked.glob("*.log"))
    assert 0 < prefix < written.size
    del d.props["intra.broker.throttled.rate"]
    with d:
        wait_for(lambda: sample(scrape(port), "mover_moves_ended_total", outcome="completed") == 1,
                 message="the resumed move to complete")
        assert sample(scrape(port), "mover_move_bytes_copied_total") == written.size - prefix


def _tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_slow_clients_cannot_hold_the_metrics_listener(tmp_path: Path) -> None:
    """Hundreds of clients sending `GET /metr` and nothing more: a real scrape is still answered, moverd's threads
    stay bounded, the oldest idle connections are closed when the bound is reached and the rest time out."""
    d, port = metrics_moverd(tmp_path)
    slow: list[socket.socket] = []
    with d:
        assert d.proc is not None
        scrape(port)
        threads = _tasks(d.proc.pid)
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert listening.split()[2] == str(BACKLOG), listening  # Send-Q of a listening socket: its backlog
        try:
            for _ in range(MAX_CONNECTIONS + 172):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(b"GET /metr")
                slow.append(s)
            got = scrape(port)
            assert sample(got, OFFLINE_DIRS) == 0
            assert _tasks(d.proc.pid) <= threads + RENDER_THREADS
            # The oldest were closed to make room; the ones still open are at most the bound.
            wait_for(lambda: sum(map(_closed_by_peer, slow)) >= len(slow) - MAX_CONNECTIONS,
                     message="connections beyond the bound closed")
            # A request head too large is refused, and the rest time out.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"x" * 10_000 + b"\r\n\r\n")
                assert s.recv(100).startswith(b"HTTP/1.1 431 ")
            wait_for(lambda: all(map(_closed_by_peer, slow)), message="slow requests timed out")
            assert sample(scrape(port), OFFLINE_DIRS) == 0
            assert _tasks(d.proc.pid) <= threads + RENDER_THREADS
        finally:
            for s in slow:
                s.close()
