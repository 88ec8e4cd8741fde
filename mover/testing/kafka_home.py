"""Where the real Apache Kafka the tests and benches run against is found. Apart from starting it: a test module or
bench first asks only whether there is one (None: it skips with SKIP_REASON), and a git worktree must find the one
shared Kafka beside its main checkout."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KAFKA_DIST = "kafka_2.13-3.7.0"
SHARED_HOME = REPO.parent / "shared" / "kafka" / KAFKA_DIST
SKIP_REASON = (f"no Apache Kafka: set $KAFKA_HOME to an unpacked Kafka 3.x, or put {KAFKA_DIST} at "
               f"{REPO.parent / 'shared' / 'kafka'}")


def _main_checkout() -> Path | None:
    """The main checkout when this one is a `git worktree` (its .git is a file naming <main>/.git/worktrees/NAME):
    a worktree sits elsewhere, but the shared Kafka is beside the main checkout."""
    try:
        text = (REPO / ".git").read_text()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text.split(":", 1)[1].strip())
    return gitdir.parents[2] if gitdir.parent.name == "worktrees" else None


def kafka_home() -> Path | None:
    """The Kafka installation to test against: $KAFKA_HOME if set and it holds bin/kafka-server-start.sh, else the
    shared 3.7.0 beside the checkout (or beside the main checkout of a git worktree); None when neither exists (tests
    skip with SKIP_REASON)."""
    candidates = [Path(os.environ["KAFKA_HOME"])] if os.environ.get("KAFKA_HOME") else []
    candidates.append(SHARED_HOME)
    main = _main_checkout()
    if main is not None:
        candidates.append(main.parent / "shared" / "kafka" / KAFKA_DIST)
    for home in candidates:
        if (home / "bin" / "kafka-server-start.sh").is_file():
            return home.resolve()
    return None
