"""One generic encoder and decoder for every message declared with `mover.wire.schema`: the codec's entry points.

No I/O here: bytes in, dicts out; dicts in, chunks out. Each (struct, version, flexible) is compiled once into a
plan (plans.py) whose decode and encode are generated functions (codegen.py), so encoding 10,000 partitions does
not re-read the declaration 10,000 times. This module only sets up the cursors around a plan and turns what can go
wrong inside one into the codec's two errors.

Representation: a struct is a plain `dict` keyed by snake_case field names; arrays are lists; strings `str`;
bytes `bytes`; uuids `uuid.UUID`; null `None`. For encoding, an element of an array of structs whose fields (in that
version) are all fixed-width numbers or bools may also be a `tuple` of the values in declared order: such rows are
packed with one precompiled `struct.Struct` each, which is what keeps a DescribeLogDirs answer of 10,000 partitions
to a few milliseconds (the layout still comes from the declaration; nothing else describes the message).
Decoding returns every declared field, those absent from the version set to their default, so handlers read
`request["isolation_level"]` whatever the version.
"""

from __future__ import annotations

import struct
from typing import Any

from mover.wire.chunks import Chunk, frame_length
from mover.wire.cursor import Reader, Writer
from mover.wire.errors import DecodeError, EncodeError
from mover.wire.plans import struct_plan
from mover.wire.primitives import I32
from mover.wire.schema import Struct

__all__ = ["decode_struct", "encode_framed", "encode_struct", "tagged_section_length"]


def encode_struct(s: Struct, version: int, flexible: bool, value: dict[str, Any], prefix: bytes = b"") -> list[Chunk]:
    """Encode `value` as struct `s` at `version`.

    Args:
        prefix: bytes to put first (a header), so small messages come out as one chunk.

    Returns:
        Chunks: bytes, and any FileRegion `records` values as they were given (for sendfile). Plain-bytes records
        are inlined.

    Raises:
        EncodeError: a value does not fit its declaration.
    """
    return _encoded(s, version, flexible, value, prefix).finish()


def _encoded(s: Struct, version: int, flexible: bool, value: dict[str, Any], head: bytes) -> Writer:
    """A writer holding `head` and then `value` encoded."""
    w = Writer()
    w.buf += head
    try:
        struct_plan(s, version, flexible).encode(w, value)
    except struct.error as e:
        raise EncodeError(f"{s.name} v{version}: {e}") from None
    return w


def encode_framed(s: Struct, version: int, flexible: bool, value: dict[str, Any], head: bytes) -> list[Chunk]:
    """`encode_struct` of a whole frame: `head` starts with four placeholder bytes that become the frame's size
    (everything after them, FileRegions included)."""
    w = _encoded(s, version, flexible, value, head)
    if not w.chunks:  # all in one buffer: the size goes in place
        buf = w.buf
        I32.pack_into(buf, 0, len(buf) - 4)
        return [bytes(buf)]
    chunks = w.finish()
    first = chunks[0]
    assert isinstance(first, bytes)
    chunks[0] = I32.pack(frame_length(chunks) - 4) + first[4:]
    return chunks


def decode_struct(s: Struct, version: int, flexible: bool, data: bytes | bytearray | memoryview, offset: int = 0
                  ) -> dict[str, Any]:
    """Decode struct `s` at `version` from `data[offset:]`. Trailing bytes are ignored, as Kafka's parsers do.
    `records` fields are bytes, except from a writable buffer (a large frame, which the caller owns: FrameDecoder):
    there they are writable memoryviews into it, so megabytes of produced batches are not copied to be decoded and
    the append can write their offsets in place.

    Raises:
        DecodeError: the only exception bad input can cause.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if offset < 0 or offset > len(mv):
        raise DecodeError(f"offset {offset} outside the {len(mv)}-byte buffer")
    r = Reader(mv, offset, len(mv))
    try:
        return struct_plan(s, version, flexible).decode(r)
    except RecursionError:
        raise DecodeError("message nests too deeply") from None


def tagged_section_length(data: bytes | memoryview, offset: int) -> int:
    """Skip a tagged-field section (as in request header v2) and return the offset just past it."""
    if 0 <= offset < len(data) and data[offset] == 0:
        return offset + 1  # no tagged fields, the common case
    mv = data if isinstance(data, memoryview) else memoryview(data)
    r = Reader(mv, offset, len(mv))
    count = r.uvarint()
    if count * 2 > r.remaining():
        raise DecodeError(f"{count} tagged fields cannot fit in {r.remaining()} bytes")
    for _ in range(count):
        r.uvarint()
        r.take(r.uvarint())
    return r.pos
