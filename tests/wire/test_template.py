"""Frame templates (mover/wire/template.py) and the Produce answers encoded from them (mover/api/produce.py): every
filled frame is byte-equal to the generic encoder's; layouts that depend on the values are refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mover.api.produce import AnswerTemplates, OneAnswer, one_answer
from mover.wire import (
    EncodeError,
    RequestHeader,
    decode_request_header,
    decode_response,
    decode_struct,
    encode_request,
    encode_response,
    frame_template,
    join_chunks,
)
from mover.wire.messages import PRODUCE
from mover.wire.template import RequestRepeat

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


@settings(max_examples=300, deadline=None)
@given(version=st.integers(3, 9), name=st.text(min_size=0, max_size=300), partition=INT32, base=INT64, start=INT64,
       corr=INT32)
def test_produce_answer_from_a_template_is_byte_equal_to_the_generic_encoder(
        version: int, name: str, partition: int, base: int, start: int, corr: int) -> None:
    templates = AnswerTemplates()
    answer = one_answer(name, partition, base, start)
    expected = encode_response(PRODUCE, version, corr, answer)
    assert templates.encode(version, corr, answer) == expected
    # The cached template again, with other values: still equal.
    other = one_answer(name, partition, start, base)
    assert templates.encode(version, corr ^ 1, other) == encode_response(PRODUCE, version, corr ^ 1, other)
    header, body = decode_response(PRODUCE, version, expected[0][4:])  # type: ignore[index]
    assert header.correlation_id == corr and body["responses"][0]["partition_responses"][0]["base_offset"] == base


def test_only_the_shape_the_template_was_made_for_uses_it() -> None:
    templates = AnswerTemplates()
    plain = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0}]}],
        "throttle_time_ms": 0}
    assert templates.encode(9, 1, plain) is None  # a plain dict: the generic encoder
    # A OneAnswer changed on its way (a wrapper adding a topic, an error, a field): the generic encoder too.
    grown = one_answer("t", 0, 5, 0)
    grown["responses"].append({"name": "u", "partition_responses": []})
    failed = one_answer("t", 0, 5, 0)
    failed["responses"][0]["partition_responses"][0]["error_code"] = 6
    extra = one_answer("t", 0, 5, 0)
    extra["responses"][0]["partition_responses"][0]["error_message"] = "no"
    throttled = one_answer("t", 0, 5, 0)
    throttled["throttle_time_ms"] = 10
    for answer in (grown, failed, extra, throttled):
        assert type(answer) is OneAnswer
        assert templates.encode(9, 1, answer) is None


def test_a_template_refuses_layouts_that_depend_on_the_values() -> None:
    def body(base: int, start: int) -> dict[str, object]:
        return one_answer("t", 0, base, start)

    with pytest.raises(ValueError, match="exactly once"):  # the same value in two fields: which one is it?
        frame_template(PRODUCE, 9, lambda v: one_answer("t", 0, v, v), (8,))
    with pytest.raises(ValueError, match="exactly once"):  # the value is not a fixed-width field (here: a name)
        frame_template(PRODUCE, 9, lambda v: one_answer(str(v), 0, 1, 2), (8,))
    with pytest.raises(ValueError, match="depends on the values"):  # the value decides how many partitions
        frame_template(PRODUCE, 9, lambda v: {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": v}] * (1 + (v < 0))}], "throttle_time_ms": 0}, (8,))
    with pytest.raises(ValueError):
        frame_template(PRODUCE, 9, body, (3, 8))  # no 3-byte integers
    template = frame_template(PRODUCE, 9, body, (8, 8))
    assert template.fill(7, 1, 2) == encode_response(PRODUCE, 9, 7, body(1, 2))[0]
    with pytest.raises(EncodeError):
        template.fill(7, 1 << 63, 2)
    with pytest.raises(EncodeError):
        template.fill(7, 1)  # a value missing


def test_a_template_takes_four_slots_of_one_width_besides_the_correlation_id() -> None:
    # The correlation id has its own sentinel: a fourth 4-byte slot would find the id's bytes twice without it.
    def body(a: int, b: int, c: int, throttle: int) -> dict[str, object]:
        return {"responses": [{"name": "t", "partition_responses": [
            {"index": i, "error_code": 0, "base_offset": 5, "log_append_time_ms": -1, "log_start_offset": 0}
            for i in (a, b, c)]}], "throttle_time_ms": throttle}

    template = frame_template(PRODUCE, 9, body, (4, 4, 4, 4))
    for corr, values in ((11, (0, 1, 2, 3)), (-1, (-(1 << 31), (1 << 31) - 1, 0, -1))):
        assert template.fill(corr, *values) == encode_response(PRODUCE, 9, corr, body(*values))[0]
    with pytest.raises(ValueError, match="more than 4"):
        frame_template(PRODUCE, 9, lambda *v: body(*v[:4]), (4, 4, 4, 4, 4))


# ------------------------------------------------------------------------------------------------ request repeats

def _produce_frame(version: int, corr: int, client_id: str | None, tid: str | None, acks: int, name: str,
                   partitions: list[tuple[int, bytes]], trailing: bytes = b"") -> bytes:
    body = {"transactional_id": tid, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": name, "partition_data": [{"index": i, "records": r} for i, r in partitions]}]}
    return join_chunks(encode_request(PRODUCE, version, corr, body, client_id=client_id))[4:] + trailing


def _decoded(frame: bytes) -> tuple[RequestHeader, dict[str, Any]]:
    header, api, offset = decode_request_header(frame)
    return header, decode_struct(api.request, header.api_version, api.is_flexible(header.api_version), frame, offset)


_SHAPE = {"version": st.integers(3, 9), "client_id": st.none() | st.text(max_size=20),
          "tid": st.none() | st.text(max_size=10), "acks": st.sampled_from([-1, 0, 1]),
          "name": st.text(min_size=1, max_size=30), "partition": INT32}


@settings(max_examples=300, deadline=None)
@given(shape=st.fixed_dictionaries(_SHAPE), records=st.binary(min_size=4, max_size=200).filter(any), data=st.data())
def test_a_repeat_decodes_as_the_generic_decoder_does(shape: dict[str, Any], records: bytes,
                                                       data: st.DataObject) -> None:
    first = _produce_frame(shape["version"], 1, shape["client_id"], shape["tid"], shape["acks"], shape["name"],
                           [(shape["partition"], records)])
    header, body = _decoded(first)
    repeat = RequestRepeat.learn(PRODUCE, first, header, body)
    # Learned whenever the records are longer than what can follow them (3 bytes of tagged fields at most here) and
    # not all zero bytes (a record batch never is: its magic byte is 2): their last occurrence in the frame is then
    # theirs. (All-zero records can overlap the zero bytes after them, and the probe refuses them.)
    assert repeat is not None
    # The same request with another correlation id and other records of the same size: recognised, and equal to
    # what the decoder makes of it.
    corr = data.draw(INT32)
    again = _produce_frame(shape["version"], corr, shape["client_id"], shape["tid"], shape["acks"], shape["name"],
                           [(shape["partition"], data.draw(st.binary(min_size=len(records), max_size=len(records))))])
    assert repeat.match(again) == _decoded(again)
    # Anything else changed (another partition, acks, name, client id...): None, or exactly the decoder's answer.
    other = {**shape, **data.draw(st.fixed_dictionaries({}, optional=_SHAPE))}
    changed = _produce_frame(other["version"], corr, other["client_id"], other["tid"], other["acks"], other["name"],
                             [(other["partition"], data.draw(st.binary(min_size=0, max_size=200)))])
    got = repeat.match(changed)
    assert got is None or got == _decoded(changed)
    if other != shape:
        assert got is None


def test_a_repeat_is_new_down_to_the_partition() -> None:
    frame = _produce_frame(9, 1, "c", None, -1, "t", [(0, b"r" * 10)])
    repeat = RequestRepeat.learn(PRODUCE, frame, *_decoded(frame))
    assert repeat is not None
    _, one = repeat.match(frame)  # type: ignore[misc]
    one["topic_data"][0]["partition_data"][0]["index"] = 5  # a handler changing what it was given
    one["acks"] = 0
    assert repeat.match(frame) == _decoded(frame)


def test_a_repeat_does_not_keep_the_records_it_learned_from() -> None:
    records = b"r" * 1000
    frame = _produce_frame(9, 1, "c", None, -1, "t", [(0, records)])
    header, body = _decoded(frame)
    repeat = RequestRepeat.learn(PRODUCE, frame, header, body)
    assert repeat is not None
    held = [getattr(repeat, name) for name in RequestRepeat.__slots__]
    assert not any(records in str(v).encode() or v is body for v in held)


def test_what_a_repeat_cannot_prove_is_not_learned() -> None:
    two = _produce_frame(9, 1, "c", None, -1, "t", [(0, b"a" * 10), (1, b"b" * 10)])
    assert RequestRepeat.learn(PRODUCE, two, *_decoded(two)) is None  # two partitions
    one = _produce_frame(9, 1, "c", None, -1, "t", [(0, b"a" * 10)])
    assert RequestRepeat.learn(PRODUCE, bytearray(one), *_decoded(one)) is None  # a large frame's bytearray
    # Trailing bytes (the parser ignores them) holding the records again: the records cannot be placed for sure.
    tricky = _produce_frame(9, 1, "c", None, -1, "t", [(0, b"a" * 10)], trailing=b"a" * 10)
    assert RequestRepeat.learn(PRODUCE, tricky, *_decoded(tricky)) is None
    # A repeat never matches a frame of another length, or a bytearray.
    repeat = RequestRepeat.learn(PRODUCE, one, *_decoded(one))
    assert repeat is not None
    assert repeat.match(one + b"x") is None and repeat.match(bytearray(one)) is None
