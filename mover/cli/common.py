"""What every mover-log-dirs action shares: the one-line user error, replica names, Kafka's exception names."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mover.config import ConfigError
from mover.security.client_config import ClientSecurity
from mover.wire.errors import ErrorCode

# Exit codes (docs/cli.md). 2 is argparse's own for usage errors.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
# --verify / --progress: nothing failed, but some replica is still being moved. Scripts loop while it is 3.
EXIT_IN_PROGRESS = 3

KAFKA_ERRORS_PACKAGE = "org.apache.kafka.common.errors."
# Kafka's exception class for the codes whose name does not follow from the enum name (Errors.java).
_EXCEPTION_NAMES = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollowerException",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    ErrorCode.LOG_DIR_NOT_FOUND: "LogDirNotFoundException",
}


class CliError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code `code`."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


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


@dataclass(frozen=True, order=True)
class Replica:
    """Kafka's TopicPartitionReplica; str() is Kafka's `topic-partition-broker`."""

    topic: str
    partition: int
    broker: int

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}-{self.broker}"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def exception_class_name(code: int) -> str:
    """The fully qualified class of the exception Kafka's admin client raises for `code`; kafka-log-dirs.sh
    prints `getClass().getName()`, so the package is part of the output."""
    simple = _EXCEPTION_NAMES.get(code)  # type: ignore[call-overload]
    if simple is None:
        words = error_name(code).split("_")
        simple = "".join(w.capitalize() for w in words)
        simple = re.sub(r"Exception$", "", simple) + "Exception"
    return KAFKA_ERRORS_PACKAGE + simple
