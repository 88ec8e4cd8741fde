"""A real `moverd` process for end-to-end tests and benches: its own config in a temp dir, a free port, SIGTERM to
stop.

    with Moverd(tmp_path) as d:             # two log dirs tmp_path/d1, tmp_path/d2, a free port on 127.0.0.1
        d.bootstrap                         # "127.0.0.1:PORT", read from moverd's --ready-file
        d.dirs                              # [Path, Path]
        d.restart()                         # SIGTERM, wait for exit 0, start again on the same port

Options: `props={...}` adds server.properties keys; `extra_lines="k=v\\n..."` appends raw lines after them (a key set
twice, say); `prefix=SETPRIV` runs it without DAC capabilities; `env={...}` adds environment variables to every start
(mover/faults.py's MOVERD_CRASH_AT / MOVERD_PAUSE_AT for a crash test, which empties `d.env` before starting it
again). The daemon's stderr goes to `tmp_path/moverd.log` so a failing test can show it.

`run_moverd(config)` runs the `moverd` console script on a configuration it must refuse, and returns its exit code
and output; a daemon that starts instead is stopped and reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from mover.testing import prefork
from mover.testing.ports import free_port
from mover.testing.wait import WaitTimeout, wait_for

# The checkout: moverd runs from it (the package is installed editable) and its .venv holds the console scripts.
REPO = Path(__file__).resolve().parents[2]
SETPRIV = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
# The console script an operator runs, installed by `pip install -e` beside the interpreter running the tests.
MOVERD_SCRIPT = Path(sys.executable).with_name("moverd")
# Start-up of a small broker takes well under a second; this only bounds how long a broken start hangs a test.
START_TIMEOUT_S = 60.0


def broker_props(dirs: list[Path]) -> dict[str, Any]:
    """The server.properties every test broker starts from: broker 0 on the given dirs, a free loopback port, and
    moved-away copies deleted after 100 ms instead of Kafka's minute so a test sees them go. The port is chosen
    below the ephemeral range (mover/testing/ports.py), not the kernel's for port 0: a restart binds it again, and
    between the kill and the restart another test's client connection could take an ephemeral one ("Address already
    in use" after a kill -9, seen once in CI)."""
    return {
        "broker.id": 0,
        "log.dirs": ",".join(map(str, dirs)),
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.segment.delete.delay.ms": 100,
    }


class Moverd:
    def __init__(self, tmp_path: Path, *, props: dict[str, Any] | None = None, prefix: tuple[str, ...] = (),
                 n_dirs: int = 2, dirs: list[Path] | None = None, extra_lines: str = "",
                 env: dict[str, str] | None = None) -> None:
        self.tmp = tmp_path
        self.env = dict(env or {})
        self.dirs = dirs if dirs is not None else [tmp_path / f"d{i + 1}" for i in range(n_dirs)]
        self.prefix = prefix
        self.props = broker_props(self.dirs)
        self.props.update(props or {})
        self.extra_lines = extra_lines
        self.config = tmp_path / "server.properties"
        self.ready_file = tmp_path / "moverd.ready"
        self.log_file = tmp_path / "moverd.log"
        self.proc: subprocess.Popen[bytes] | prefork.ForkedProcess | None = None
        self.bootstrap = ""

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def start(self) -> Moverd:
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()) + self.extra_lines)
        self.ready_file.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("MOVERD_CRASH_AT", "MOVERD_PAUSE_AT")}
        env.update(self.env)
        with open(self.log_file, "ab") as log:
            # Through the zygote (mover/testing/prefork.py) unless a prefix such as setpriv needs an exec of its own.
            self.proc = prefork.Popen(
                [*self.prefix, sys.executable, "-m", "mover.daemon", "--config", str(self.config),
                 "--ready-file", str(self.ready_file)],
                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"moverd exited with {proc.returncode}:\n{self.log()}")
            return self.ready_file.exists()

        try:
            wait_for(ready, START_TIMEOUT_S, "moverd to write its ready file")
        except WaitTimeout as e:
            raise TimeoutError(f"moverd not ready:\n{self.log()}") from e
        self.bootstrap = self.ready_file.read_text().strip()
        # Restarts keep the port, so clients that cached the address find the broker again.
        self.props["listeners"] = f"PLAINTEXT://{self.bootstrap}"
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> Moverd:
        assert self.stop() == 0, self.log()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def __enter__(self) -> Moverd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            try:
                self.stop()
            except subprocess.TimeoutExpired:
                self.kill()


class Refused(NamedTuple):
    returncode: int
    stderr: str


def run_moverd(config: Path, *, cwd: Path, timeout: float = START_TIMEOUT_S) -> Refused:
    """Run `moverd --config CONFIG` expecting it to exit without serving (a refused configuration). If it becomes
    ready instead it is stopped and AssertionError is raised: the configuration was accepted."""
    assert MOVERD_SCRIPT.exists(), f"{MOVERD_SCRIPT} is missing: run .venv/bin/pip install -e '.[test]'"
    ready = cwd / "moverd.ready"
    ready.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MOVERD_CRASH_AT", "NOTIFY_SOCKET")}
    proc = prefork.Popen([str(MOVERD_SCRIPT), "--config", str(config), "--ready-file", str(ready)], cwd=cwd,
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: proc.poll() is not None or ready.exists(), timeout, "moverd to exit or become ready")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=timeout)
    assert not ready.exists(), f"moverd started on a configuration it should refuse:\n{stderr}"
    return Refused(proc.returncode if proc.returncode is not None else -1, stderr)
