"""The errors mover-audit's library code raises (snapshots, fleet sources, Spark, execute's saved state).

They carry no exit code: the command line (mover/audit/cli.py) prints the one line and chooses the code, 2 for
`AuditInputError` (the operator's input, as a usage error) and 1 for the rest. Both are AdminErrors, the admin
library's user-facing failure, so code written against mover/admin catches them too.
"""

from __future__ import annotations

from pathlib import Path

from mover.admin.common import AdminError


class AuditError(AdminError):
    """A failure the user must fix, said in one line: a missing snapshot, an unreachable Spark master, a plan dir
    that cannot be written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class AuditInputError(AuditError):
    """The operator's input is wrong: a fleet or capacity file, options that do not fit together."""


class ForecastBusy(AuditError):
    """Another forecast holds the fleet root's kept history (forecast_columns.locked): two at once are refused."""


def make_dir(path: Path, said: Path | None = None) -> None:
    """`path` made with its parents (there already is fine), or an AuditError in one line naming `said` (default
    `path`): the output dirs every command writes, before any work that would be lost."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AuditError(f"cannot create {said or path}: {e.strerror or e}") from None
