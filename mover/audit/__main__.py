"""`python -m mover.audit ARGS` is `mover-audit ARGS`, and this file is what spark-submit is given (it wants a .py):

    MAIN="$(python -c 'import mover.audit as a; print(a.__path__[0])')/__main__.py"
    spark-submit --master spark://HOST:7077 "$MAIN" demo

Same exit codes and one-line errors as the console script: both are mover.audit.cli.main.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as a file (spark-submit runs `python <this file>`): Python put this file's directory first on sys.path, where
    # audit.py, spark.py, report.py ... would shadow any top-level module of the same name. The package root holding
    # this file takes its place, so the `mover` imported is the one this file belongs to (a worktree's, not whatever
    # else is installed).
    here = Path(__file__).resolve().parent
    if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == here:
        sys.path[0] = str(here.parents[1])

from mover.audit.cli import main  # noqa: E402 (after the sys.path fix above)

if __name__ == "__main__":
    sys.exit(main())
