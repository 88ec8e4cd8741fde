"""An unthrottled copy pauses after a step during which the machine's CPUs were saturated by others, and only then
(mover/moves/priority.py, CopyPacer). The rule itself on given CPU readings; then real moves of a real log beside
real busy processes, one per CPU, and the same moves throttled or cancelled."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mover.log.replica import Replica
from mover.moves import MoveState, ReplicaMove, ReplicaMovePool, future_log_copy, priority
from mover.storage.log import Log, LogConfig
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.wait import wait_for
from throttle.token_bucket import TokenBucket

MIB = 1024 * 1024


class Clocks:
    """Readings the pacer takes, set by the test: wall clock, the copy thread's CPU, the machine's (busy, idle)."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.own = 0.0
        self.cpu: tuple[float, float] | None = (1000.0, 1000.0)

    def pacer(self) -> priority.CopyPacer:
        return priority.CopyPacer(cpu_times=lambda: self.cpu, thread_time=lambda: self.own, clock=lambda: self.wall)

    def step(self, pacer: priority.CopyPacer, wall: float, own: float, busy: float, idle: float) -> float:
        """One copy step of `wall` seconds in which the copy used `own` CPU-seconds and the machine `busy` (the
        copy's included) and `idle`; returns the pause the pacer asks for."""
        pacer.start()
        self.wall += wall
        self.own += own
        if self.cpu is not None:
            self.cpu = (self.cpu[0] + busy, self.cpu[1] + idle)
        return pacer.pause_for()


def test_a_step_on_cpus_saturated_by_others_is_followed_by_a_pause_as_long_as_itself() -> None:
    c = Clocks()
    p = c.pacer()
    # Two CPUs for 0.1 s: 0.02 CPU-s idle; of the 0.18 busy, 0.05 the copy's and 0.13 others'.
    assert c.step(p, wall=0.1, own=0.05, busy=0.18, idle=0.02) == pytest.approx(0.1)
    assert c.step(p, wall=0.2, own=0.1, busy=0.38, idle=0.02) == pytest.approx(0.2)
    assert p.paused == pytest.approx(0.3)


@pytest.mark.parametrize(("why", "wall", "own", "busy", "idle"), [
    ("idle CPUs left", 0.1, 0.05, 0.1, 0.1),  # one CPU idle: nobody waits for the copy's
    ("the copy alone on one CPU", 0.1, 0.095, 0.1, 0.0),  # saturated, but by the copy itself
    ("a step too short to tell", 0.01, 0.005, 0.02, 0.0),
])
def test_no_pause_when_the_cpus_are_not_saturated_by_others(why: str, wall: float, own: float, busy: float,
                                                            idle: float) -> None:
    c = Clocks()
    p = c.pacer()
    assert c.step(p, wall=wall, own=own, busy=busy, idle=idle) == 0.0, why
    assert p.paused == 0.0


def test_no_pause_when_the_cpus_cannot_be_read() -> None:
    c = Clocks()
    c.cpu = None
    p = c.pacer()
    assert c.step(p, wall=0.1, own=0.05, busy=0.2, idle=0.0) == 0.0


def test_the_machines_cpu_times_are_read_from_proc_stat() -> None:
    first = priority._cpu_times()
    assert first is not None
    busy, idle = first
    assert busy > 0 and idle >= 0
    # Both only grow, and together they advance by about the CPUs' count per wall second (/proc/stat's own clock).
    wait_for(lambda: (t := priority._cpu_times()) is not None and sum(t) > busy + idle, message="/proc/stat to tick")
    second = priority._cpu_times()
    assert second is not None and second[0] >= busy and second[1] >= idle


# ------------------------------------------------------------------------------------------------ real moves


