"""mover-audit runs Arrow on the C library's allocator (mover/audit/cli.py; docs/audit.md#performance, fourth round):
set before pyarrow is imported, inherited by the processes it starts, and an operator's own setting left as it is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# What a command's process ends up with: the setting, pyarrow's pool, and what a child process sees.
PROBE = """
import subprocess, sys
from mover.audit import cli
cli.main(["--help"])
import os, pyarrow
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))"],
                       capture_output=True, text=True, check=True).stdout.strip()
print("RESULT", os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), pyarrow.default_memory_pool().backend_name, child)
"""


@pytest.mark.parametrize(("given", "pool"), [(None, "system"), ("jemalloc", "jemalloc")])
def test_the_commands_take_the_system_allocator_unless_told_otherwise(given: str | None, pool: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if given is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = given
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    assert line.split()[1:] == [pool, pool, pool]
