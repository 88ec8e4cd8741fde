"""systemd: the unit file passes `systemd-analyze verify` and keeps its hardening; the notify protocol for real
(a real moverd writing to a Unix datagram socket this test owns): READY=1, STATUS=, WATCHDOG=1, and no more pings
once the event loop is wedged (through the test-only fault point in mover/faults.py); and moverd working inside
the unit's sandbox (read-only root but the broker's dir, a non-root user, no capabilities, no new privileges)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from mover.testing.batches import make_batch
from mover.testing.moverd import REPO, Moverd
from mover.testing.notify import NotifySocket
from mover.testing.ports import free_port
from mover.testing.raw import RawClient, move, produce, raw_call
from mover.testing.records import dir_of
from mover.testing.wait import wait_for
from mover.wire.messages import CREATE_TOPICS, METADATA

UNIT = REPO / "systemd" / "moverd.service"
DROP_IN = REPO / "systemd" / "moverd.service.d" / "log-dirs.conf"

analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                             reason="systemd-analyze missing: scripts/test.sh installs Debian's systemd")


def _unit_copy(tmp_path: Path, text: str | None = None) -> Path:
    """The unit as installed: ExecStart pointing at this checkout's moverd (verify checks it is executable)."""
    moverd = Path(sys.executable).parent / "moverd"
    assert moverd.exists(), "the console script is installed by scripts/venv.sh"
    unit = tmp_path / "moverd.service"
    unit.write_text(re.sub(r"^ExecStart=\S+", f"ExecStart={moverd}", text or UNIT.read_text(), flags=re.M))
    (tmp_path / "moverd.service.d").mkdir(exist_ok=True)
    shutil.copy(DROP_IN, tmp_path / "moverd.service.d" / DROP_IN.name)
    return unit


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _settings(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@analyze
def test_unit_file_verifies_cleanly_with_its_drop_in(tmp_path: Path) -> None:
    got = _verify(_unit_copy(tmp_path))
    assert got.returncode == 0 and not (got.stdout + got.stderr).strip(), got.stdout + got.stderr
    # The same check notices a broken unit (systemd ignores unknown keys with only a warning, exit code 0).
    broken = _verify(_unit_copy(tmp_path, UNIT.read_text().replace("Type=notify", "Type=notfy")))
    assert "notfy" in broken.stdout + broken.stderr


@analyze
def test_unit_is_hardened(tmp_path: Path) -> None:
    s = _settings(UNIT.read_text())
    assert s["Type"] == "notify" and s["NotifyAccess"] == "main"
    assert s["WatchdogSec"] and s["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert s["ProtectSystem"] == "strict" and s["CapabilityBoundingSet"] == "" and s["NoNewPrivileges"] == "true"
    assert s["PrivateTmp"] == "true" and s["ProtectHome"] == "true" and int(s["LimitNOFILE"]) >= 100000
    assert "ReadWritePaths" in _settings(DROP_IN.read_text())
    assert s["LimitNICE"] == "+0"  # the move threads' swap back at nice 0 without a capability (priority.py)
    # The swap's locked section under SCHED_FIFO 1, no higher and without a capability (priority.locked_section).
    assert s["LimitRTPRIO"] == "1" and s.get("RestrictRealtime", "false") == "false"
    got = subprocess.run(["systemd-analyze", "security", "--offline=true", str(_unit_copy(tmp_path))],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", got.stdout)
    assert level is not None, got.stdout + got.stderr
    assert float(level.group(1)) <= 2.5, got.stdout  # systemd's scale: 0 most secure, 10 unprotected


BALANCE_UNIT = REPO / "systemd" / "mover-balance.service"


@analyze
def test_the_balancer_unit_verifies_cleanly_and_is_hardened(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "mover-audit"
    assert script.exists(), "the console script is installed by scripts/venv.sh"
    unit = tmp_path / BALANCE_UNIT.name
    unit.write_text(BALANCE_UNIT.read_text().replace("/opt/jbod-mover/.venv/bin/mover-audit", str(script)))
    got = _verify(unit)
    assert got.returncode == 0 and not (got.stdout + got.stderr).strip(), got.stdout + got.stderr
    s = _settings(BALANCE_UNIT.read_text())
    assert s["KillSignal"] == "SIGTERM" and s["SuccessExitStatus"] == "130" and s["RestartPreventExitStatus"] == "2"
    assert s["ProtectSystem"] == "strict" and s["CapabilityBoundingSet"] == "" and s["NoNewPrivileges"] == "true"
    assert s["DynamicUser"] == "true" and s["StateDirectory"] == "mover-balance"
    assert "MemoryDenyWriteExecute" not in s  # the Spark driver's JIT
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout)
    assert level is not None, security.stdout + security.stderr
    assert float(level.group(1)) <= 2.5, security.stdout


@pytest.fixture
def notify_socket(tmp_path: Path) -> NotifySocket:
    s = NotifySocket(tmp_path / "notify.sock")
    yield s
    s.close()


# WatchdogSec=0.4s: moverd pings every 0.2 s.
WATCHDOG_USEC = 400_000


def test_ready_status_and_watchdog_pings(tmp_path: Path, notify_socket: NotifySocket,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    with Moverd(tmp_path) as d:
        wait_for(lambda: notify_socket.lines("READY=1"), message="READY=1")
        assert "STATUS=moves: 0 running, 0 queued; log dirs: 0 of 2 offline; partitions: 0" in notify_socket.lines(
            "STATUS=")
        wait_for(lambda: len(notify_socket.lines("WATCHDOG=1")) >= 3, message="watchdog pings")
        # STATUS follows the broker: three partitions appear.
        raw_call(d.port, CREATE_TOPICS, 4, {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1}]})
        wait_for(lambda: any(s.endswith("partitions: 3") for s in notify_socket.lines("STATUS=")),
                 message="STATUS with 3 partitions")
        d.stop()
    assert notify_socket.lines("STOPPING=1")


def test_pings_stop_when_the_event_loop_is_wedged(tmp_path: Path, notify_socket: NotifySocket,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    # The 6th health probe blocks the asyncio loop for good, as a handler stuck in a blocking call would.
    monkeypatch.setenv("MOVERD_WEDGE_AT", "loop.probe:6")
    d = Moverd(tmp_path)
    try:
        d.start()
        wait_for(lambda: "not pinging the systemd watchdog" in d.log(), message="the watchdog to notice the wedge")
        pings = len(notify_socket.lines("WATCHDOG=1"))
        assert pings == 5  # every probe before the wedge was answered and pinged, none after it
        # Ten more ping periods: systemd would have restarted the daemon by now; no ping may arrive.
        time.sleep(10 * WATCHDOG_USEC / 2 / 1e6)
        assert len(notify_socket.lines("WATCHDOG=1")) == pings
        assert d.proc is not None and d.proc.poll() is None  # alive but wedged: exactly what the watchdog is for
        with RawClient(d.port) as c:  # the Kafka listener, on the wedged loop, answers nothing either
            c.send(c.request_bytes(METADATA, 1, {"topics": None}))
            c.sock.settimeout(1.0)
            with pytest.raises(TimeoutError):
                c.sock.recv(1)
    finally:
        d.kill()


# The unit's sandbox, as far as it can be made without systemd as PID 1: ProtectSystem=strict with ReadWritePaths=
# (a private mount namespace whose root is read-only but for the broker's dir), User= a non-root user,
# NoNewPrivileges=, an empty CapabilityBoundingSet= and AmbientCapabilities=. Not emulated: the system call filter,
# the address family and namespace restrictions, the kernel protections.
SANDBOX_UID = 65534  # nobody
SANDBOX = ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
           'set -e; rw="$1"; shift; mount --bind / /; mount -o remount,bind,ro /; '
           'mount --bind "$rw" "$rw"; mount -o remount,bind,rw "$rw"; '
           f"exec setpriv --reuid={SANDBOX_UID} --regid={SANDBOX_UID} --clear-groups --no-new-privs "
           '--bounding-set=-all --inh-caps=-all "$@"', "sandbox")


@pytest.fixture
def broker_home() -> Path:
    """A dir the sandbox's user may use: pytest's tmp_path sits under a root-only 0700 dir."""
    with tempfile.TemporaryDirectory(prefix="moverd-sandbox-", dir="/var/tmp") as d:
        home = Path(d)
        os.chown(home, SANDBOX_UID, SANDBOX_UID)
        yield home


def test_moverd_works_inside_the_units_sandbox(broker_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The unit's user must be able to read the install. A checkout inside a root-only dir (`mktemp -d` makes 0700
    # ones) is not, and no daemon could run from it as that user: say so instead of failing on an ImportError.
    readable = subprocess.run([*SANDBOX, str(broker_home), sys.executable, "-c", "import mover.daemon, kazoo"],
                              capture_output=True, text=True, timeout=60)
    if readable.returncode != 0 and "ModuleNotFoundError" in readable.stderr:
        pytest.skip(f"uid {SANDBOX_UID} cannot read this checkout ({REPO}: a parent dir is not searchable by "
                    "others), so the sandboxed unit could not run from it")
    probe = subprocess.run([*SANDBOX, str(broker_home), sys.executable, "-c", "open('/var/tmp/escape', 'w')"],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr, probe  # the sandbox is real
    notify = NotifySocket(broker_home / "notify.sock")
    try:
        (broker_home / "notify.sock").chmod(0o666)  # systemd's socket accepts the service's user
        monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
        monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
        port = free_port()
        d = Moverd(broker_home, props={"metrics.listener": f"http://127.0.0.1:{port}"},
                   prefix=(*SANDBOX, str(broker_home)))
        with d, RawClient(d.port) as c:
            wait_for(lambda: notify.lines("READY=1") and len(notify.lines("WATCHDOG=1")) >= 2,
                     message="READY and pings from inside the sandbox")
            assert produce(c, "t", 0, make_batch([b"x" * 1000] * 100))["error_code"] == 0
            source = dir_of(d.dirs, "t", 0)
            dest = next(x for x in d.dirs if x != source)
            move(c, d.dirs, "t", 0, dest)  # renames and fsyncs in the log dirs
            assert (dest / "t-0").stat().st_uid == SANDBOX_UID  # written by the sandbox's user, not root
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert b"mover_moves_ended_total" in r.read()
            with open(d.config, "a") as f:
                f.write("intra.broker.throttled.rate=4242\n")
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "intra.broker.throttled.rate changed from (unset) to 4242; applied" in d.log(),
                     message="the reload")
            assert d.stop() == 0, d.log()
            # Without LimitNICE=+0 (which this container cannot grant: its hard RLIMIT_NICE is 0) the move thread,
            # copying at nice 19, may not come back to 0 for the swap: said once, and the move above completed.
            # Nor LimitRTPRIO=1 (its hard RLIMIT_RTPRIO is 0 too): the swap's locked section is refused SCHED_FIFO,
            # said once, and runs at the thread's nice.
            refused = [line for line in d.log().splitlines() if "could not set" in line]
            assert len(refused) <= 2, refused
            assert all("nice value 0" in line or "SCHED_FIFO 1" in line for line in refused), refused
    finally:
        notify.close()
