"""TimeIndex: a segment's sparse map from timestamp to offset (Kafka: TimeIndex).

Entries are 12 bytes, big-endian: a timestamp (i64) and the offset relative to the segment's base offset
(i32) of the record holding the largest timestamp seen so far. Timestamps strictly increase, offsets never
decrease. Kafka adds a last entry when a segment rolls, so a closed segment's last entry holds its largest
timestamp.

Crash-safety invariants: those of IndexFile (index_file.py): an index is a hint, written after the log bytes
it points at, never rewritten unless appended to or cut back with its log.
"""

from __future__ import annotations

import struct

from mover.storage.index_file import IndexFile

_ENTRY = struct.Struct(">qi")


class TimeIndex(IndexFile):
    entry_size = _ENTRY.size

    def _decode(self, data: bytes) -> tuple[list[int], list[int]]:
        keys: list[int] = []
        values: list[int] = []
        for ts, rel in _ENTRY.iter_unpack(data):
            keys.append(ts)
            values.append(rel)
        return keys, values

    def _encode(self, key: int, value: int) -> bytes:
        return _ENTRY.pack(key, value)

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the largest entry whose timestamp <= `timestamp`; None if none."""
        entry = self.floor(timestamp)
        if entry is None:
            return None
        return entry[0], entry[1] + self.base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's, as Kafka does."""
        if timestamp < 0:
            return
        self.append(timestamp, offset - self.base_offset)

    def largest_timestamp(self) -> int | None:
        entry = self.read_last_entry_from_disk()
        return entry[0] if entry is not None else None

    def truncate_from_offset(self, offset: int) -> None:
        """Drop the entries at or past `offset` (the log was cut there)."""
        rel = offset - self.base_offset
        entries = self.entries()
        n = len(entries)
        while n and entries[n - 1][1] >= rel:
            n -= 1
        self.truncate_to_entries(n)
