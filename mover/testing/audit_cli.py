"""mover-audit's commands run in the test's own process (mover.audit.cli.main), as a user runs them, on the test run's
Spark session (tests/conftest.py's `spark`, which the commands reuse): `run(capsys, *argv)` gives the exit code and
what the command printed; SPARK, the options the tests give a command for a small local Spark. (For a command in a
process of its own, which a test can kill: mover.testing.audit_process.)

    code, out, err = run(capsys, "plan", "--snapshot", str(latest), "--out", str(tmp_path / "p"), *SPARK)
"""

from __future__ import annotations

from typing import Protocol

from mover.audit import cli

SPARK = ["--shuffle-partitions", "2"]


class Captured(Protocol):
    """What the command printed, read and reset: pytest's `capsys` (this module does not import pytest)."""

    def readouterr(self) -> tuple[str, str]: ...


def run(capsys: Captured, *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv])
    out, err = capsys.readouterr()
    return code, out, err
