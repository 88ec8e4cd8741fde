"""--progress: per-replica bytes from DescribeReplicaMoves during a throttled move; --request; --watch with no TTY;
the DescribeLogDirs fallback against a broker without api 32100; and --watch through a broker restart and through
connections reset in their handshake (bootstrap or a broker's own, ApiVersions or SASL), where one-shot --progress
fails with one line."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from mover.cli import log_dirs, progress
from mover.server import Route
from mover.storage.names import TopicPartition
from mover.testing.fake_kafka import growing_copy_broker
from mover.testing.log_dirs_tool import SCRIPT, cli, execute, reassignment_file, replica_dirs
from mover.testing.moverd import Moverd
from mover.testing.proxy import ResettingProxy
from mover.testing.records import write_partition
from mover.testing.wait import wait_for
from mover.wire.messages import API_VERSIONS, DESCRIBE_LOG_DIRS, DESCRIBE_REPLICA_MOVES, INCREMENTAL_ALTER_CONFIGS
from mover.wire.messages.security import SASL_AUTHENTICATE, SASL_HANDSHAKE

TP = TopicPartition("big", 0)
FAKE_COMPLETED = "Replica big-0-0: /d1 -> /d2, completed, 1000 of 1000 bytes (100.0%)"
# What the client says when a broker resets a connection in its ApiVersions handshake (mover/admin/client.py).
RESET_IN_HANDSHAKE = re.compile(r"mover-log-dirs: error: broker \S+( \(\S+\))? closed the connection on ApiVersions "
                                r"v\d+: Connection reset by peer")
# The proxy numbers connections as accepted: the tool's bootstrap connection, then broker 0's own.
BOOTSTRAP_CONNECTION, BROKER_CONNECTION = 1, 2
PROGRESS_LINE = re.compile(r"Replica big-0-0: (\S+) -> (\S+), (\w+), (\d+) of (\d+) bytes \(([\d.]+)%\)")


def unthrottle(bootstrap: str) -> None:
    r = cli("--bootstrap-server", bootstrap, "--remove-throttle")
    assert r.returncode == 0, r.stderr


def test_progress_of_a_throttled_move(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    # ~3 MB: 100 s at the throttle, so a loaded machine still catches the move mid-way (each CLI call here may take
    # seconds); the test lifts the throttle (a dynamic one, which --remove-throttle removes) once it has seen what it
    # needs.
    size = write_partition(d1, TP, 300).size
    with Moverd(tmp_path) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f),
                "--replica-alter-log-dirs-throttle", "30000")
        assert r.returncode == 0, r.stderr
        request_id = int(re.search(r"Request id: (\d+)", r.stdout).group(1))  # type: ignore[union-attr]

        def mid_move() -> re.Match[str] | None:
            p = cli("--bootstrap-server", d.bootstrap, "--progress")
            assert p.returncode == 3, (p.stdout, p.stderr)  # still moving
            m = PROGRESS_LINE.search(p.stdout)
            assert m is not None, p.stdout
            assert p.stdout.startswith(f"Request {request_id} on broker 0: started "), p.stdout
            return m if int(m.group(4)) > 0 else None

        m = wait_for(mid_move, message="bytes to be copied")
        assert (m.group(1), m.group(2), m.group(3)) == (str(d1), str(d2), "copying")
        done, total = int(m.group(4)), int(m.group(5))
        assert total == size
        assert 0 < done < total

        # The same request by id; an unknown id is an error.
        p = cli("--bootstrap-server", d.bootstrap, "--progress", "--request", str(request_id))
        assert p.returncode == 3 and PROGRESS_LINE.search(p.stdout), p.stdout
        p = cli("--bootstrap-server", d.bootstrap, "--progress", "--request", str(request_id + 100))
        assert p.returncode == 1
        assert p.stderr.strip() == f"mover-log-dirs: error: Request id {request_id + 100} is not known to broker 0 " \
                                   "(INVALID_REQUEST)"

        # --watch, with no TTY and no stdin (as in CI): runs until the move ends, then says so and exits 0.
        watcher: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: watcher.update(r=cli(
            "--bootstrap-server", d.bootstrap, "--progress", "--watch", "--interval", "0.2")))
        thread.start()
        unthrottle(d.bootstrap)
        thread.join(120)
        w = watcher["r"]
        assert w.returncode == 0, (w.stdout, w.stderr)
        m = PROGRESS_LINE.search(w.stdout)
        assert m is not None and m.group(3) == "completed", w.stdout
        assert int(m.group(4)) == int(m.group(5)) == size
        assert "all moves" in w.stdout  # rich's final frame
        assert replica_dirs(d.bootstrap, "big", 0) == {str(d2): False}

        p = cli("--bootstrap-server", d.bootstrap, "--progress")
        assert p.returncode == 0
        assert f"Request {request_id} on broker 0: started " in p.stdout and ", finished " in p.stdout


def test_progress_with_no_moves(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        p = cli("--bootstrap-server", d.bootstrap, "--progress")
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == "No replica moves on broker 0"
        p = cli("--bootstrap-server", d.bootstrap, "--progress", "--request", "1")
        assert p.returncode == 1 and "Request id 1 is not known to broker 0" in p.stderr


def test_progress_falls_back_to_describe_log_dirs_without_api_32100() -> None:
    fake, server = growing_copy_broker()
    with server as running:
        fake.port = running.port
        bootstrap = f"127.0.0.1:{running.port}"
        p = cli("--bootstrap-server", bootstrap, "--progress")
        assert p.returncode == 3, (p.stdout, p.stderr)
        assert "does not support DescribeReplicaMoves" in p.stderr
        assert "Replica big-0-0: /d1 -> /d2, copying, 250 of 1000 bytes (25.0%)" in p.stdout

        # Request ids need our API.
        p = cli("--bootstrap-server", bootstrap, "--progress", "--request", "3")
        assert p.returncode == 1 and "keeps no request ids" in p.stderr

        w = cli("--bootstrap-server", bootstrap, "--progress", "--watch", "--interval", "0.05")
        assert w.returncode == 0, (w.stdout, w.stderr)
        assert "Replica big-0-0: /d1 -> /d2, completed, 1000 of 1000 bytes (100.0%)" in w.stdout


def test_progress_of_an_empty_partition_has_an_unknown_total(tmp_path: Path) -> None:
    """KIP-179's denominator is -1 when the total is not known, never 0: an empty partition has none. From moverd's
    DescribeReplicaMoves, and estimated from DescribeLogDirs (a copy and its source both of size 0)."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    write_partition(d1, TP, 0)
    with Moverd(tmp_path) as d:
        execute(d.bootstrap, reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)}))
        p = wait_for(lambda: (p := cli("--bootstrap-server", d.bootstrap, "--progress")).returncode == 0 and p,
                     message="the move")
        assert f"Replica big-0-0: {d1} -> {d2}, completed, 0 bytes of unknown total" in p.stdout, p.stdout

    fakes: list[Any] = []

    def empty(header: object, request: dict[str, Any]) -> dict[str, Any]:
        reply = fakes[0].describe_log_dirs(header, request)
        for result in reply["results"]:
            for topic in result["topics"]:
                for partition in topic["partitions"]:
                    partition["partition_size"] = 0
        return reply

    fake, server = growing_copy_broker({DESCRIBE_LOG_DIRS.key: empty})
    fakes.append(fake)
    with server as running:
        fake.port = running.port
        p = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--progress")
        assert p.returncode == 3, (p.stdout, p.stderr)
        assert "Replica big-0-0: /d1 -> /d2, copying, 0 bytes of unknown total" in p.stdout, p.stdout
        w = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--progress", "--watch", "--interval", "0.05")
        assert w.returncode == 0, (w.stdout, w.stderr)
        assert "Replica big-0-0: /d1 -> /d2, completed, 0 bytes of unknown total" in w.stdout, w.stdout


