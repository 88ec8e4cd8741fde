"""Named fault points for the crash and watchdog tests: the daemon kills or wedges itself at a chosen point.

`MOVERD_CRASH_AT=<point>` (optionally `<point>:<n>` to act at the n-th time the point is reached) makes the daemon
kill itself with SIGKILL there. SIGKILL, not an exception, so that nothing (no finally, no atexit, no buffered
write) runs after the point: exactly what a power cut or `kill -9` leaves.

`MOVERD_WEDGE_AT=<point>[:<n>]` makes the thread that reaches the point block forever, which is what a deadlock or
a handler stuck in a system call looks like from outside (the process lives, that thread answers nothing). The
systemd watchdog test wedges the event loop this way: SIGSTOP would freeze every thread, the watchdog pinger too,
and so could not tell a wedged loop from a stopped process.

`MOVERD_PAUSE_AT=<point>:<seconds>` makes the thread that first reaches the point sleep that long there, before it
crashes if MOVERD_CRASH_AT names the same point: a window a crash test produces into (a swap's unlocked renames,
where appends go on), held open long enough that its appends certainly land in it.

Unset, each point is one comparison.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

POINTS = (
    "move.before_copy",
    "move.mid_copy",
    "move.retired",  # the source renamed to -delete (durably), still serving appends; the lock not taken yet
    "move.locked",
    "move.switched",  # the copy serves (still named .move); the promotion rename not done yet
    "move.after_swap",
    "delete.during",
    "delete.rename",  # a DeleteTopics unpublished its topic; its partition dirs not renamed yet
    "create.partition",
)

# Where a thread can be wedged: the systemd watchdog's probe, run on the asyncio loop (mover/daemon/systemd.py).
WEDGE_POINTS = ("loop.probe",)


class _Point:
    def __init__(self, spec: str) -> None:
        target, _, nth = spec.partition(":")
        self.target = target
        self.nth = int(nth or 1)
        self.count = 0
        self.lock = threading.Lock()

    def reached(self, name: str) -> bool:
        if not self.target or name != self.target:
            return False
        with self.lock:
            self.count += 1
            return self.count >= self.nth


_crash = _Point(os.environ.get("MOVERD_CRASH_AT", ""))
_wedge = _Point(os.environ.get("MOVERD_WEDGE_AT", ""))
_pause_spec, _, _pause_seconds = os.environ.get("MOVERD_PAUSE_AT", "").rpartition(":")
_pause = _Point(_pause_spec)


def crash_point(name: str) -> None:
    if _pause.target and _pause.count == 0 and _pause.reached(name):
        time.sleep(float(_pause_seconds))
    if _crash.target and _crash.reached(name):
        os.kill(os.getpid(), signal.SIGKILL)


def wedge_point(name: str) -> None:
    if _wedge.target and _wedge.reached(name):
        threading.Event().wait()  # never set: this thread is stuck for good, as a real deadlock would leave it


# `MOVERD_FAIL_AT=<point>:<n>:<ERRNO name>` (e.g. `create.partition:300:EMFILE`): the n-th time the point is
# reached, `fail_point` raises OSError(ERRNO) as the storage call there would.
_fail_point, _, _fail_errno = os.environ.get("MOVERD_FAIL_AT", "").rpartition(":")
_fail = _Point(_fail_point)
_failed = False


def fail_point(name: str) -> None:
    global _failed
    if _fail.target and not _failed and _fail.reached(name):
        _failed = True  # once: a retry after the failure must succeed
        code = getattr(errno, _fail_errno or "EIO")
        raise OSError(code, f"{os.strerror(code)} (injected at {name})")
