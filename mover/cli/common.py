"""What every command line shares: exit codes, the one-line user error, Ctrl-C and broken pipes, --command-config."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from mover.admin.common import EXIT_ERROR, AdminError
from mover.config.broker import ConfigError
from mover.security.client_config import ClientSecurity

# Exit codes (docs/cli.md). 2 is argparse's own for usage errors.
EXIT_OK = 0
EXIT_USAGE = 2
# --verify / --progress: nothing failed, but some replica is still being moved. Scripts loop while it is 3.
EXIT_IN_PROGRESS = 3
# mover-audit audit --fail-on: a finding of a kind asked for was found (alerting tells it from a failure to run).
EXIT_FINDINGS = 3
EXIT_INTERRUPTED = 130  # stopped by the operator (Ctrl-C, SIGTERM) or told to stop: 128 + SIGINT, as a shell says

# The tools' one user-facing error (mover.admin.common): a line on stderr and its exit code.
CliError = AdminError


# Set to get the traceback of an unexpected exception instead of its one line.
DEBUG_ENV = "MOVER_DEBUG"


def run_command(prog: str, body: Callable[[], int], *,
                user_errors: tuple[type[Exception], ...] = (CliError,),
                explain: Callable[[Exception], str | None] = lambda e: None) -> int:
    """Run a command line tool's body; every way it can end becomes an exit code and at most one line on stderr.

    `user_errors` are the user's to fix (printed as they are; a CliError's own exit code, else EXIT_ERROR); `explain`
    turns an exception a tool knows about into its one-line error (None: unexpected, an internal error)."""
    try:
        return body()
    except user_errors as e:
        sys.stdout.flush()
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.code if isinstance(e, CliError) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `| head`: the reader is gone; stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as e:
        if os.environ.get(DEBUG_ENV):
            raise
        line = explain(e)
        if line is not None:
            print(f"{prog}: error: {line}", file=sys.stderr)
            return EXIT_ERROR
        print(f"{prog}: internal error: {type(e).__name__}: {first_line(e)} (set {DEBUG_ENV}=1 for a traceback)",
              file=sys.stderr)
        return EXIT_ERROR


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def load_command_config(path: str | Path, prog: str) -> ClientSecurity:
    """`--command-config FILE` (Kafka's client security keys): checked before any broker is contacted; a bad file is
    a usage error, and keys the tool does not use are warned about on stderr."""
    try:
        security = ClientSecurity.from_file(path)
    except ConfigError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    for warning in security.warnings:
        print(f"{prog}: warning: {path}: {warning}", file=sys.stderr)
    return security


@contextmanager
def handling_sigint(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Ctrl-C goes to `handler` for the block (the tools' "start nothing more, then leave" stops); off the main
    thread, where Python cannot install a handler, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
