"""Scheduler: named background tasks on one thread (Kafka's KafkaScheduler).

The LogManager's housekeeping is a set of named tasks, as Kafka's `LogManager.startup()` schedules them
(`kafka-log-retention`, `kafka-log-flusher`, `kafka-recovery-point-checkpoint`, ...), rather than a hand-written
timer loop: each task says its name, what it runs and how often, and a newcomer finds it by the name in the log.

- `schedule(name, fn, period_s, delay_s=None)`: run `fn` every `period_s` seconds, the first time after `delay_s`
  (default: one period). The next run is due one period after this one began, never in a burst to catch up.
- `schedule_once(name, fn, delay_s)`: run `fn` once. Scheduled again while it is pending, the task keeps the earlier
  of the two times (Kafka's `kafka-delete-logs` is rescheduled for the next deletion due, and a deletion queued now
  must not wait for one queued earlier with a longer delay).
- A task that raises is logged with its name and stays scheduled: one failing task never stops the others, and a
  periodic one runs again at its next time.
- Tasks run one at a time, in the order they are due, on the thread `startup()` starts; `run_pending()` is one turn
  of that thread (every due task, once) and is what tests call with a fake clock, without the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The longest the thread sleeps without looking at the clock again: bounds what a clock that jumps costs.
MAX_WAIT_S = 1.0


@dataclass
class _Task:
    name: str
    fn: Callable[[], None]
    due: float
    period_s: float | None  # None: run once


class Scheduler:
    def __init__(self, name: str = "kafka-scheduler", *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self._tasks: dict[str, _Task] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def schedule(self, name: str, fn: Callable[[], None], period_s: float, delay_s: float | None = None) -> None:
        if period_s <= 0:
            raise ValueError(f"task {name}: the period must be positive, not {period_s}")
        first = period_s if delay_s is None else delay_s
        self._add(_Task(name, fn, self._clock() + first, period_s))

    def schedule_once(self, name: str, fn: Callable[[], None], delay_s: float = 0.0) -> None:
        due = self._clock() + delay_s
        with self._cond:
            task = self._tasks.get(name)
            if task is not None and task.period_s is None and task.due <= due:
                return
        self._add(_Task(name, fn, due, None))

    def _add(self, task: _Task) -> None:
        with self._cond:
            self._tasks[task.name] = task
            self._cond.notify_all()

    def cancel(self, name: str) -> None:
        with self._cond:
            self._tasks.pop(name, None)

    def scheduled(self) -> dict[str, float]:
        """Each pending task's name and the clock time it is due at next."""
        with self._cond:
            return {t.name: t.due for t in self._tasks.values()}

    # ---------------------------------------------------------------- running

    def run_pending(self) -> float | None:
        """Run every task due now, once each, in the order they are due; returns when the next one is due (None:
        nothing is scheduled)."""
        now = self._clock()
        with self._cond:
            due = sorted((t for t in self._tasks.values() if t.due <= now), key=lambda t: t.due)
            for task in due:
                if task.period_s is None:
                    del self._tasks[task.name]
                else:
                    task.due = now + task.period_s
        for task in due:
            try:
                task.fn()
            except Exception:
                # Logged, never fatal: the next task, and this one's next run, still happen.
                log.exception("scheduled task %s failed", task.name)
        with self._cond:
            return min((t.due for t in self._tasks.values()), default=None)

    def startup(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the thread after the task it is running, if any; pending tasks are dropped."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        """Whether the thread runs (a health check: it only ends at shutdown)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
            self.run_pending()
            with self._cond:
                if self._stopping:
                    return
                # The earliest task may have changed while the tasks ran (a schedule_once): look again.
                next_due = min((t.due for t in self._tasks.values()), default=None)
                wait = MAX_WAIT_S if next_due is None else next_due - self._clock()
                if wait > 0:
                    self._cond.wait(min(wait, MAX_WAIT_S))
