"""The forecast's second thread (mover/audit/threads.py): batches answered in their order, on two threads
when there are two cores; a write run behind the body waited for before the block is left, its error raised; a
read run ahead handing its result (or its error) to whoever takes it."""

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
