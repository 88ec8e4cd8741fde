"""Named crash points for the crash tests: the daemon kills itself with SIGKILL at a chosen point. And named fail
points: an injected OSError where a real one could happen, for the tests of what a failure leaves behind.

Set `MOVERD_CRASH_AT=<point>` (optionally `<point>:<n>` to crash at the n-th time the point is reached) in the
daemon's environment. Unset, `crash_point` is one dictionary lookup. SIGKILL, not an exception, so that nothing
(no finally, no atexit, no buffered write) runs after the point: exactly what a power cut or `kill -9` leaves.
"""

from __future__ import annotations

import errno
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
    "create.partition",
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


# `MOVERD_FAIL_AT=<point>:<n>:<ERRNO name>` (e.g. `create.partition:300:EMFILE`): the n-th time the point is
# reached, `fail_point` raises OSError(ERRNO) as the storage call there would.
_fail_spec = os.environ.get("MOVERD_FAIL_AT", "")
_fail_target, _, _fail_rest = _fail_spec.partition(":")
_fail_nth, _, _fail_errno = _fail_rest.partition(":")
_fail_count = 0


def fail_point(name: str) -> None:
    global _fail_count
    if not _fail_target or name != _fail_target:
        return
    with _lock:
        _fail_count += 1
        if _fail_count == int(_fail_nth or 1):
            code = getattr(errno, _fail_errno or "EIO")
            raise OSError(code, f"{os.strerror(code)} (injected at {name})")
