"""Where a byte copy of a segment ends in offsets: the last whole batch in the bytes copied so far.

A move copies a segment's `.log` in byte chunks (future_log_copy.py), and DescribeLogDirs reports the copy's offset lag
(the source's log end offset minus the copy's), so after each chunk the move needs the offset after the last whole
batch it has copied. Kafka's segments are 1 GiB: counting only whole segments, a partition below that showed no
progress until its copy ended. This finds it without reading the records: the segment's offset index (one entry per
~log.index.interval.bytes: a position where a batch starts, with the last offset of the append that wrote it) gives
a batch start near the position by a binary search of the file, 8 bytes read per probe; from there the batch headers
are walked, 61 bytes read each, up to the position. With the default 4 KiB interval that is a few dozen small reads
per chunk, whatever the chunk's size. Without a usable index the walk reads every header once over the segment's
copy (as `Log.open` walks a last segment), never the records.

Crash-safety invariants: none of its own; it only reads. What it finds never overstates the copy: every offset
below `offset` is in a whole batch below `position`. The index is a hint (it may be missing, short or stale): an
entry is used only if the header at its position agrees with it, and a header that does not parse stops the walk
short (the copy then reports more lag than it has, never less).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from mover.storage.errors import CorruptRecordError
from mover.storage.record_batch import HEADER_SIZE, parse_header

_INDEX_ENTRY = struct.Struct(">ii")  # an offset index entry: offset relative to the segment's base, position

# Below this many bytes past the last batch end found, walk the headers without looking at the index.
INDEX_JUMP_BYTES = 64 * 1024


class BatchEnd:
    """The end of the last whole batch found so far in one segment's copied bytes: `position`, and `offset`, the
    offset after that batch (the segment's base offset before any)."""

    __slots__ = ("base_offset", "offset", "position")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.position = 0
        self.offset = base_offset

    def __repr__(self) -> str:
        return f"BatchEnd(position={self.position}, offset={self.offset})"

    def advance(self, log_fd: int, index_path: Path, limit: int) -> None:
        """Move to the last whole batch that ends at or below byte `limit` of the segment (`log_fd`: its `.log`).
        The bytes below `limit` must be whole batches as far as they go (a published size, or a prefix of one)."""
        if limit - self.position < HEADER_SIZE:
            return
        if limit - self.position > INDEX_JUMP_BYTES:
            self._jump(log_fd, index_path, limit)
        self._walk(log_fd, limit)

    def _jump(self, log_fd: int, index_path: Path, limit: int) -> None:
        try:
            entry = _index_floor(index_path, limit - HEADER_SIZE)
        except OSError:
            return  # no index, or none readable now (out of descriptors, say): walk from where the last call ended
        if entry is None:
            return
        relative, position = entry
        if position <= self.position:
            return
        try:
            header = parse_header(os.pread(log_fd, HEADER_SIZE, position))
        except CorruptRecordError:
            return
        # Kafka's entry holds the last offset of the append that starts at its position (a follower's append is many
        # batches), so the batch there ends at or before it. Anything else is a stale entry: no batch starts there.
        if not self.offset <= header.base_offset <= header.last_offset <= self.base_offset + relative:
            return
        self.position, self.offset = position, header.base_offset

    def _walk(self, log_fd: int, limit: int) -> None:
        position, offset = self.position, self.offset
        while limit - position >= HEADER_SIZE:
            try:
                header = parse_header(os.pread(log_fd, HEADER_SIZE, position))
            except CorruptRecordError:
                break
            end = position + header.size
            if end > limit:
                break
            position, offset = end, header.next_offset
        self.position, self.offset = position, offset


def _index_floor(path: Path, position: int) -> tuple[int, int] | None:
    """(relative offset, position) of the index entry with the largest position <= `position`, None if none. The
    entries end at the file's end or at the first all-zero entry (Kafka preallocates the file with zeros)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = _INDEX_ENTRY.size
        lo, hi = 0, os.fstat(fd).st_size // size
        found = None
        while lo < hi:
            mid = (lo + hi) // 2
            data = os.pread(fd, size, mid * size)
            if len(data) < size:
                hi = mid
                continue
            relative, at = _INDEX_ENTRY.unpack(data)
            if (relative == 0 and at == 0) or at > position:
                hi = mid
            else:
                found = (relative, at)
                lo = mid + 1
        return found
    finally:
        os.close(fd)