def test_progress_falls_back_when_the_broker_hangs_up_on_api_32100() -> None:
    """Advertised, but the broker closes the connection when asked (as Kafka does for unknown keys)."""
    def refuse(header: object, request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("no")

    fake, server = growing_copy_broker({DESCRIBE_REPLICA_MOVES.key: Route(refuse, error_response=lambda v, r, c: None)})
    with server as running:
        fake.port = running.port
        p = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--progress")
        assert p.returncode == 3, (p.stdout, p.stderr)
        assert "Replica big-0-0: /d1 -> /d2, copying" in p.stdout


def test_throttle_goes_to_kafkas_key_on_a_broker_without_api_32100() -> None:
    """Kafka 3.x takes any key without complaint (docs/kafka-compat.md): this fake does too, so only a tool that
    picks the key by ApiVersions, not by a refusal, sends Kafka's. Real broker: tests/kafka/test_log_dirs_cli.py."""
    seen: list[str] = []

    def alter(header: object, request: dict[str, Any]) -> dict[str, Any]:
        [res] = request["resources"]
        [cfg] = res["configs"]
        seen.append(f"{cfg['name']}={cfg['value']}/{cfg['config_operation']}")
        return {"responses": [{"error_code": 0, "error_message": None, "resource_type": 4,
                               "resource_name": res["resource_name"]}]}

    fake, server = growing_copy_broker({INCREMENTAL_ALTER_CONFIGS.key: alter})
    with server as running:
        fake.port = running.port
        r = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--throttle", "5000")
        assert r.returncode == 0, r.stderr
        assert seen == ["replica.alter.log.dirs.io.max.bytes.per.second=5000/0"]
        seen.clear()
        r = cli("--bootstrap-server", f"127.0.0.1:{running.port}", "--throttle", "-1")
        assert r.returncode == 0, r.stderr
        assert seen == ["replica.alter.log.dirs.io.max.bytes.per.second=None/1"]


def test_watch_survives_a_broker_restart(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    size = write_partition(d1, TP, 200).size
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": 100_000}) as d:
        f = reassignment_file(tmp_path / "r.json", {("big", 0): str(d2)})
        r = cli("--bootstrap-server", d.bootstrap, "--execute", "--reassignment-json-file", str(f))
        assert r.returncode == 0, r.stderr
        request_id = re.search(r"Request id: (\d+)", r.stdout).group(1)  # type: ignore[union-attr]
        wait_for(lambda: (d2 / "big-0.move").exists(), message="the copy to start")
        watch = subprocess.Popen([str(SCRIPT), "--bootstrap-server", d.bootstrap, "--progress", "--watch",
                                  "--interval", "0.1"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            # Restart once the watch is talking to the broker, so the restart lands while it runs. Which connection
            # that is (the bootstrap's, broker 0's own, mid-handshake or not) must not matter: the watch retries a
            # connection lost anywhere (the handshake cases, placed exactly: the tests below). A watch that has
            # already exited is not waited for: its output is checked below.
            wait_for(lambda: watch.poll() is not None or any(
                c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == d.port
                for c in psutil.Process(watch.pid).net_connections()), message="the watch to connect")
            d.restart()  # the move resumes; the request id is persisted
            unthrottle(d.bootstrap)
            out, err = watch.communicate(timeout=120)
        finally:
            watch.kill()
        assert watch.returncode == 0, (out, err)
        assert f"Request {request_id} on broker 0: started " in out
        m = PROGRESS_LINE.search(out)
        assert m is not None and m.group(3) == "completed" and int(m.group(4)) == size, out
        assert "does not support" not in err  # a restart is not a broker without api 32100


@pytest.mark.parametrize("lost", [BOOTSTRAP_CONNECTION, BROKER_CONNECTION], ids=["bootstrap", "broker-connection"])
def test_watch_retries_a_connection_reset_in_its_handshake(lost: int) -> None:
    """The broker resets the bootstrap connection's, or broker 0's own connection's, first ApiVersions (what a restart
    landing there does, as it once did in CI): the watch retries it as it retries a connection lost later, and
    finishes. Without the retry it exits 1 with the reset as its error."""
    fake, server = growing_copy_broker()
    with server as running, ResettingProxy(("127.0.0.1", running.port), reset={lost: 1}) as proxy:
        fake.port = proxy.port  # Metadata advertises the proxy, so broker 0's own connection goes through it too
        w = cli("--bootstrap-server", proxy.address, "--progress", "--watch", "--interval", "0.05")
        assert proxy.reset_api_keys == [API_VERSIONS.key]  # the reset hit the handshake, not a later request
        assert w.returncode == 0, (w.stdout, w.stderr)
        assert FAKE_COMPLETED in w.stdout


def test_watch_retries_a_connection_reset_in_its_sasl_handshake(tmp_path: Path) -> None:
    """With SASL, broker 0's own connection is reset at its SaslHandshake (after ApiVersions went through): the watch
    retries the connection, authenticates on the new one and finishes. Without the retry it exits 1."""
    logins: list[bytes] = []

    def handshake(header: object, request: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": 0, "mechanisms": ["PLAIN"]}

    def authenticate(header: object, request: dict[str, Any]) -> dict[str, Any]:
        logins.append(bytes(request["auth_bytes"]))
        return {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}

    fake, server = growing_copy_broker({SASL_HANDSHAKE.key: handshake, SASL_AUTHENTICATE.key: authenticate})
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="alice" password="secret";\n')
    with server as running, ResettingProxy(("127.0.0.1", running.port), reset={BROKER_CONNECTION: 2}) as proxy:
        fake.port = proxy.port
        w = cli("--bootstrap-server", proxy.address, "--command-config", str(config), "--progress", "--watch",
                "--interval", "0.05")
        assert proxy.reset_api_keys == [SASL_HANDSHAKE.key]  # the reset hit the SASL handshake
        assert w.returncode == 0, (w.stdout, w.stderr)
        assert FAKE_COMPLETED in w.stdout
    # The bootstrap's login and the retried broker connection's (the reset one never got to authenticate).
    assert len(logins) >= 2 and set(logins) == {b"\0alice\0secret"}, logins
    # What the watch retried is an error for the one-shot look: one line, exit 1.
    fake, server = growing_copy_broker({SASL_HANDSHAKE.key: handshake, SASL_AUTHENTICATE.key: authenticate})
    with server as running, ResettingProxy(("127.0.0.1", running.port), reset={BROKER_CONNECTION: 2}) as proxy:
        fake.port = proxy.port
        p = cli("--bootstrap-server", proxy.address, "--command-config", str(config), "--progress")
        assert proxy.reset_api_keys == [SASL_HANDSHAKE.key]
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert re.fullmatch(r"mover-log-dirs: error: broker \S+( \(\S+\))? closed the connection on SaslHandshake "
                        r"v\d+: Connection reset by peer", p.stderr.strip()), p.stderr


def test_one_shot_progress_fails_on_a_connection_reset_in_its_handshake() -> None:
    """Without --watch nothing is retried: the reset is the one-line error, exit 1."""
    fake, server = growing_copy_broker()
    with server as running, ResettingProxy(("127.0.0.1", running.port), reset={BROKER_CONNECTION: 1}) as proxy:
        fake.port = proxy.port
        p = cli("--bootstrap-server", proxy.address, "--progress")
        assert proxy.reset_api_keys == [API_VERSIONS.key]
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert RESET_IN_HANDSHAKE.fullmatch(p.stderr.strip()), p.stderr


@pytest.mark.parametrize("first_lost", [BOOTSTRAP_CONNECTION, BROKER_CONNECTION],
                         ids=["bootstrap", "broker-connection"])
def test_watch_gives_up_on_handshakes_reset_for_the_grace_period(first_lost: int, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A broker that resets every handshake for longer than the grace a watch gives a restart ends the watch with
    the same one line as the one-shot command (in-process, so the grace can be made short)."""
    monkeypatch.setattr(progress, "BROKER_DOWN_GRACE_S", 0.3)
    fake, server = growing_copy_broker()
    every_one_from = {n: 1 for n in range(first_lost, 10_000)}
    with server as running, ResettingProxy(("127.0.0.1", running.port), reset=every_one_from) as proxy:
        fake.port = proxy.port
        rc = log_dirs.main(["--bootstrap-server", proxy.address, "--progress", "--watch", "--interval", "0.05"])
        retried = proxy.accepted - first_lost
    err = capsys.readouterr().err
    assert rc == 1, err
    assert retried >= 2, retried  # it did retry before giving up
    assert RESET_IN_HANDSHAKE.fullmatch(err.strip()), err
