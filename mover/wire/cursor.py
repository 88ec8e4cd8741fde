"""The two cursors every field codec works through: a bounds-checked Reader and a chunk-collecting Writer.

One place decides how far a read may go and how output is gathered, so no codec can read past its frame (every
read goes through `Reader.take` or checks `end` as it does) and record data given as a FileRegion stays out of the
buffer. Unsigned varints live here because the tagged-field sections and compact lengths need them at this level.
"""

from __future__ import annotations

from mover.wire.chunks import Chunk
from mover.wire.errors import DecodeError, EncodeError
from mover.wire.file_region import FileRegion

__all__ = ["MAX_VARINT_BYTES", "Reader", "Writer"]

# Kafka reads unsigned varints of at most 5 bytes (ByteUtils.readUnsignedVarint): 35 bits cover an int32, and
# refusing a sixth byte stops a stream of 0x80s from spinning the decoder.
MAX_VARINT_BYTES = 5


class Writer:
    __slots__ = ("buf", "chunks")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.chunks: list[Chunk] = []

    def uvarint(self, value: int) -> None:
        if value < 0 or value > 0xFFFFFFFF:
            raise EncodeError(f"unsigned varint out of range: {value}")
        buf = self.buf
        while value >= 0x80:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    def opaque(self, value: FileRegion) -> None:
        if self.buf:
            self.chunks.append(bytes(self.buf))
            self.buf = bytearray()
        self.chunks.append(value)

    def finish(self) -> list[Chunk]:
        if self.buf:
            self.chunks.append(bytes(self.buf))
            self.buf = bytearray()
        return self.chunks


class Reader:
    __slots__ = ("mv", "pos", "end")

    def __init__(self, mv: memoryview, pos: int, end: int) -> None:
        self.mv = mv
        self.pos = pos
        self.end = end

    def take(self, n: int) -> int:
        p = self.pos
        e = p + n
        if n < 0 or e > self.end:
            raise DecodeError(f"need {n} bytes at offset {p}, have {self.end - p}")
        self.pos = e
        return p

    def remaining(self) -> int:
        return self.end - self.pos

    def uvarint(self) -> int:
        mv, pos, end = self.mv, self.pos, self.end
        value = 0
        shift = 0
        for _ in range(MAX_VARINT_BYTES):
            if pos >= end:
                raise DecodeError("truncated varint")
            b = mv[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                if value > 0xFFFFFFFF:
                    raise DecodeError("varint larger than 32 bits")
                return value
            shift += 7
        raise DecodeError(f"varint longer than {MAX_VARINT_BYTES} bytes")
