"""A ReplicaMoveThread copies at a low I/O priority, at a low CPU priority inside the bulk copies' system calls only,
and swaps at the daemon's own (mover/moves/priority.py);
a kernel that refuses either is logged once and the moves run on. Real threads, real moves of small real logs; the
priorities are read back from the kernel (getpriority, ioprio_get of the thread)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mover.log.replica import Replica
from mover.moves import MoveOutcome, MoveState, ReplicaMove, ReplicaMovePool, future_log_copy, future_log_swap, priority
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.wait import wait_for
from throttle.token_bucket import TokenBucket


def replica_in(tmp_path: Path, tp: TopicPartition) -> Replica:
    src = tmp_path / "d1"
    log = Log.open(src / str(tp), tp, LogConfig())
    for i in range(3):
        log.append(make_batch([f"{tp}-{i}".encode() * 100]))
    (tmp_path / "d2").mkdir(exist_ok=True)
    return Replica(tp, log, src)


def start_move(pool: ReplicaMovePool, replica: Replica, tmp_path: Path, bucket: TokenBucket) -> ReplicaMove:
    move = ReplicaMove(replica, replica.log_dir, tmp_path / "d2", bucket, LogConfig())
    replica.move = move
    pool.submit(move)
    return move


class Owner:
    """Records each outcome and the priority of the thread that handed it over."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[MoveOutcome, tuple[int, int]]] = []

    def __call__(self, outcome: MoveOutcome) -> None:
        self.outcomes.append((outcome, priority.thread_priority()))
        outcome.move.replica.move = None


def can_come_back_up() -> bool:
    """Whether a thread lowered to nice 19 may go back to the process's nice (CAP_SYS_NICE or RLIMIT_NICE)."""
    result: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, priority.BACKGROUND_NICE)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, priority.daemon_priority()[0])
            result.append(True)
        except PermissionError:
            result.append(False)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return result == [True]


