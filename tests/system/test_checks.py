"""The system tests' verdict (exactly_once.check) on hand-made histories: each kind of damage is caught."""

from __future__ import annotations

from mover.testing.exactly_once import check
from mover.testing.history import Acked, Consumed, make_value

TP = ("t", 0)


def history(n: int) -> tuple[list[Acked], Consumed]:
    acked = [Acked("t", 0, i, make_value("p", TP, i, 20), 0.0) for i in range(n)]
    consumed = Consumed()
    consumed.records[TP] = [(a.offset, a.value) for a in acked]
    return acked, consumed


def test_a_clean_history_passes() -> None:
    acked, consumed = history(5)
    r = check("c", consumed, {TP: 5}, acked)
    assert (r.lost, r.duplicates, r.out_of_order, r.problems) == (0, 0, 0, [])


def test_a_skipped_record_is_lost() -> None:
    acked, consumed = history(5)
    del consumed.records[TP][2]
    r = check("c", consumed, {TP: 5}, acked)
    assert r.lost == 1 and r.problems


def test_a_record_read_twice_is_a_duplicate() -> None:
    acked, consumed = history(5)
    consumed.records[TP].insert(3, consumed.records[TP][2])
    r = check("c", consumed, {TP: 5}, acked)
    assert r.duplicates >= 1 and r.problems


def test_a_value_written_twice_is_a_duplicate() -> None:
    acked, consumed = history(5)
    consumed.records[TP].append((5, acked[4].value))
    r = check("c", consumed, {TP: 6}, acked)
    assert r.duplicates == 1


def test_a_producer_reordered_is_caught() -> None:
    acked, consumed = history(5)
    recs = consumed.records[TP]
    recs[1], recs[2] = (1, recs[2][1]), (2, recs[1][1])
    r = check("c", consumed, {TP: 5}, acked)
    assert r.out_of_order == 1 and r.lost == 2  # the two acks no longer sit at their offsets


def test_a_consumer_short_of_the_end_fails() -> None:
    acked, consumed = history(5)
    r = check("c", consumed, {TP: 6}, acked)
    assert r.problems


def test_an_unknown_value_is_reported() -> None:
    acked, consumed = history(2)
    consumed.records[TP].append((2, b"garbage"))
    r = check("c", consumed, {TP: 3}, acked)
    assert any("no producer wrote" in p for p in r.problems)
