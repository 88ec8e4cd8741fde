"""mover-audit: the fleet's disks on Spark. Subcommands, options and exit codes: docs/audit.md.

    mover-audit synth   --out ROOT [--clusters N --brokers N --disks N --replicas-per-disk N --seed N]
    mover-audit collect ...                                  (brokers -> a snapshot)
    mover-audit audit   --snapshot DIR | --snapshots ROOT [--fail-on imbalance,offline,stuck]
    mover-audit forecast --snapshots ROOT [--since 7d]         (time to 90% and to full of every disk)
    mover-audit plan    --snapshot DIR --out PLANDIR [--drain BROKER:DIR] [--exclude-topics RE]
    mover-audit report  --audit DIR [--plan PLANDIR] --out report.html
    mover-audit execute --plan PLANDIR ...                   (a plan -> moves, in steps)
    mover-audit balance --state-dir DIR --band 5% ...       (collect -> plan -> execute until stopped)
    mover-audit demo    [--out DIR]

Each subcommand is a module `mover/audit/<name>.py` (balance: mover/audit/balancer/command.py, balance.py being the
band's definition) with `add_arguments(parser)` and `run(args) -> int`, imported only
when it is the one asked for: `mover-audit --help` starts no JVM and imports no pandas.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

from mover.audit.errors import AuditInputError
from mover.cli.arguments import Parser
from mover.cli.common import EXIT_USAGE, CliError, run_command

PROG = "mover-audit"

# name -> (module, one-line help). Order is the order of the pipeline.
COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("mover.audit.synth", "generate a synthetic fleet snapshot (demo, tests, benchmarks)"),
    "collect": ("mover.audit.collect", "ask every broker of every cluster for its log dirs; write a snapshot"),
    "audit": ("mover.audit.audit", "disk balance, offline dirs, stuck moves of a snapshot"),
    "forecast": ("mover.audit.forecast", "when each disk reaches 90% and fills, from the snapshots' history"),
    "plan": ("mover.audit.plan", "log-dir moves that bring every disk into its broker's band"),
    "report": ("mover.audit.report", "one self-contained HTML report of an audit (and a plan)"),
    "execute": ("mover.audit.execute", "carry a plan out in throttled steps"),
    "balance": ("mover.audit.balancer.command", "collect -> plan -> execute in a loop, keeping every disk in band"),
    "demo": ("mover.audit.demo", "synth -> audit -> plan -> report on a small generated fleet"),
}



def _load(name: str) -> ModuleType | None:
    """The subcommand's module, or None when this installation does not have it (yet)."""
    module_path = COMMANDS[name][0]
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as e:
        if e.name == module_path:
            return None
        if e.name is not None and e.name.split(".")[0] in ("pyspark", "pandas", "pyarrow", "numpy", "matplotlib"):
            raise CliError(f"{name} needs the audit extra: pip install 'jbod-mover[audit]' "
                           f"({e.name} is missing)") from None
        raise


def _chosen(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: list[str]) -> tuple[Parser, ModuleType | None]:
    parser = Parser(prog=PROG, description="Audit, plan and fix the disk balance of a whole Kafka fleet, on Spark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    chosen = _chosen(argv)
    module = None
    for name, (_, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        if name == chosen:
            module = _load(name)
            if module is None:
                raise CliError(f"{name} is not available in this installation", EXIT_USAGE)
            module.add_arguments(p)
    return parser, module


def _keep_freed_memory() -> None:
    """The C library's allocator keeps what this process frees for its next allocations instead of handing it back
    to the kernel: every large block (above 128 KB-32 MB) is otherwise a mapping of its own, unmapped when freed, and
    its next use faults zeroed pages in again. On this VM that is 3-10 us a page: the forecast on the driver of 20M
    replicas spent 51 of its 109 s of CPU in the kernel, much of it on memory it had already used and given back
    (docs/forecast-performance.md, "Memory the driver gives back"). The process's peak stays what it was, and what it
    keeps is gone when the command exits (not set for `balance`, which runs until stopped). A C library without mallopt
    (not glibc) keeps its ways."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8  # glibc's malloc.h
    mallopt(m_mmap_max, 0)  # large blocks from the heap, which is reused, not from mappings of their own
    mallopt(m_trim_threshold, 2**31 - 1)  # the heap's free top kept (up to 2 GB past it handed back)
    # One heap for every thread: Arrow's reader threads (its buffers come from this allocator: main) otherwise take
    # arenas of their own, whose freed buffers the main thread's arrays cannot reuse. The append of 20M replicas
    # peaked 200-400 MB lower (docs/forecast-performance.md, "Why first-touched memory costs so much here").
    mallopt(m_arena_max, 1)


def _no_huge_pages() -> None:
    """numpy asks the kernel for transparent huge pages (madvise) for every array of 4 MB or more. On this VM a huge
    page costs far more to fault in than its 512 small ones: the forecast on the driver of 20M replicas spent 19 s
    of its 55 s of CPU in the kernel, 6 s without (docs/forecast-performance.md, "Huge pages"). numpy reads the setting
    at import (NUMPY_MADVISE_HUGEPAGE, inherited by the planner's helper and Spark's Python workers); when numpy was
    imported before, its switch is turned too. An operator's own setting stands."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    if os.environ["NUMPY_MADVISE_HUGEPAGE"] == "0" and "numpy" in sys.modules:
        core = getattr(sys.modules["numpy"], "_core", None)
        switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
        if switch is not None:
            switch(False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _no_huge_pages()
    if "pyarrow" not in sys.modules:
        # Arrow's buffers from the C library's allocator, not mimalloc (pyarrow's default): mimalloc gives freed
        # pages back to the kernel within milliseconds and the next read, filter or take faults them in again,
        # zeroed, which cost `plan` of 20M replicas 8-12 s of system time against 4-5 s (docs/audit.md#performance).
        # Inherited by the planner's helper process and Spark's Python workers; an operator's own setting stands.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if argv[:1] != ["balance"]:  # balance runs until stopped: its rounds hand memory back between them
        _keep_freed_memory()

    def body() -> int:
        parser, module = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help, or a usage error already printed: its code, also when called in-process
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        assert module is not None  # parse_args exits unless a known subcommand was given
        try:
            return int(module.run(args))
        except AuditInputError as e:
            # The library says what is wrong; the command line says what it means for the exit code.
            raise CliError(str(e), EXIT_USAGE) from None

    try:
        return run_command(PROG, body, explain=_spark_failure)
    finally:
        spark_module = sys.modules.get("mover.audit.spark")
        if spark_module is not None:
            spark_module.stop_if_created_here()


def _spark_failure(e: Exception) -> str | None:
    if type(e).__module__.split(".")[0] not in ("pyspark", "py4j"):
        return None
    # Spark failed while running a job (a file that cannot be read halfway through, a lost executor): its own
    # message, on one line.
    from mover.audit.snapshot import spark_error_line

    return f"Spark: {spark_error_line(e)}"


if __name__ == "__main__":
    sys.exit(main())
