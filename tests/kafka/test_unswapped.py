"""The KAFKA-16365 forgiveness the real-Kafka tests share (mover/testing/unswapped.py): only a copy complete for the
whole grace has its broker restarted, a copy still copying never, and past the bound it fails instead."""

from __future__ import annotations

import pytest

from mover.testing import unswapped as mod
from mover.testing.unswapped import FutureCopy, Unswapped


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(mod.time, "monotonic", lambda: now[0])
    return now


def copy(broker: int, lag: int, name: str = "t-0") -> FutureCopy:
    return FutureCopy(broker, name, f"/d{broker}", 100, lag)


def test_only_a_copy_complete_for_the_grace_restarts_its_broker(clock: list[float]) -> None:
    restarts: list[int] = []
    u = Unswapped(restarts.append, say=lambda _: None, grace_s=10)
    assert u.check([copy(1, 0), copy(2, 5, "t-1")]) == []
    clock[0] += 9
    assert u.check([copy(1, 3), copy(2, 5, "t-1")]) == []  # a producer's records: its lag flickers, still stuck
    clock[0] += 1
    assert u.check([copy(1, 0), copy(2, 5, "t-1")]) == [1]
    assert restarts == [1] and u.restarted == [1]
    clock[0] += 100
    assert u.check([copy(2, 5, "t-1")]) == []  # copying, however long: a real stall is not forgiven


def test_a_copy_swapped_in_and_started_again_is_timed_afresh(clock: list[float]) -> None:
    restarts: list[int] = []
    u = Unswapped(restarts.append, say=lambda _: None, grace_s=10)
    u.check([copy(1, 0)])
    clock[0] += 6
    u.check([])  # swapped in
    clock[0] += 6
    assert u.check([copy(1, 0)]) == [] and restarts == []


def test_past_the_bound_it_fails(clock: list[float]) -> None:
    u = Unswapped(lambda _: None, say=lambda _: None, grace_s=1, most=1)
    u.check([copy(1, 0)])
    clock[0] += 1
    assert u.check([copy(1, 0)]) == [1]
    u.check([copy(1, 0)])
    clock[0] += 1
    with pytest.raises(AssertionError, match="not swapped in on brokers"):
        u.check([copy(1, 0)])
