"""A real ZooKeeper server for tests and benchmarks: Debian's `zookeeper` package run as a standalone server on a free
loopback port, with its data in a temp dir.

    with ZooKeeperServer(tmp_path) as zk:
        zk.connect_string            # "127.0.0.1:PORT"
        zk.stop(); zk.start()        # the same port and data: a ZooKeeper restart as an operator would do it

The server's output goes to `<dir>/zookeeper.log` so a failing test can show it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from mover.testing.ports import free_port

# Debian installs the server and its dependencies as jars here.
CLASSPATH = "/usr/share/java/*"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A JVM start on a loaded 2-core machine can take several seconds; this only bounds how long a broken start hangs.
START_TIMEOUT_S = 60.0


class ZooKeeperServer:
    def __init__(self, base_dir: Path, *, tick_ms: int = 200, port: int | None = None) -> None:
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        # A short tick lets tests expire sessions quickly: the minimum session timeout is 2 ticks. The maximum would
        # be 20 ticks (4 s), silently capping a test's long session (30 s, "the stale znode outlives the restart")
        # below the time a restart takes on a loaded machine: 60 s.
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,srvr,mntr,cons\n"
        )
        return cfg

    def start(self) -> None:
        cfg = self._write_config()
        env = dict(os.environ, ZOO_LOG4J_PROP="WARN,CONSOLE")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false",
                 "-cp", CLASSPATH, MAIN_CLASS, str(cfg)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            if self.ruok():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"zookeeper did not answer on {self.connect_string} within {START_TIMEOUT_S}s")

    def ruok(self) -> bool:
        """ZooKeeper's own liveness probe (four-letter word `ruok` -> `imok`)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
