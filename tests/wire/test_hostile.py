"""Hostile and malformed input: only DecodeError escapes, and nothing allocates more than the frame holds."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mover.wire import (
    ALL_APIS,
    DecodeError,
    FrameDecoder,
    FrameTooLarge,
    UnsupportedRequest,
    decode_request,
    decode_response,
    decode_struct,
    encode_request,
    encode_response,
    join_chunks,
)
from mover.wire.framing import LARGE_FRAME
from mover.wire.header import decode_request_header
from mover.wire.messages import API_BY_KEY, API_VERSIONS, DESCRIBE_LOG_DIRS, FETCH, METADATA, PRODUCE

# Decoding a tiny hostile frame must stay well under this: the point is that a 2**31 count allocates nothing.
SMALL_ALLOCATION = 1 << 20


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    h = struct.pack(">hhih", api_key, version, 1, 1) + b"c"
    return h + (b"\x00" if flexible else b"")


def _peak_alloc(fn: object) -> int:
    tracemalloc.start()
    try:
        fn()  # type: ignore[operator]
    except DecodeError:
        pass
    else:
        raise AssertionError("expected DecodeError")
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\x7f\xff\xff\xff", id="int32-array-count"),
        pytest.param(b"\x00\x00\x00\x01\x7f\xff" + b"x" * 10, id="string-length"),
        pytest.param(b"\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff", id="nested-int32-array"),
        pytest.param(b"\xff\xff\xff\xfe", id="negative-array-count"),
        pytest.param(b"\x00\x00\x00\x01\xff\xfe", id="negative-string-length"),
    ],
)
def test_hostile_classic_lengths(body: bytes) -> None:
    frame = _header(35, 1, False) + body
    assert _peak_alloc(lambda: decode_request(frame)) < SMALL_ALLOCATION


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xff\xff\xff\xff\x0f", id="compact-array-count-2**32"),
        pytest.param(b"\x80\x80\x80\x80\x80\x01", id="varint-too-long"),
        pytest.param(b"\x02\xff\xff\xff\x7f", id="compact-string-length"),
        pytest.param(b"\x01\xff\xff\xff\x7f", id="tag-count"),
        pytest.param(b"\x01\x01\x00\xff\xff\xff\x07", id="tag-size"),
        pytest.param(b"\x80", id="truncated-varint"),
    ],
)
def test_hostile_compact_lengths(body: bytes) -> None:
    frame = _header(35, 2, True) + body
    assert _peak_alloc(lambda: decode_request(frame)) < SMALL_ALLOCATION


def test_huge_count_of_small_elements_in_flexible_array() -> None:
    # Metadata v12 request: compact topics array claiming 2**31 elements in a 20-byte frame
    frame = _header(3, 12, True) + b"\x80\x80\x80\x80\x08" + b"\x00" * 8
    assert _peak_alloc(lambda: decode_request(frame)) < SMALL_ALLOCATION


def test_null_where_not_nullable() -> None:
    with pytest.raises(DecodeError):
        decode_request(_header(34, 1, False) + b"\xff\xff\xff\xff")  # AlterReplicaLogDirs dirs is not nullable
    with pytest.raises(DecodeError):
        # DescribeLogDirs v1 response: one result with a null log_dir
        decode_response(DESCRIBE_LOG_DIRS, 1, b"\x00\x00\x00\x01" + b"\x00" * 4 + b"\x00\x00\x00\x01\x00\x00\xff\xff")


def test_invalid_utf8() -> None:
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_request(_header(35, 1, False) + b"\x00\x00\x00\x01\x00\x02\xff\xfe\xff\xff\xff\xff")


def test_unknown_tagged_fields_are_skipped() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}], "throttle_time_ms": 0}
    frame = join_chunks(encode_response(API_VERSIONS, 3, 1, body))[4:]
    assert frame.endswith(b"\x00")  # default-valued tagged fields are not written
    # replace the empty tagged section with: tag 1 (finalized_features_epoch) = 7, unknown tag 40 with 3 bytes
    tagged = b"\x02" + b"\x01\x08" + struct.pack(">q", 7) + b"\x28\x03abc"
    _, got = decode_response(API_VERSIONS, 3, frame[:-1] + tagged)
    assert got["finalized_features_epoch"] == 7
    assert got["api_keys"] == body["api_keys"]
    assert got["zk_migration_ready"] is False


def test_tagged_fields_written_in_tag_order_and_read_back() -> None:
    body = {"zk_migration_ready": True, "finalized_features_epoch": 3, "supported_features": []}
    frame = join_chunks(encode_response(API_VERSIONS, 4, 1, body))[4:]
    # empty api_keys (0x01), throttle, then tagged: count 2, tag 1 (8 bytes), tag 3 (1 byte)
    assert frame[-14:] == b"\x02\x01\x08" + struct.pack(">q", 3) + b"\x03\x01\x01"
    assert decode_response(API_VERSIONS, 4, frame)[1]["finalized_features_epoch"] == 3


def test_tagged_struct_fields_in_fetch_v12() -> None:
    part = {"partition_index": 1, "current_leader": {"leader_id": 4, "leader_epoch": 2}, "records": None}
    body = {"responses": [{"topic": "t", "partitions": [part]}]}
    _, got = decode_response(FETCH, 12, join_chunks(encode_response(FETCH, 12, 1, body))[4:])
    p = got["responses"][0]["partitions"][0]
    assert p["current_leader"] == {"leader_id": 4, "leader_epoch": 2}
    assert p["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


def test_tagged_field_with_wrong_size_is_rejected() -> None:
    body = {"error_code": 0, "api_keys": []}
    frame = join_chunks(encode_response(API_VERSIONS, 3, 1, body))[4:]
    with pytest.raises(DecodeError):
        decode_response(API_VERSIONS, 3, frame[:-1] + b"\x01\x01\x09" + b"\x00" * 9)


def test_request_header_errors() -> None:
    with pytest.raises(DecodeError):
        decode_request(b"\x00\x12\x00")
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(struct.pack(">hhih", 18, 9, 42, -1))
    assert info.value.header.correlation_id == 42
    with pytest.raises(UnsupportedRequest):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))


def test_frame_decoder_splits_and_joins() -> None:
    frames = [b"", b"a", b"hello" * 100]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    for step in (1, 3, 7, len(stream)):
        dec = FrameDecoder()
        out: list[bytes] = []
        for i in range(0, len(stream), step):
            out += dec.feed(stream[i : i + step])
        assert out == frames
        assert dec.buffered == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 100, LARGE_FRAME - 1, LARGE_FRAME, LARGE_FRAME + 1, 3 * LARGE_FRAME + 7]),
                min_size=1, max_size=5),
       st.lists(st.integers(1, 5 * LARGE_FRAME), min_size=1, max_size=12))
def test_large_frames_come_out_whole_and_owned_from_any_split(sizes: list[int], steps: list[int]) -> None:
    frames = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    dec = FrameDecoder()
    out: list[bytes | bytearray] = []
    pos = i = 0
    while pos < len(stream):
        n = steps[i % len(steps)]
        out += dec.feed(stream[pos : pos + n])
        pos = min(pos + n, len(stream))
        i += 1
        # Whatever the split, what is held is exactly what was fed and not yet returned.
        assert dec.buffered == pos - sum(4 + len(f) for f in out) - (4 if dec.pending_size is not None else 0)
    assert out == frames
    # A large frame is a bytearray of its own (its records can be written in place); small ones stay bytes.
    assert [type(f) for f in out] == [bytearray if len(f) >= LARGE_FRAME else bytes for f in frames]
    assert dec.buffered == 0 and dec.pending_size is None


def test_a_large_frame_does_not_keep_a_buffer_the_caller_reuses() -> None:
    body = bytes(range(256)) * (LARGE_FRAME // 128)
    stream = struct.pack(">i", len(body)) + body
    dec = FrameDecoder()
    chunk = bytearray(1000)
    out: list[bytes | bytearray] = []
    for i in range(0, len(stream), 1000):
        piece = stream[i : i + 1000]
        chunk[: len(piece)] = piece
        out += dec.feed(memoryview(chunk)[: len(piece)])
        chunk[:] = b"\xee" * 1000  # the caller's next read lands here
    assert out == [body]


def test_whole_declines_while_a_large_frame_is_arriving() -> None:
    dec = FrameDecoder()
    assert dec.feed(struct.pack(">i", LARGE_FRAME) + b"x" * 10) == []
    one = struct.pack(">i", 5) + b"hello"
    assert dec.whole(one) is None and dec.buffered == 10
    assert dec.feed(b"x" * (LARGE_FRAME - 10) + one) == [b"x" * LARGE_FRAME, b"hello"]


def test_records_from_a_writable_frame_are_views_into_it() -> None:
    batch = b"\x01" * 100
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
    frame = join_chunks(encode_request(PRODUCE, 9, 7, body, client_id="c"))[4:]
    header, _, offset = decode_request_header(frame, API_BY_KEY)
    from_bytes = decode_struct(PRODUCE.request, 9, True, frame, offset)["topic_data"][0]["partition_data"][0]
    assert type(from_bytes["records"]) is bytes and from_bytes["records"] == batch
    owned = bytearray(frame)
    got = decode_struct(PRODUCE.request, 9, True, owned, offset)["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(got, memoryview) and not got.readonly and got == batch
    got[0] = 0x02  # the append writes offsets through it: into the caller's frame, nothing copied
    assert owned[owned.index(b"\x02\x01\x01")] == 0x02


def test_frame_too_large_is_refused_from_the_prefix_alone() -> None:
    dec = FrameDecoder(max_size=1000)
    assert dec.feed(struct.pack(">i", 1000) + b"x" * 1000) == [b"x" * 1000]
    with pytest.raises(FrameTooLarge) as info:
        dec.feed(struct.pack(">i", 1001))
    assert info.value.size == 1001
    with pytest.raises(FrameTooLarge):
        dec.feed(b"more")  # framing is lost for good


def test_frame_decoder_whole_takes_exactly_one_frame_and_nothing_else() -> None:
    dec = FrameDecoder(max_size=100)
    one = struct.pack(">i", 5) + b"hello"
    assert dec.whole(one) == b"hello" and dec.buffered == 0
    assert dec.whole(struct.pack(">i", 0)) == b""
    # Not exactly one frame, or over the limit: None, and nothing consumed (feed then sees the same bytes).
    for data in (one + one, one[:-1], b"\x00\x00", struct.pack(">i", -1) + b"x" * 3,
                 struct.pack(">i", 101) + b"x" * 101):
        assert dec.whole(data) is None and dec.buffered == 0
    assert dec.feed(one[:3]) == [] and dec.whole(one) is None  # something buffered: only feed may go on
    assert dec.feed(one[3:]) == [b"hello"]


def test_negative_frame_size() -> None:
    with pytest.raises(DecodeError):
        FrameDecoder().feed(b"\xff\xff\xff\xfe")


def test_default_max_frame_size_is_kafkas() -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(struct.pack(">i", 104857601))


# ------------------------------------------------------------------------------------------------------ fuzzing

_SEEDS: list[bytes] = []
for _api in ALL_APIS:
    for _v in (_api.valid.lo, _api.valid.hi):
        _SEEDS.append(join_chunks(encode_request(_api, _v, 1, {}))[4:])
_SEEDS.append(
    join_chunks(encode_request(METADATA, 12, 1, {"topics": [{"name": "a"}, {"name": None}]}))[4:],
)
_SEEDS.append(join_chunks(encode_request(DESCRIBE_LOG_DIRS, 3, 1, {"topics": [{"topic": "t", "partitions": [1]}]}))[4:])

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_any(frame: bytes) -> None:
    try:
        decode_request(frame)
    except (DecodeError, UnsupportedRequest):
        pass


@_FUZZ
@given(st.binary(max_size=200))
def test_fuzz_random_frames(frame: bytes) -> None:
    _decode_any(frame)


@_FUZZ
@given(
    st.sampled_from(_SEEDS),
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 600),
    st.binary(max_size=8),
)
def test_fuzz_mutated_frames(seed: bytes, flips: list[tuple[int, int]], cut: int, tail: bytes) -> None:
    data = bytearray(seed)
    for pos, byte in flips:
        if data:
            data[pos % len(data)] = byte
    _decode_any(bytes(data))
    _decode_any(bytes(data[:cut]))
    _decode_any(bytes(data) + tail)


@_FUZZ
@given(st.sampled_from([(a, v) for a in ALL_APIS for v in range(a.valid.lo, a.valid.hi + 1)]), st.binary(max_size=120))
def test_fuzz_response_bodies(api_version: tuple, body: bytes) -> None:
    api, version = api_version
    for kind in ("request", "response"):
        try:
            decode_struct(getattr(api, kind), version, api.is_flexible(version), body)
        except DecodeError:
            pass


@_FUZZ
@given(st.binary(max_size=64), st.lists(st.integers(1, 16), min_size=1, max_size=8))
def test_fuzz_frame_decoder(stream: bytes, steps: list[int]) -> None:
    dec = FrameDecoder(max_size=32)
    pos = 0
    i = 0
    try:
        while pos < len(stream):
            n = steps[i % len(steps)]
            for frame in dec.feed(stream[pos : pos + n]):
                assert len(frame) <= 32
            pos += n
            i += 1
    except DecodeError:
        pass
