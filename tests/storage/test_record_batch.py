from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch

from mover.storage.errors import CorruptRecordError
from mover.storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    any_idempotent,
    parse_header,
    set_base_offset,
    validate_batches,
)
from mover.testing.batches import make_batch


def test_header_fields_match_kafka_python() -> None:
    raw = make_batch([b"a", b"bb", b"ccc"], timestamp_ms=1234, producer_id=7, producer_epoch=2,
                     base_sequence=5, base_offset=100)
    h = parse_header(raw)
    assert (h.base_offset, h.magic, h.record_count, h.last_offset_delta) == (100, 2, 3, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 5)
    assert (h.base_timestamp, h.max_timestamp) == (1234, 1234)
    assert h.last_offset == 102 and h.next_offset == 103
    assert h.size == len(raw) == h.batch_length + LOG_OVERHEAD
    assert not h.is_transactional and not h.is_control
    assert DefaultRecordBatch(bytearray(raw)).validate_crc()
    assert h.crc == crc32c.crc32c(raw[21:])


def test_transactional_flag() -> None:
    h = parse_header(
        make_batch([b"x"], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True))
    assert h.is_transactional


def test_validate_several_batches() -> None:
    buf = make_batch([b"a"]) + make_batch([b"b", b"c"]) + make_batch([b"d"] * 5)
    assert [h.record_count for h in validate_batches(buf)] == [1, 2, 5]
    assert validate_batches(b"") == []


def test_crc_mismatch_is_rejected() -> None:
    buf = bytearray(make_batch([b"hello"]))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(buf)


def test_headers_parsed_by_the_caller_are_taken_and_their_crcs_still_checked() -> None:
    """Produce parses a batch's header for its request checks and hands it to the append (validate_batches'
    `parsed`): it is not parsed again, but the CRC is checked all the same, and batches after the parsed ones are
    parsed here."""
    first, second = make_batch([b"a"]), make_batch([b"b", b"c"])
    h = parse_header(first)
    got = validate_batches(first + second, (h,))
    assert got[0] is h and [x.record_count for x in got] == [1, 2]
    corrupt = bytearray(first)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(corrupt, (h,))
    assert any_idempotent(got) is False
    assert any_idempotent([parse_header(make_batch([b"i"], producer_id=3, producer_epoch=0, base_sequence=0))])


def test_bad_magic_is_rejected() -> None:
    buf = bytearray(make_batch([b"hello"]))
    buf[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batches(buf)


def test_short_and_partial_batches_are_rejected() -> None:
    raw = make_batch([b"hello", b"world"])
    with pytest.raises(CorruptRecordError):
        parse_header(raw[:HEADER_SIZE - 1])
    with pytest.raises(CorruptRecordError, match="partial"):
        validate_batches(raw + raw[:-3])
    bad_len = bytearray(raw)
    struct.pack_into(">i", bad_len, 8, 10)
    with pytest.raises(CorruptRecordError, match="length"):
        validate_batches(bad_len)
    with pytest.raises(ValueError):  # CorruptRecordError is a ValueError for callers that only know that
        validate_batches(b"\0" * 100)


def test_set_base_offset_keeps_the_crc_valid() -> None:
    buf = bytearray(make_batch([b"a"]) + make_batch([b"b", b"c"]))
    first = validate_batches(buf)[0]
    set_base_offset(buf, 0, 41)
    set_base_offset(buf, first.size, 42)
    assert [h.base_offset for h in validate_batches(buf)] == [41, 42]
    assert DefaultRecordBatch(buf[first.size:]).validate_crc()
