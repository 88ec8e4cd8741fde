"""Kafka's record batch (magic v2) header: parsing, validation and base offset assignment.

Layout (61 bytes, big-endian): base_offset i64, batch_length i32, partition_leader_epoch i32, magic i8,
crc u32, attributes i16, last_offset_delta i32, base_timestamp i64, max_timestamp i64, producer_id i64,
producer_epoch i16, base_sequence i32, record_count i32, then the records. batch_length counts everything
after itself. The CRC-32C covers the bytes from `attributes` to the end of the batch, so base_offset and
partition_leader_epoch can be rewritten without recomputing it.

Crash-safety invariants: none; this module works on buffers only. It never copies a buffer it validates (it
uses memoryviews), because produce requests can be megabytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import crc32c

from mover.storage.errors import CorruptRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes batch_length does not count
MAGIC_V2 = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_OVERHEAD = struct.Struct(">qi")
_CRC_START = 21  # offset of `attributes` within the batch
_MAGIC_AT = 16
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

assert _HEADER.size == HEADER_SIZE

_new_tuple = tuple.__new__


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


Buffer = bytes | bytearray | memoryview


def parse_overhead(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """(base_offset, size of the whole batch) from the first 12 bytes; enough to walk a log."""
    if len(buf) - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"{len(buf) - pos} bytes at {pos} are too few for a batch's length")
    base_offset, length = _OVERHEAD.unpack_from(buf, pos)
    if length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos} has length {length}, below the minimum {_MIN_BATCH_LENGTH}")
    return base_offset, length + LOG_OVERHEAD


def magic_of(buf: Buffer, pos: int = 0) -> int:
    """The magic byte of the batch at `pos` (the format version), read before anything else is trusted: older
    formats lay the rest out differently. CorruptRecordError when the buffer is too short to hold it."""
    if len(buf) - pos <= _MAGIC_AT:
        raise CorruptRecordError(f"{len(buf) - pos} bytes at {pos} are too few for a batch's magic byte")
    return buf[pos + _MAGIC_AT]


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at `pos`. Checks the length and magic, not the CRC (see validate_batches)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"{len(buf) - pos} bytes at {pos} are too few for a batch header")
    header = _new_tuple(BatchHeader, _HEADER.unpack_from(buf, pos))  # BatchHeader._make without its Python frame
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at {pos} has length {header.batch_length}, below the minimum {_MIN_BATCH_LENGTH}")
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"batch at {pos} has magic {header.magic}; only magic 2 is supported")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError(f"batch at {pos} has a negative last offset delta or record count")
    return header


def batch_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of the batch at `pos` as Kafka computes it: from `attributes` to the end."""
    with memoryview(buf) as mv:
        return crc32c.crc32c(mv[pos + _CRC_START:pos + size])


def check_crc(buf: Buffer, header: BatchHeader, pos: int) -> None:
    actual = batch_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at {pos} (base offset {header.base_offset}) has CRC {header.crc:#010x}, "
            f"computed {actual:#010x}")


def validate_batches(buf: Buffer, parsed: Sequence[BatchHeader] = ()) -> list[BatchHeader]:
    """Headers of the whole v2 batches filling `buf` exactly; CorruptRecordError on any defect.

    `parsed`: what `parse_header` returned for the first batches of `buf`, in order, when the caller already ran it
    (Produce checks the header before the append): not parsed a second time; their CRCs are checked here all the
    same."""
    headers: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    known = len(parsed)
    while pos < end:
        i = len(headers)
        header = parsed[i] if i < known else parse_header(buf, pos)
        size = header.size
        if pos + size > end:
            raise CorruptRecordError(f"batch at {pos} needs {size} bytes, only {end - pos} remain (partial batch)")
        check_crc(buf, header, pos)
        headers.append(header)
        pos += size
    return headers


def any_idempotent(headers: Sequence[BatchHeader]) -> bool:
    """Whether any of the batches is an idempotent producer's (has a producer id). A plain loop: `any()` over a
    generator costs twice as much for the one batch of a typical Produce, and the append path asks per request."""
    for h in headers:
        if h.producer_id >= 0:
            return True
    return False


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Rewrite the base offset of the batch at `pos` in place (outside the CRC, so the batch stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, offset)