def test_bulk_copies_run_low_the_rest_and_the_swap_at_the_daemons_priority(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread's I/O priority is low for the whole move, its CPU priority only inside the bulk copy's system
    calls: between them it holds the GIL, and at nice 19 a preemption there keeps the event loop waiting for it."""
    if not can_come_back_up():
        pytest.skip("this process may not raise a thread's priority back (no CAP_SYS_NICE, RLIMIT_NICE 0)")
    daemon = priority.daemon_priority()
    low_io = (daemon[0], priority.BACKGROUND_IOPRIO)
    under_lock: list[tuple[int, int]] = []
    policies: list[int] = []
    bulk: list[tuple[int, int]] = []
    real_crash_point = future_log_swap.crash_point
    real_copy_range = future_log_copy._copy_range

    def spy(name: str) -> None:
        if name == "move.locked":  # called with the replica lock held
            under_lock.append(priority.thread_priority())
            policies.append(os.sched_getscheduler(0))
        real_crash_point(name)

    def copy_spy(src: int, dst: int, offset: int, count: int) -> int:
        if move.state is MoveState.COPYING:
            bulk.append(priority.thread_priority())
        return real_copy_range(src, dst, offset, count)

    monkeypatch.setattr(future_log_swap, "crash_point", spy)
    monkeypatch.setattr(future_log_copy, "_copy_range", copy_spy)
    # A small log: its one round counts as bulk here (catch-up rounds: tests/moves/test_copy_pacer.py).
    monkeypatch.setattr(future_log_copy, "CATCH_UP_ROUND_BYTES", 1)
    owner = Owner()
    pool = ReplicaMovePool(1, owner)
    stalled = TokenBucket(1)
    stalled.consume(10**9)  # deep in debt: the copy waits on it until the rate is lifted
    pool.start()
    try:
        move = start_move(pool, replica_in(tmp_path, TopicPartition("t", 0)), tmp_path, stalled)
        wait_for(lambda: move.state is MoveState.COPYING, message="the move to start copying")
        (thread,) = pool._threads
        assert thread.native_id is not None
        waiting = (os.getpriority(os.PRIO_PROCESS, thread.native_id), priority.get_ioprio(thread.native_id))
        assert waiting == low_io
        assert low_io != daemon  # the test would prove nothing if the daemon already ran there
        stalled.set_rate(None)
        assert move.wait(30)
        assert move.state is MoveState.COMPLETED
        assert bulk and all(p == (priority.BACKGROUND_NICE, priority.BACKGROUND_IOPRIO) for p in bulk), bulk
        assert under_lock and all(p == daemon for p in under_lock)
        # Real-time only while appends wait on the lock; the copy of the next move is an ordinary thread again.
        assert policies and all(p == os.SCHED_FIFO for p in policies), policies
        assert os.sched_getscheduler(thread.native_id) == os.SCHED_OTHER
        assert [p for _, p in owner.outcomes] == [daemon]  # the outcome's bookkeeping takes shared locks too
        # Back to the copy's priority for the next move.
        after = (os.getpriority(os.PRIO_PROCESS, thread.native_id), priority.get_ioprio(thread.native_id))
        assert after == low_io
    finally:
        pool.shutdown()
    # The daemon's own threads are untouched.
    assert priority.thread_priority() == daemon


def test_refused_priorities_are_logged_once_and_moves_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(priority.os, "setpriority", refuse)
    monkeypatch.setattr(priority, "set_nice_released", refuse)
    monkeypatch.setattr(priority, "set_ioprio", refuse)
    monkeypatch.setattr(priority.os, "sched_setscheduler", refuse)
    monkeypatch.setattr(priority, "_warned", set())
    monkeypatch.setattr(future_log_copy, "CATCH_UP_ROUND_BYTES", 1)  # small logs, copied as bulk
    owner = Owner()
    pool = ReplicaMovePool(2, owner)
    with caplog.at_level(logging.WARNING, logger=priority.__name__):
        pool.start()
        try:
            moves = [start_move(pool, replica_in(tmp_path, TopicPartition("t", p)), tmp_path, TokenBucket(None))
                     for p in range(3)]
            assert all(m.wait(30) for m in moves)
        finally:
            pool.shutdown()
    assert [m.state for m in moves] == [MoveState.COMPLETED] * 3
    warnings = [r.getMessage() for r in caplog.records if r.name == priority.__name__]
    # Two threads, three moves: one line per kind of refusal, not one per thread or move.
    assert len(warnings) == 3, warnings
    assert any("nice value 19" in w for w in warnings) and any("I/O priority 2/7" in w for w in warnings)
    assert any("SCHED_FIFO 1" in w for w in warnings)


def test_foreground_and_copying_restore_what_the_thread_had_even_when_raising_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not can_come_back_up():
        pytest.skip("this process may not raise a thread's priority back (no CAP_SYS_NICE, RLIMIT_NICE 0)")
    seen: dict[str, tuple[int, int]] = {}
    errors: list[BaseException] = []

    def work() -> None:
        try:
            assert priority.background()
            seen["background"] = priority.thread_priority()
            with priority.copying():
                seen["copying"] = priority.thread_priority()
            seen["after copying"] = priority.thread_priority()
            with priority.foreground() as raised:
                assert raised
                seen["foreground"] = priority.thread_priority()
            seen["after"] = priority.thread_priority()
            # An unprivileged daemon without LimitNICE: coming back from 19 fails; the thread stays low, nothing
            # raises, and the next copy step changes nothing.
            real = os.setpriority

            def no_raise(which: int, who: int, nice: int) -> None:
                if nice < os.getpriority(which, who):
                    raise PermissionError(errno.EACCES, "Permission denied")
                real(which, who, nice)

            monkeypatch.setattr(priority.os, "setpriority", no_raise)
            monkeypatch.setattr(priority, "set_nice_released",
                                lambda tid, nice: no_raise(os.PRIO_PROCESS, tid, nice))
            with priority.copying():
                pass
            seen["refused"] = priority.thread_priority()
            with priority.copying():
                seen["copying again"] = priority.thread_priority()
            with priority.foreground() as raised:
                assert not raised
                seen["foreground refused"] = priority.thread_priority()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    monkeypatch.setattr(priority, "_warned", set())
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    daemon = priority.daemon_priority()
    low_io = (daemon[0], priority.BACKGROUND_IOPRIO)
    low = (priority.BACKGROUND_NICE, priority.BACKGROUND_IOPRIO)
    assert seen == {"background": low_io, "copying": low, "after copying": low_io, "foreground": daemon,
                    "after": low_io, "refused": low, "copying again": low,
                    "foreground refused": (priority.BACKGROUND_NICE, daemon[1])}


LOCKED_SECTION_PROBE = """
import logging, os, sys
from mover.moves import priority
logging.basicConfig(level=logging.WARNING, format="%(message)s")
inside = []
for _ in range(2):  # the refusal is said once
    with priority.locked_section() as raised:
        inside.append(os.sched_getscheduler(0))
print(raised, inside[0], os.sched_getscheduler(0), os.sched_getparam(0).sched_priority,
      os.getpriority(os.PRIO_PROCESS, 0))
"""



def test_locked_section_without_the_right_is_refused_once_and_keeps_the_threads_nice() -> None:
    """A daemon with neither CAP_SYS_NICE nor an RLIMIT_RTPRIO (systemd's LimitRTPRIO=1 in the unit; this
    container's hard limit is 0, so only the refusal can be shown here): the section is refused, said once, runs at
    the thread's own priority, and the thread keeps its nice value (5 here). A child without CAP_SYS_NICE in its
    bounding set, as in the unit."""
    got = subprocess.run(["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice", "--",
                          "nice", "-n", "5", sys.executable, "-c", LOCKED_SECTION_PROBE],
                         capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert got.returncode == 0, got.stderr
    raised, inside, after, param, nice = got.stdout.split()
    assert (raised, int(inside), int(after), int(param), int(nice)) == ("False", os.SCHED_OTHER, os.SCHED_OTHER, 0,
                                                                        5), got
    assert got.stderr.count("could not set SCHED_FIFO 1") == 1, got.stderr
