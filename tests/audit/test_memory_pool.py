"""mover-audit runs Arrow on the C library's allocator (mover/audit/cli.py; docs/audit.md#performance, fourth round)
and numpy without transparent huge pages (docs/forecast-performance.md, "Huge pages"):
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


# numpy's transparent huge pages: off in the command's process (numpy imported before main or after) and in the
# processes it starts, unless the operator set NUMPY_MADVISE_HUGEPAGE. _set_madvise_hugepage returns the setting
# it replaces.
HUGE_PAGES = """
import subprocess, sys
if sys.argv[1] == "numpy first":
    import numpy
from mover.audit import cli
cli.main(["--help"])
import numpy
probe = "import numpy; print(numpy._core.multiarray._set_madvise_hugepage(True))"
child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
print("RESULT", numpy._core.multiarray._set_madvise_hugepage(True), child)
"""


@pytest.mark.parametrize("when", ["numpy first", "numpy after"])
@pytest.mark.parametrize(("given", "huge"), [(None, "False"), ("1", "True")])
def test_the_commands_ask_for_no_huge_pages_unless_told_otherwise(when: str, given: str | None, huge: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given
    out = subprocess.run([sys.executable, "-c", HUGE_PAGES, when], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    assert line.split()[1:] == [huge, huge]


# Threads' allocations from the one heap (cli._keep_freed_memory: M_ARENA_MAX 1), so that what Arrow's reader threads
# free is reused by the main thread's arrays: glibc's malloc_stats (on stderr) lists an "Arena N" per heap in use.
ARENAS = """
import ctypes, sys, threading
import numpy as np
if sys.argv[1] == "command":
    from mover.audit import cli
    cli._keep_freed_memory()
def work():
    for _ in range(20):
        np.ones(1 << 16)
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


@pytest.mark.parametrize(("how", "one"), [("command", True), ("plain", False)])
def test_the_commands_keep_every_thread_on_one_heap(how: str, one: bool) -> None:
    err = subprocess.run([sys.executable, "-c", ARENAS, how], capture_output=True, text=True, timeout=120,
                         check=True).stderr
    arenas = [line for line in err.splitlines() if line.startswith("Arena ")]
    assert (len(arenas) == 1) == one, err
