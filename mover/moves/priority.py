"""CPU and I/O priority of the calling thread: a ReplicaMoveThread's copy runs below the request path.

Linux keeps a nice value and an I/O priority per thread (setpriority(PRIO_PROCESS, tid) and ioprio_set(WHO_PROCESS,
tid) address one thread), so a move thread can yield to the event loop and to the producers on the same cores and
disks without touching the rest of the daemon. `background()` lowers the calling thread's I/O priority for the whole
move; `copying()` lowers its CPU priority (nice 19) only around the copy's bulk system calls (copy_file_range, and a
throttled copy's writeback kick), which is where its CPU goes. Everything else a move thread does is Python holding
the GIL, which the event loop needs too: a thread at nice 19 preempted while holding the GIL (or inside the GIL's
hand-off) keeps the loop waiting until the scheduler picks the least favoured thread again (a priority inversion;
py-spy of moverd found the loop waiting for the GIL in 30-40% of its samples while a nice-19 move thread did its
bookkeeping: the rounds' file handling, the fsyncs, the copy's Log.open). So that bookkeeping runs at the daemon's
nice, and the GIL is released (inside the copy's system call) for nearly all the time the thread spends at 19.
`foreground()` raises the I/O priority back for the swap, which holds the replica lock.

Nice 19 is not the whole of the copy's cost. What it cannot lower: the scheduler lets a nice-19 thread that was
picked run out its slice before a waking producer thread gets that CPU, and the page cache and block layer work the
copy sets off (writeback, I/O completions) runs at normal priority outside the thread. On a machine whose CPUs are
saturated, an unthrottled move still cost a producer on the same machine 10-15% of its throughput
(bench/produce_during_move.py). So `CopyPacer` also yields in time: after a copy step during which the machine's
CPUs were saturated by others, the move thread pauses as long as the step took. The copy then runs at most half of
the time while the CPUs are wanted, and at full speed whenever they are not (docs/data-path.md). The pause is the
step's wall time, not its thread's CPU time, because the work outside the thread grows with the bytes copied.

Raising a thread's nice value back (19 -> 0) needs CAP_SYS_NICE or an RLIMIT_NICE that allows it; systemd's
`LimitNICE=+0` (systemd/moverd.service) grants exactly that, no lower than 0. Without it the thread stays at 19
after its first copy step (logged once): the whole move then runs low, slower under load, still correct. Every
failure here is logged once and never fatal: priority is a preference, a move must not fail for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# The copy's nice value. Chosen by bench/produce_during_move.py (docs/data-path.md): the copy is kernel CPU and
# disk writes, and at 19 it takes only what the producers and the event loop leave.
BACKGROUND_NICE = 19

# ioprio_set(2): which = IOPRIO_WHO_PROCESS (a thread id); prio = class << 13 | level.
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
IOPRIO_CLASS_BE = 2
IOPRIO_CLASS_IDLE = 3
# Best effort, lowest level: below every default thread (BE 4) but never starved, unlike the idle class, which an
# fsync under the swap would otherwise wait behind everyone's writes for.
BACKGROUND_IOPRIO = (IOPRIO_CLASS_BE << _IOPRIO_CLASS_SHIFT) | 7

# x86_64 and aarch64 (asm-generic) numbers of ioprio_set / ioprio_get; elsewhere the I/O priority is left alone.
_SYS_IOPRIO_SET, _SYS_IOPRIO_GET = {"x86_64": (251, 252), "aarch64": (30, 31)}.get(os.uname().machine, (None, None))

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(what: str, e: OSError) -> None:
    with _warned_lock:
        if what in _warned:
            return
        _warned.add(what)
    log.warning("could not %s for the move threads: %s (moves run on; see docs/data-path.md)", what, e)


def _libc():  # noqa: ANN202 - the C library, or None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def _libc_setpriority(libc):  # noqa: ANN001, ANN202 - libc's setpriority(), or None
    fn = getattr(libc, "setpriority", None)
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_uint, ctypes.c_int)
        fn.restype = ctypes.c_int
    return fn


_LIBC = _libc()
_libc_syscall = getattr(_LIBC, "syscall", None)
_setpriority_c = _libc_setpriority(_LIBC)


def set_nice_released(tid: int, nice: int) -> None:
    """setpriority for one thread with the GIL released (a ctypes call; os.setpriority keeps it). Lowering the
    calling thread to 19 lets the scheduler preempt it at once: if it still held the GIL then, the event loop would
    wait for the GIL until the thread ran again. OSError if the kernel refuses."""
    if _setpriority_c is None:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
        return
    if _setpriority_c(os.PRIO_PROCESS, tid, nice) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_ioprio(tid: int, prio: int) -> None:
    """ioprio_set for one thread; OSError if the kernel refuses (or the call is unknown here)."""
    if _libc_syscall is None or _SYS_IOPRIO_SET is None:
        raise OSError(38, "ioprio_set is not available on this platform")
    if _libc_syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, tid, prio) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def get_ioprio(tid: int) -> int:
    """ioprio_get for one thread (0: none set, the kernel derives best effort from the nice value)."""
    if _libc_syscall is None or _SYS_IOPRIO_GET is None:
        raise OSError(38, "ioprio_get is not available on this platform")
    prio = _libc_syscall(_SYS_IOPRIO_GET, _IOPRIO_WHO_PROCESS, tid)
    if prio < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return prio


def daemon_priority() -> tuple[int, int]:
    """The (nice, ioprio) of the process's main thread: what systemd's Nice= / IOSchedulingClass= gave the daemon,
    and what a move thread returns to for the swap."""
    pid = os.getpid()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        nice = 0
    try:
        ioprio = get_ioprio(pid)
    except OSError:
        ioprio = 0
    return nice, ioprio


def thread_priority() -> tuple[int, int]:
    """The calling thread's (nice, ioprio); what cannot be read counts as the daemon's (so nothing is changed)."""
    tid = threading.get_native_id()
    nice, ioprio = daemon_priority()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        pass
    try:
        ioprio = get_ioprio(tid)
    except OSError:
        pass
    return nice, ioprio


def _apply(nice: int, ioprio: int) -> bool:
    tid = threading.get_native_id()
    ok = True
    try:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as e:
        _warn_once(f"set the CPU nice value {nice}", e)
        ok = False
    try:
        set_ioprio(tid, ioprio)
    except OSError as e:
        _warn_once(f"set the I/O priority {ioprio >> _IOPRIO_CLASS_SHIFT}/{ioprio & 7}", e)
        ok = False
    return ok


def background() -> bool:
    """Lower the calling thread's I/O priority (a move thread, for its whole life; the CPU's is lowered only
    around the bulk copies, see `copying`). False if it could not be set (logged once)."""
    try:
        set_ioprio(threading.get_native_id(), BACKGROUND_IOPRIO)
    except OSError as e:
        _warn_once(f"set the I/O priority {BACKGROUND_IOPRIO >> _IOPRIO_CLASS_SHIFT}/{BACKGROUND_IOPRIO & 7}", e)
        return False
    return True


class copying:  # noqa: N801 - used as a context manager, like a function
    """`with copying():` the calling thread at nice 19 for a bulk copy's system calls, then back to the nice it had
    (which the thread may not be allowed to do: it then stays at 19, logged once). Three system calls: cheap next
    to a copy step. Both changes are made with the GIL released (`set_nice_released`), so the thread is at 19 with
    the GIL held only for the few microseconds between them and the copy's own release of it."""

    def __enter__(self) -> None:
        self._tid = threading.get_native_id()
        try:
            self._saved: int | None = os.getpriority(os.PRIO_PROCESS, self._tid)
        except OSError:
            self._saved = None
            return
        if self._saved >= BACKGROUND_NICE:
            return
        try:
            set_nice_released(self._tid, BACKGROUND_NICE)
        except OSError as e:
            _warn_once(f"set the CPU nice value {BACKGROUND_NICE}", e)
            self._saved = None

    def __exit__(self, *exc: object) -> None:
        if self._saved is None or self._saved >= BACKGROUND_NICE:
            return
        try:
            set_nice_released(self._tid, self._saved)
        except OSError as e:
            _warn_once(f"set the CPU nice value {self._saved}", e)  # the same line as foreground's refusal


