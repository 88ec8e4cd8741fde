"""What an encoding hands the transport: bytes, and FileRegions it sends from their files with sendfile.

Kept apart from the codec because everything after it (the server's writes, the client, tests) deals in chunks
without needing to know how they were made: the frame's size has to count a FileRegion's length, and anything
that wants plain bytes has to read the region.
"""

from __future__ import annotations

from mover.wire.file_region import FileRegion

__all__ = ["Chunk", "frame_length", "join_chunks", "records_length"]

# A chunk of encoded output: bytes, or a FileRegion (record data the transport sends from its file with sendfile).
Chunk = bytes | FileRegion


def records_length(value: bytes | bytearray | memoryview | FileRegion) -> int:
    """Size in bytes of a chunk or a `records` value."""
    return value.length if isinstance(value, FileRegion) else len(value)


def frame_length(chunks: list[Chunk]) -> int:
    return sum(records_length(c) for c in chunks)


def join_chunks(chunks: list[Chunk]) -> bytes:
    """All chunks as one bytes object; FileRegions are read (tests, small clients)."""
    out = bytearray()
    for c in chunks:
        out += c.read() if isinstance(c, FileRegion) else c
    return bytes(out)
