"""`mover-reassign` as an operator runs it against a real cluster (tests/kafka/reassign/): a run to its end
(`mover_reassign`), or one started (`start_reassign`) whose stdout a test follows line by line (`Lines`) to act at a
given point of it (Ctrl-C, --cancel, a broker killed); and the reassignment JSON file it is given. Each run keeps its
request state under `state_dir` ($MOVER_REASSIGN_STATE_DIR).

    f = reassignment_file(tmp_path / "r.json", "t", {0: [4, 5, 1]})
    run = Lines(start_reassign(state_dir, "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file",
                               str(f)))
    rid = request_id(run)
    run.wait("step 1 [")
    rc, out = run.finish()
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from mover.testing import prefork
from mover.testing.wait import wait_for


def state_env(state_dir: Path) -> dict[str, str]:
    """This process's environment, with the tools' request state kept under `state_dir`."""
    return {**os.environ, "MOVER_REASSIGN_STATE_DIR": str(state_dir)}


def mover_reassign(state_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return prefork.run([sys.executable, "-m", "mover.cli.reassign_partitions", *args], capture_output=True,
                       text=True, env=state_env(state_dir), timeout=timeout, stdin=subprocess.DEVNULL)


def start_reassign(state_dir: Path, *args: str) -> subprocess.Popen[str]:
    return prefork.Popen([sys.executable, "-m", "mover.cli.reassign_partitions", *args], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=state_env(state_dir),
                         stdin=subprocess.DEVNULL)


class Lines:
    """A running mover-reassign's stdout, read on a thread, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, text: str, timeout: float = 120) -> str:
        def found() -> str | None:
            hit = next((line for line in self.lines if text in line), None)
            if hit is None and self.proc.poll() is not None:
                self._thread.join(5)
                hit = next((line for line in self.lines if text in line), None)
                if hit is None:
                    raise AssertionError(f"mover-reassign exited {self.proc.returncode} before {text!r}:\n"
                                         + "\n".join(self.lines) + self.proc.stderr.read())  # type: ignore[union-attr]
            return hit
        return wait_for(found, timeout, f"a line with {text!r}", interval=0.05)

    def finish(self, timeout: float = 240) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        self._thread.join(10)
        return rc, "\n".join(self.lines)


def request_id(run: Lines) -> int:
    return int(run.wait("Request id: ").split()[2])


def reassignment_file(path: Path, topic: str, targets: dict[int, list[int]]) -> Path:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in sorted(targets.items())]}))
    return path
