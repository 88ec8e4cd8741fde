"""Produce's Route.repeats (mover/api/produce_repeats.py): when a connection's recogniser learns a request, and when
it stops learning. Real frames from the codec; RequestRepeat's own proofs are tests/wire/test_template.py's."""

from __future__ import annotations

from typing import Any

from mover.api.produce_repeats import MAX_REPEAT_LEARNS, ProduceRepeats
from mover.testing.batches import make_batch
from mover.wire import decode_request_header, decode_struct, encode_request, join_chunks
from mover.wire.messages import PRODUCE


def frame(partition: int, value: bytes, corr: int = 1) -> bytes:
    """A request as the connection gets it: without its size prefix."""
    return join_chunks(encode_request(PRODUCE, 9, corr, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": partition, "records": make_batch([value])}]}]}, client_id="c"))[4:]


def decoded(f: bytes) -> tuple[Any, dict[str, Any]]:
    header, _, offset = decode_request_header(f)
    return header, decode_struct(PRODUCE.request, 9, PRODUCE.is_flexible(9), f, offset)


def saw(repeats: ProduceRepeats, f: bytes) -> None:
    repeats.saw(f, *decoded(f))


def test_learned_after_two_of_one_length_in_a_row() -> None:
    repeats = ProduceRepeats()
    saw(repeats, frame(0, b"a"))
    assert repeats.match(frame(0, b"b", corr=2)) is None  # one request: nothing learned yet
    saw(repeats, frame(0, b"bb"))  # another length
    saw(repeats, frame(0, b"cc"))
    later = frame(0, b"dd", corr=3)
    assert repeats.match(later) == decoded(later)
    assert repeats.match(frame(0, b"ddd", corr=3)) is None


def test_learning_stops_after_repeats_without_a_hit_and_a_hit_starts_it_again() -> None:
    repeats = ProduceRepeats()
    # One partition after another, each request of the same length: each pair learns a repeat the next one misses.
    for i in range(MAX_REPEAT_LEARNS + 1):
        saw(repeats, frame(i % 2, b"x"))
    f = frame(0, b"y", corr=9)
    hit = repeats.match(f)
    assert hit == decoded(f)  # the last learn: partition 0
    # A hit: it learns again. Without one, MAX_REPEAT_LEARNS learns and no more.
    for i in range(MAX_REPEAT_LEARNS + 3):
        saw(repeats, frame(i % 2, b"x"))
    last = (MAX_REPEAT_LEARNS - 1) % 2  # the partition of the last request it learned
    assert repeats.match(frame(last, b"z")) is not None
    assert repeats.match(frame(1 - last, b"z")) is None