class foreground:  # noqa: N801 - used as a context manager, like a function
    """`with foreground():` the calling thread runs at the daemon's own priority, then returns to what it had.
    A thread already there (a test calling a move directly, say) is left alone."""

    def __enter__(self) -> bool:
        self._saved = thread_priority()
        target = daemon_priority()
        if self._saved == target:
            self._changed = False
            return True
        self._changed = True
        return _apply(*target)

    def __exit__(self, *exc: object) -> None:
        if self._changed:
            _apply(*self._saved)


# The real-time priority of a swap's locked section: the lowest of SCHED_FIFO, above every ordinary thread of the
# machine. systemd's `LimitRTPRIO=1` (systemd/moverd.service) allows exactly this much without a capability.
LOCKED_FIFO_PRIORITY = 1


class locked_section:  # noqa: N801 - used as a context manager, like a function
    """`with locked_section():` the calling thread runs under SCHED_FIFO (priority 1) and returns to the policy it
    had. For the swap's hold of the replica lock, which appends wait on: about 0.1-1 ms of CPU and no rename or
    fsync, but on saturated CPUs a thread of nice 0 that wakes inside it (after the catch-up's copy_file_range,
    say) waits for a CPU behind every other runnable thread, for up to several time slices, while producers wait
    behind it (docs/data-path.md, "The replica lock beside the test suite"). A FIFO thread preempts them at once.
    The section is short and mostly sleeps in the kernel when it is not short, so it cannot starve the machine;
    the kernel's real-time throttling (95% of each second) bounds it anyway. Refused (no CAP_SYS_NICE, no
    RLIMIT_RTPRIO, systemd's RestrictRealtime): logged once, the section runs at the thread's own priority."""

    def __enter__(self) -> bool:
        self._saved: tuple[int, int] | None = None
        try:
            policy = os.sched_getscheduler(0)
            if policy in (os.SCHED_FIFO, os.SCHED_RR):
                return True  # already real-time (the daemon was started so): nothing to raise
            self._saved = (policy, os.sched_getparam(0).sched_priority)
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(LOCKED_FIFO_PRIORITY))
        except OSError as e:
            self._saved = None
            _warn_once(f"set SCHED_FIFO {LOCKED_FIFO_PRIORITY} (the swap's locked section)", e)
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            return
        try:
            # Back to SCHED_OTHER (or what it was) keeps the thread's nice value: allowed without privilege.
            os.sched_setscheduler(0, self._saved[0], os.sched_param(self._saved[1]))
        except OSError as e:
            _warn_once(f"set the scheduling policy {self._saved[0]} back", e)


