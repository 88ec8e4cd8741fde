"""The forecast's second thread (mover/audit/threads.py): batches answered in their order, on two threads
when there are two cores; a write run behind the body waited for before the block is left, its error raised; a
read run ahead handing its result (or its error) to whoever takes it; work shared, started on a thread and joined by
the caller when it is free."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from mover.audit import threads
from mover.testing.wait import wait_for


def test_each_answers_in_order_and_uses_a_second_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 2)
    names: set[str] = set()
    both = threading.Barrier(2, timeout=30)  # two calls at once, or the barrier breaks

    def work(i: int) -> int:
        names.add(threading.current_thread().name)
        if i < 2:
            both.wait()
        return i * i

    assert threads.each(range(6), work) == [i * i for i in range(6)]
    assert len(names) == 2


def test_each_on_one_core_runs_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 1)
    caller = threading.current_thread().name
    assert threads.each([1, 2, 3], lambda i: (i, threading.current_thread().name)) == [(i, caller) for i in (1, 2, 3)]


def test_each_raises_a_call_s_error_once_every_call_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 2)
    ended: list[int] = []

    def work(i: int) -> None:
        if i == 0:
            raise ValueError("batch 0")
        ended.append(i)

    with pytest.raises(ValueError, match="batch 0"):
        threads.each(range(5), work)
    assert sorted(ended) == [1, 2, 3, 4]


def _held_write() -> tuple[threading.Event, list[str], Callable[[], None]]:
    """(release, done, write): a write that ends only once released, then says so in `done`."""
    release = threading.Event()
    done: list[str] = []

    def write() -> None:
        release.wait(30)
        done.append("written")

    return release, done, write


def test_behind_is_waited_for_and_its_error_raised() -> None:
    release, done, write = _held_write()
    with threads.behind(write) as future:
        assert not future.done()  # the body runs while the write does
        release.set()
    assert done == ["written"]

    def failing() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"), threads.behind(failing):
        pass


def test_behind_lets_the_body_s_error_through_after_waiting() -> None:
    release, done, write = _held_write()
    with pytest.raises(KeyError), threads.behind(write):
        release.set()
        raise KeyError("body")
    assert done == ["written"]  # not left running past the block


def test_ahead_hands_over_its_result_or_its_error() -> None:
    assert threads.ahead(sum, [1, 2, 3]).result(timeout=30) == 6
    failed = threads.ahead(int, "not a number")
    wait_for(failed.done, timeout=30)
    with pytest.raises(ValueError):
        failed.result()


def test_shared_work_is_taken_by_the_caller_once_it_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 2)
    caller = threading.current_thread().name
    first = threading.Event()
    names: list[str] = []

    def work(i: int) -> int:
        names.append(threading.current_thread().name)
        if i == 0:  # the thread holds the first item until the caller has taken one
            first.set()
            wait_for(lambda: caller in names, timeout=30)
        return i * 10

    shared = threads.Shared(range(5), work)
    wait_for(first.is_set, timeout=30)  # started before the caller joins
    assert shared.done() == [0, 10, 20, 30, 40]
    assert names[0] != caller and caller in names


def test_shared_work_on_one_core_runs_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 1)
    caller = threading.current_thread().name
    shared = threads.Shared([1, 2], lambda i: (i, threading.current_thread().name))
    assert shared.done() == [(1, caller), (2, caller)]


def test_shared_work_s_error_stops_the_rest_and_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 1)  # one thread: what runs after the error is known
    ran: list[int] = []

    def work(i: int) -> None:
        ran.append(i)
        if i == 1:
            raise ValueError("batch 1")

    with pytest.raises(ValueError, match="batch 1"):
        threads.Shared(range(5), work).done()
    assert ran == [0, 1]


def test_shared_work_raises_the_thread_s_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 2)
    started = threading.Event()

    def work(i: int) -> None:
        if i == 0:  # the thread's: it has started before the caller joins
            started.set()
            raise ValueError("batch 0")

    shared = threads.Shared(range(3), work)
    wait_for(started.is_set, timeout=30)
    with pytest.raises(ValueError, match="batch 0"):
        shared.done()


def test_shared_work_cancelled_starts_no_more_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "workers", lambda: 2)
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def work(i: int) -> None:
        ran.append(i)
        started.set()
        release.wait(30)  # the first item runs until the caller has cancelled the rest

    shared = threads.Shared(range(50), work)
    wait_for(started.is_set, timeout=30)
    shared.cancel()
    release.set()
    wait_for(lambda: threading.active_count() == 1 or not any(
        t.name.startswith("forecast-ahead") and t.is_alive() for t in threading.enumerate()), timeout=30)
    assert ran == [0]