@pytest.fixture
def busy_cpus() -> Iterator[None]:
    """One spinning process per CPU at the test's own nice value: the CPUs are saturated by others."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def replica_of(tmp_path: Path, mib: int) -> Replica:
    tp = TopicPartition("t", 0)
    src = tmp_path / "d1"
    log = Log.open(src / str(tp), tp, LogConfig())
    for i in range(mib):
        log.append(make_batch([bytes([i % 256]) * (64 * 1024)] * 16))
    (tmp_path / "d2").mkdir(exist_ok=True)
    return Replica(tp, log, src)


def run_move(tmp_path: Path, bucket: TokenBucket, mib: int = 16) -> ReplicaMove:
    pool = ReplicaMovePool(1, lambda outcome: setattr(outcome.move.replica, "move", None))
    replica = replica_of(tmp_path, mib)
    source = (replica.log.dir / replica.log.active_segment.log_path.name).read_bytes()
    pool.start()
    try:
        move = ReplicaMove(replica, replica.log_dir, tmp_path / "d2", bucket, LogConfig())
        replica.move = move
        pool.submit(move)
        assert move.wait(120)
    finally:
        pool.shutdown()
    assert move.state is MoveState.COMPLETED, move.error
    assert (tmp_path / "d2" / "t-0" / replica.log.active_segment.log_path.name).read_bytes() == source
    return move


def test_an_unthrottled_move_beside_busy_cpus_pauses_and_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  busy_cpus: None) -> None:
    # Steps of 4 MiB, several in a 16 MiB log. Each waits 50 ms more, as on a slow disk: long enough for /proc/stat's
    # 10 ms ticks to tell, whether or not the scheduler runs the nice-19 copy at once beside the spinners.
    monkeypatch.setattr(future_log_copy, "UNTHROTTLED_STEP", 4 * MIB)
    real_copy_range = future_log_copy._copy_range
    steps: list[int] = []

    def slow_copy_range(src: int, dst: int, offset: int, count: int) -> int:
        steps.append(count)
        threading.Event().wait(0.05)
        return real_copy_range(src, dst, offset, count)

    monkeypatch.setattr(future_log_copy, "_copy_range", slow_copy_range)
    move = run_move(tmp_path, TokenBucket(None))
    bulk = [n for n in steps if n == 4 * MIB]
    assert len(bulk) == 4
    # Each bulk step paused at least as long as it waited (the later, small catch-up steps may pause too).
    assert move._copy.pacer.paused >= 0.05 * len(bulk)


def test_a_throttled_move_is_never_paused_by_the_pacer(tmp_path: Path, busy_cpus: None) -> None:
    # Its rate paces it already; a fast rate, so the test takes no longer than the copy.
    move = run_move(tmp_path, TokenBucket(1024 * MIB), mib=4)
    assert move._copy.pacer.paused == 0


def test_a_cancel_ends_a_pause_at_once(tmp_path: Path) -> None:
    move = ReplicaMove(replica_of(tmp_path, 1), tmp_path / "d1", tmp_path / "d2", TokenBucket(None), LogConfig())
    done = threading.Event()
    t = threading.Thread(target=lambda: (move._copy._pause(3600), done.set()))
    t.start()
    move.cancel()
    wait_for(done.is_set, message="the hour-long pause to end on the cancel")
    t.join()


def test_catch_up_rounds_outrun_a_steady_producer_however_long_the_bulk_pauses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every step the pacer is asked about pauses 50 ms, as on CPUs others keep busy, while a producer appends
    # 256 KiB every 5 ms (~50 MB/s). A catch-up round paused like the bulk would find 2.5 MiB new each time, more than
    # CAUGHT_UP_BYTES, and the move would chase it for MAX_UNLOCKED_ROUNDS rounds.
    monkeypatch.setattr(future_log_copy, "UNTHROTTLED_STEP", 4 * MIB)
    monkeypatch.setattr(priority.CopyPacer, "pause_for", lambda _self: 0.05)
    replica = replica_of(tmp_path, 32)
    stop = threading.Event()
    appended = [replica.log.log_end_offset]

    def produce() -> None:
        while not stop.is_set():
            appended.append(replica.append(make_batch([b"p" * 1024] * 256)).last_offset + 1)
            stop.wait(0.005)

    producer = threading.Thread(target=produce)
    pool = ReplicaMovePool(1, lambda outcome: setattr(outcome.move.replica, "move", None))
    pool.start()
    producer.start()
    try:
        wait_for(lambda: len(appended) > 10, message="the producer to be running")
        move = ReplicaMove(replica, replica.log_dir, tmp_path / "d2", TokenBucket(None), LogConfig())
        replica.move = move
        pool.submit(move)
        assert move.wait(120)
    finally:
        stop.set()
        producer.join()
        pool.shutdown()
    assert move.state is MoveState.COMPLETED, move.error
    assert move.rounds <= 20, f"{move.rounds} rounds to catch up"
    assert len(appended) > 20, "the producer kept appending during the move"
    assert replica.log.dir == tmp_path / "d2" / "t-0"
    assert replica.log.log_end_offset == appended[-1]
