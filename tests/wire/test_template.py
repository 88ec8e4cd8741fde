"""Frame templates (mover/wire/template.py) and the Produce answers encoded from them (mover/api/produce.py): every
filled frame is byte-equal to the generic encoder's; layouts that depend on the values are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mover.api.produce import AnswerTemplates, OneAnswer, one_answer
from mover.wire import EncodeError, decode_response, encode_response, frame_template
from mover.wire.messages import PRODUCE

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
