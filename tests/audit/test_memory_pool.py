"""mover-audit runs Arrow on the C library's allocator (mover/audit/cli.py; docs/audit.md#performance, fourth round)
and numpy without transparent huge pages (docs/audit.md, "Huge pages"):
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
