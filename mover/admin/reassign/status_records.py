"""Kafka record batches (magic v2) as the reassignment status log writes and reads them: keyed JSON records, one
uncompressed batch per append, no producer id. The broker assigns the offsets; a reader checks each batch's CRC-32C
and skips control batches (docs/cli.md, "Where the requests live").

    data = encode_batch([(b"key", b'{"v":1}')], timestamp_ms=now)
    for offset, timestamp_ms, key, value in decode_batches(fetched):
        ...
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator, Sequence

import crc32c

from mover.admin.common import AdminError
from mover.storage.errors import CorruptRecordError
from mover.storage.log_segment import _read_varint
from mover.storage.record_batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    parse_header,
)

_HEAD = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21  # the CRC covers everything from `attributes` on
_NO_PRODUCER = -1
_GZIP = 1


def _varint(n: int) -> bytes:
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_batch(records: Sequence[tuple[bytes, bytes]], *, timestamp_ms: int) -> bytes:
    """One v2 batch of (key, value) records, offsets 0..n-1 (the broker rewrites the base offset)."""
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = (b"\x00" + _varint(0) + _varint(delta) + _varint(len(key)) + key + _varint(len(value)) + value
               + _varint(0))
        body += _varint(len(rec)) + rec
    n = len(records)
    head = bytearray(_HEAD.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, MAGIC_V2, 0, 0, n - 1, timestamp_ms,
                                timestamp_ms, _NO_PRODUCER, -1, -1, n))
    batch = head + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[_CRC_START:])))
    return bytes(batch)


def decode_batches(data: bytes) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp ms, key, value) of every data record in `data`; a trailing partial batch (a fetch cut at
    its size limit) is left for the next fetch."""
    mv = memoryview(data)
    pos = 0
    while pos + HEADER_SIZE <= len(mv):
        (length,) = struct.unpack_from(">i", mv, pos + 8)
        end = pos + LOG_OVERHEAD + length
        if end > len(mv):
            return
        try:
            header = parse_header(mv, pos)
        except CorruptRecordError as e:
            raise AdminError(f"the reassignment status log holds a batch it cannot read: {e}") from None
        if crc32c.crc32c(bytes(mv[pos + _CRC_START:end])) != header.crc:
            raise AdminError(f"the reassignment status log has a corrupt batch at offset {header.base_offset}")
        if not header.attributes & CONTROL_MASK:
            records = mv[pos + HEADER_SIZE:end]
            compression = header.attributes & COMPRESSION_MASK
            if compression == _GZIP:
                records = memoryview(gzip.decompress(records))
            elif compression:
                raise AdminError("the reassignment status log's batch at offset "
                                 f"{header.base_offset} is compressed with codec {compression}: set the topic's "
                                 "compression.type to uncompressed or producer")
            try:
                yield from _records(records, header.base_offset, header.base_timestamp)
            except CorruptRecordError as e:
                raise AdminError(f"the reassignment status log's batch at offset {header.base_offset}: {e}") from None
        pos = end


def _records(mv: memoryview, base_offset: int, base_ts: int) -> Iterator[tuple[int, int, bytes | None,
                                                                            bytes | None]]:
    pos = 0
    while pos < len(mv):
        length, pos = _read_varint(mv, pos)
        end = pos + length
        p = pos + 1  # attributes
        ts_delta, p = _read_varint(mv, p)
        offset_delta, p = _read_varint(mv, p)
        key_len, p = _read_varint(mv, p)
        key = bytes(mv[p:p + key_len]) if key_len >= 0 else None
        p += max(key_len, 0)
        value_len, p = _read_varint(mv, p)
        value = bytes(mv[p:p + value_len]) if value_len >= 0 else None
        yield base_offset + offset_delta, base_ts + ts_delta, key, value
        pos = end
