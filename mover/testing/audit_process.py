"""A `mover-audit` subcommand as an operator runs it, in its own process (so a test can kill it -9), its output
lines kept as they come: what the real-cluster tests and bench/balance_cluster.py drive execute and balance with."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable

from mover.testing import prefork
from mover.testing.wait import WaitTimeout, wait_for

DEFAULT_TIMEOUT_S = 300.0
OUTPUT_TAIL = 40  # lines of the process's output a timed-out wait shows


class AuditProcess:
    def __init__(self, command: str, *args: str, timeout: float = DEFAULT_TIMEOUT_S,
                 echo: Callable[[str], None] | None = None) -> None:
        """`echo`: also given each line as it comes (a bench showing the run)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.command = command
        self.timeout = timeout
        self.echo = echo
        self.proc = prefork.Popen([sys.executable, "-m", "mover.audit", command, *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.echo is not None:
                self.echo(line.rstrip("\n"))

    def said(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in list(self.lines))

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        def seen() -> bool:
            if condition():
                return True
            assert self.proc.poll() is None, \
                f"{self.command} exited ({self.proc.returncode}) before {what}:\n{self.output}"
            return False

        try:
            wait_for(seen, timeout or self.timeout, what, interval=0.05)
        except WaitTimeout as e:
            # What the process was doing when the wait gave up: without it a timeout on a loaded machine says
            # nothing of why (a balancer still moving, paused, or stuck).
            tail = "\n".join(self.lines[-OUTPUT_TAIL:])
            raise WaitTimeout(f"{e}; the last lines of {self.command}:\n{tail}") from None

    def wait_said(self, pattern: str) -> None:
        self.wait_until(lambda: self.said(pattern), f"{self.command} to say {pattern!r}")

    def wait(self, timeout: float | None = None) -> int:
        try:
            code = self.proc.wait(timeout or self.timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"{self.command} did not end in {timeout or self.timeout} s:\n{self.output}") from None
        self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)
