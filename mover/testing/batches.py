"""Record batches written by kafka-python's DefaultRecordBatchBuilder: an independent v2 batch writer, so a test of
our reader or of the broker does not check our code against itself.

    from mover.testing.batches import make_batch
"""

from __future__ import annotations

import struct
import time

from kafka.record.default_records import DefaultRecordBatchBuilder

_NO_LIMIT = 2**31 - 1


def make_batch(values: list[bytes], *, timestamp_ms: int | None = None, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, base_offset: int = 0,
               timestamps: list[int] | None = None, keys: list[bytes | None] | None = None,
               is_transactional: bool = False, compression_type: int = 0) -> bytes:
    """One v2 batch holding `values` (offset deltas 0..n-1). Every record gets `timestamp_ms` (default: now)
    unless `timestamps` gives one per record. `base_offset` goes into the 8 bytes the CRC does not cover."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression_type, is_transactional=is_transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=_NO_LIMIT)
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else timestamp_ms
        key = keys[i] if keys is not None else None
        if builder.append(i, timestamp=ts, key=key, value=value, headers=[]) is None:
            raise ValueError("kafka-python refused the record")
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


def make_batches(groups: list[list[bytes]], **kwargs: object) -> bytes:
    """Several batches back to back (each from make_batch)."""
    return b"".join(make_batch(g, **kwargs) for g in groups)  # type: ignore[arg-type]