# An unthrottled copy step is followed by a pause as long as itself when, during the step, the machine had less than
# this many idle CPUs (idle CPU-seconds per wall second, iowait counted as idle) while other threads kept more than
# this many busy. The second condition keeps a move alone on a one-CPU machine, which is all copy, at full speed.
SATURATED_IDLE_CPUS = 0.5
# A step shorter than this says too little about the CPUs (the /proc/stat clock ticks at 10 ms): no pause.
_MIN_STEP_S = 0.02
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_times() -> tuple[float, float] | None:
    """(busy, idle) CPU-seconds of the whole machine so far, from /proc/stat's first line; None where unreadable."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...: guest time is already inside user.
    try:
        ticks = [int(x) for x in fields[1:9]]
    except (ValueError, IndexError):
        return None
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _CLK_TCK, idle / _CLK_TCK


class CopyPacer:
    """One per move thread's copy: `start()` before a copy step, `pause_for()` after it gives the seconds to pause
    (0.0 when the CPUs were not saturated by others during the step, or it cannot be told). `paused` sums them."""

    def __init__(self, cpu_times: Callable[[], tuple[float, float] | None] = _cpu_times,
                 thread_time: Callable[[], float] = time.thread_time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.paused = 0.0
        self._cpu_times, self._thread_time, self._clock = cpu_times, thread_time, clock
        self._t0 = 0.0
        self._own0 = 0.0
        self._cpu0: tuple[float, float] | None = None

    def start(self) -> None:
        self._t0 = self._clock()
        self._own0 = self._thread_time()
        self._cpu0 = self._cpu_times()

    def pause_for(self) -> float:
        wall = self._clock() - self._t0
        cpu1 = self._cpu_times()
        if self._cpu0 is None or cpu1 is None or wall < _MIN_STEP_S:
            return 0.0
        # The copy's own CPU (kernel time in copy_file_range included) is not "others": a move alone on one CPU
        # leaves it no idle time, yet nothing waits for it.
        own = self._thread_time() - self._own0
        busy, idle = cpu1[0] - self._cpu0[0], cpu1[1] - self._cpu0[1]
        others = busy - own
        if idle / wall >= SATURATED_IDLE_CPUS or others / wall <= SATURATED_IDLE_CPUS:
            return 0.0
        self.paused += wall
        return wall

