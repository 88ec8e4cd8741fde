"""OffsetIndex: a segment's sparse map from offset to file position (Kafka: OffsetIndex).

Entries are 8 bytes, big-endian: the offset relative to the segment's base offset (i32) and the byte
position of a batch in the .log (i32). As in Kafka, an entry holds the *last* offset of the batch that starts
at the position, so the largest entry <= a target offset gives a position at or before the batch holding it.

Crash-safety invariants: those of IndexFile (index_file.py): an index is a hint, written after the log bytes
it points at, never rewritten unless appended to or cut back with its log.
"""

from __future__ import annotations

import struct
from array import array

from mover.storage.index_file import IndexFile

_ENTRY = struct.Struct(">ii")


class OffsetIndex(IndexFile):
    entry_size = _ENTRY.size

    def _decode(self, data: bytes) -> tuple[list[int], list[int]]:
        flat = array("i", data)
        if flat.itemsize != 4:
            raise RuntimeError("array('i') is not 32 bits on this platform")
        if struct.pack("=i", 1) != struct.pack(">i", 1):
            flat.byteswap()
        return flat[0::2].tolist(), flat[1::2].tolist()

    def _encode(self, key: int, value: int) -> bytes:
        return _ENTRY.pack(key, value)

    def _value_ok(self, previous: int, value: int) -> bool:
        return value > previous  # positions grow strictly, like the offsets

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """(absolute offset, position) of the largest entry whose offset <= `offset`; None if none."""
        entry = self.floor(offset - self.base_offset)
        if entry is None:
            return None
        return entry[0] + self.base_offset, entry[1]

    def append_entry(self, offset: int, position: int) -> None:
        self.append(offset - self.base_offset, position)

    def truncate_from_position(self, position: int) -> None:
        """Drop the entries pointing at or past `position` (the log was cut there)."""
        entries = self.entries()
        n = len(entries)
        while n and entries[n - 1][1] >= position:
            n -= 1
        self.truncate_to_entries(n)
