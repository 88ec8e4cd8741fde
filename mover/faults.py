"""Named crash points for the crash tests: the daemon kills itself with SIGKILL at a chosen point.

Set `MOVERD_CRASH_AT=<point>` (optionally `<point>:<n>` to crash at the n-th time the point is reached) in the
daemon's environment. Unset, `crash_point` is one dictionary lookup. SIGKILL, not an exception, so that nothing
(no finally, no atexit, no buffered write) runs after the point: exactly what a power cut or `kill -9` leaves.
"""

from __future__ import annotations

import os
import signal
import threading

POINTS = (
    "move.before_copy",
    "move.mid_copy",
    "move.locked",
    "move.between_renames",
    "move.after_swap",
    "delete.during",
)

_spec = os.environ.get("MOVERD_CRASH_AT", "")
_target, _, _nth = _spec.partition(":")
_count = 0
_lock = threading.Lock()


def crash_point(name: str) -> None:
    global _count
    if not _target or name != _target:
        return
    with _lock:
        _count += 1
        if _count >= int(_nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
