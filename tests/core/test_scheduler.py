"""mover.log.scheduler.Scheduler, the LogManager's named background tasks (Kafka's KafkaScheduler): tasks run at
their intervals, a failing task does not stop the others, one-shot tasks keep their earliest time; and the
LogManager's housekeeping is those named tasks."""

from __future__ import annotations

import threading

import pytest

from mover.log.log_manager import LogManager
from mover.log.scheduler import Scheduler
from mover.testing.wait import wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_named_tasks_run_at_their_intervals() -> None:
    clock = FakeClock()
    s = Scheduler(clock=clock)
    runs: list[tuple[str, float]] = []
    s.schedule("every-2", lambda: runs.append(("every-2", clock.now)), 2.0)
    s.schedule("every-5", lambda: runs.append(("every-5", clock.now)), 5.0, delay_s=0.0)
    for _ in range(10):
        s.run_pending()
        clock.advance(1.0)
    by_name = {name: [t - 1000.0 for n, t in runs if n == name] for name in ("every-2", "every-5")}
    assert by_name["every-2"] == [2.0, 4.0, 6.0, 8.0], "first after one period, then every period"
    assert by_name["every-5"] == [0.0, 5.0], "first after the given delay"
    assert s.run_pending() == clock.now + 2.0, "both ran at 10; the next due is every-2 at 12"


def test_a_failing_task_does_not_stop_the_others_or_itself(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    s = Scheduler(clock=clock)
    ran: list[str] = []

    def broken() -> None:
        ran.append("broken")
        raise OSError("boom")

    s.schedule("kafka-broken", broken, 1.0, delay_s=0.0)
    s.schedule("kafka-fine", lambda: ran.append("fine"), 1.0, delay_s=0.0)
    s.run_pending()
    clock.advance(1.0)
    s.run_pending()
    assert ran.count("broken") == 2 and ran.count("fine") == 2
    assert "kafka-broken" in caplog.text and "boom" in caplog.text, "the failure is logged with the task's name"
    assert set(s.scheduled()) == {"kafka-broken", "kafka-fine"}


def test_a_one_shot_task_runs_once_at_the_earlier_of_two_times() -> None:
    clock = FakeClock()
    s = Scheduler(clock=clock)
    ran: list[float] = []
    s.schedule_once("kafka-delete-logs", lambda: ran.append(clock.now), 60.0)
    s.schedule_once("kafka-delete-logs", lambda: ran.append(clock.now), 5.0)  # earlier: wins
    s.schedule_once("kafka-delete-logs", lambda: ran.append(clock.now), 30.0)  # later: ignored
    clock.advance(4.9)
    assert s.run_pending() == 1005.0 and ran == []
    clock.advance(0.1)
    assert s.run_pending() is None, "ran, and nothing is left"
    assert ran == [1005.0]
    clock.advance(100.0)
    s.run_pending()
    assert ran == [1005.0], "once"


def test_the_thread_runs_tasks_and_survives_a_failure() -> None:
    s = Scheduler("test-scheduler")
    fine = threading.Event()
    failures: list[int] = []

    def broken() -> None:
        failures.append(1)
        raise RuntimeError("a bug in one task")

    s.schedule("broken", broken, 0.01, delay_s=0.0)
    s.schedule("fine", fine.set, 0.01)
    s.startup()
    try:
        wait_for(lambda: len(failures) >= 3 and fine.is_set(), message="both tasks, several times")
        assert s.alive()
        woken = threading.Event()
        s.schedule_once("once", woken.set)  # due now: wakes the thread rather than waiting out its sleep
        wait_for(woken.is_set, message="the one-shot task")
    finally:
        s.shutdown()
    assert not s.alive()


def test_the_log_managers_housekeeping_is_kafkas_named_tasks(make_config) -> None:  # type: ignore[no-untyped-def]
    m = LogManager(make_config())
    m.startup()
    try:
        assert {"kafka-log-retention", "kafka-log-flusher", "kafka-recovery-point-checkpoint",
                "kafka-log-start-offset-checkpoint", "log-dir-health-check"} <= set(m.scheduler.scheduled())
        assert m.housekeeping_alive()
    finally:
        m.shutdown()
    assert not m.housekeeping_alive()
