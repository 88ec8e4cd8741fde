"""The generated struct codecs (mover/wire/codegen.py `compile_plan`) against the field-by-field walk they replaced.

The reference below reads and writes each top-level field with its own closure, in declared order, as the codec did
before it generated one function per struct and version; the generated functions must give the same bytes, the
same dicts, and a DecodeError on exactly the inputs the walk refuses (truncations and flipped bytes of valid
messages). kafka-python's re-encoding (test_codec.py) is the independent check of the bytes themselves.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from mover.wire import ALL_APIS, Api, DecodeError, EncodeError, join_chunks
from mover.wire.codegen import MISSING
from mover.wire.cursor import Reader, Writer
from mover.wire.plans import struct_plan
from tests.wire.samples import sample_struct

CASES = [
    pytest.param(api, kind, v, id=f"{api.name}-{kind}-v{v}")
    for api in ALL_APIS
    for kind in ("request", "response")
    for v in range(api.valid.lo, api.valid.hi + 1)
]


def reference_encode(plan: Any, value: dict[str, Any]) -> bytes:
    w = Writer()
    if not value.keys() <= plan.names:
        raise EncodeError("unknown fields")
    for name, enc, _dec, default in plan.regular:
        v = value.get(name, MISSING)
        enc(w, default() if v is MISSING else v)
    if plan.flexible:
        plan.encode_tagged(w, value.get)
    return join_chunks(w.finish())


def reference_decode(plan: Any, data: bytes) -> dict[str, Any]:
    r = Reader(memoryview(data), 0, len(data))
    out = {name: dec(r) for name, _enc, dec, _default in plan.regular}
    if plan.flexible:
        plan.decode_tagged(r, out)
    for name, default in plan.absent:
        out[name] = default()
    return out


def generated_encode(plan: Any, value: dict[str, Any]) -> bytes:
    w = Writer()
    plan.encode(w, value)
    return join_chunks(w.finish())


def generated_decode(plan: Any, data: bytes) -> dict[str, Any]:
    return plan.decode(Reader(memoryview(data), 0, len(data)))


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except DecodeError:
        return ("DecodeError", None)


@pytest.mark.parametrize(("api", "kind", "version"), CASES)
def test_generated_codec_matches_the_field_walk(api: Api, kind: str, version: int) -> None:
    rng = random.Random(f"compiled-{api.key}-{kind}-{version}")
    s = getattr(api, kind)
    plan = struct_plan(s, version, api.is_flexible(version))
    for _ in range(10):
        value = sample_struct(rng, s, version)
        data = reference_encode(plan, value)
        assert generated_encode(plan, value) == data
        assert generated_decode(plan, data) == reference_decode(plan, data) == value
        # Every truncation and a few flipped bytes: the same answer or the same refusal.
        for cut in range(len(data)):
            assert outcome(generated_decode, plan, data[:cut]) == outcome(reference_decode, plan, data[:cut])
        for _ in range(10):
            if not data:
                break
            bad = bytearray(data)
            bad[rng.randrange(len(bad))] = rng.randrange(256)
            assert outcome(generated_decode, plan, bytes(bad)) == outcome(reference_decode, plan, bytes(bad))


def test_generated_encode_refuses_what_the_closures_refuse() -> None:
    from mover.wire.messages import PRODUCE

    plan = struct_plan(PRODUCE.request, 7, False)
    good = {"transactional_id": None, "acks": -1, "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}]}
    assert generated_encode(plan, good) == reference_encode(plan, good)
    for field, bad in [("acks", True), ("acks", "1"), ("timeout_ms", None), ("topic_data", None),
                       ("topic_data", [{"name": 5, "partition_data": []}]),
                       ("topic_data", [{"name": "t", "partition_data": [{"index": 0, "records": "str"}]}])]:
        value = {**good, field: bad}
        with pytest.raises(EncodeError):
            generated_encode(plan, value)
        with pytest.raises(EncodeError):
            reference_encode(plan, value)
