"""LogSegment: one `.log` file of a partition with its `.index` and `.timeindex` (Kafka: LogSegment).

Crash-safety invariants:
* Batches are written with pwrite at the segment's published size, and the size is published only after every
  byte is written: a concurrent reader never sees a partial batch, and a failed write is cut back off the file
  (best effort) so no partial batch stays in the middle of a segment that later rolls.
* Index entries are added after the log bytes they point at (index_file.py).
* `recover` is the only place that cuts a .log on open: at the last whole batch (whose CRC matches, for the
  batches after the recovery point), dropping index entries past the cut.
* `delete` unlinks the indexes before the .log: a crash in between leaves a .log without indexes (which still
  works, indexes being hints), never indexes without their .log.
* The .log's descriptor may be closed by the LRU of open files whenever no call holds it (open_files.py); a
  segment closed while dirty is fsynced through a reopened descriptor, which covers the same page-cache bytes.
* Every use of a file by its path (create, reopen, stat, unlink) holds the Log's PathGuard (path_guard.py), which
  a rename of the partition's directory holds until `rename_dir` updated the paths: no file is created or opened
  under a stale directory name (gone, or after a swap the other copy's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mover.storage import record_batch
from mover.storage.dir_health import is_resource_limit
from mover.storage.errors import CorruptRecordError, WouldBlock
from mover.storage.files import read_cached, read_exactly, write_all
from mover.storage.names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name
from mover.storage.offset_index import OffsetIndex
from mover.storage.open_files import OpenFile, open_transient
from mover.storage.path_guard import PathGuard
from mover.storage.record_batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from mover.storage.time_index import TimeIndex

TXN_INDEX_SUFFIX = ".txnindex"

# Walking batch headers reads this much at a time, so a log of small batches is not one syscall per batch.
_WALK_CHUNK = 64 * 1024
# A read's walk over batch lengths reads this much at a time (a page): one pread covers several small batches.
_OVERHEAD_CHUNK = 4096
# CRC checks during recovery read batches in chunks of at least this size.
_RECOVERY_CHUNK = 1024 * 1024


class FileSlice:
    """Whole batches of one segment: `length` bytes at `position` of `path`, readable through `fd`.

    The slice owns `fd` (a dup of the segment's descriptor, -1 when empty) and closes it when dropped or closed:
    the segment's own descriptor may be closed by the LRU of open files (open_files.py) or by a swap at any time
    after the read returns, and a kernel-reused number would then send another file's bytes. When the process is
    out of descriptors, the slice holds its bytes instead (`data`, fd -1): a Fetch of more partitions than the
    descriptor limit still answers, copying through memory what it cannot sendfile.
    """

    __slots__ = ("path", "position", "length", "fd", "data")

    def __init__(self, path: Path, position: int, length: int, fd: int, data: bytes | None = None) -> None:
        self.path = path
        self.position = position
        self.length = length
        self.fd = fd
        self.data = data

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        return read_exactly(self.fd, self.length, self.position) if self.length else b""

    def detach(self) -> int:
        """Hand the descriptor over to the caller, who closes it."""
        fd, self.fd = self.fd, -1
        return fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class LogSegment:
    def __init__(self, dir: Path, base_offset: int, *, size: int | None = None,
                 guard: PathGuard | None = None) -> None:
        """`guard`: the owning Log's PathGuard (a fresh one for a segment used on its own). `dir` must be current:
        the caller holds the guard or no rename can run (an open)."""
        self.guard = guard if guard is not None else PathGuard()
        self.base_offset = base_offset
        self.log_path = dir / segment_file_name(base_offset, LOG_SUFFIX)
        self.offset_index = OffsetIndex(dir / segment_file_name(base_offset, INDEX_SUFFIX), base_offset, self.guard)
        self.time_index = TimeIndex(dir / segment_file_name(base_offset, TIME_INDEX_SUFFIX), base_offset, self.guard)
        self.size = os.stat(self.log_path).st_size if size is None else size
        # Opened on first use and closed by the broker's LRU when idle: an idle partition holds no descriptor.
        self.file = OpenFile(self.log_path, guard=self.guard)
        self._dirty = False
        # Known for the active segment (walked on open, then kept by appends); -1 = not known.
        self.next_offset = -1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        # The highest producer id among the batches `recover` walked (-1: none): read from headers the walk parses
        # anyway, so the allocator of producer ids learns what this log holds without a second pass.
        self.max_producer_id = -1
        self.bytes_since_last_index_entry = 0
        # Whether the indexes were checked against the .log (stale entries past its end dropped). Done lazily,
        # before the first index change, so that opening a log never reads a (possibly 10 MB) index file.
        self.indexes_checked = False

    @classmethod
    def create(cls, dir: Path, base_offset: int, guard: PathGuard | None = None) -> LogSegment:
        """A new empty segment; the caller fsyncs the directory, and holds `guard` (the Log's) with `dir` read
        under it."""
        path = dir / segment_file_name(base_offset, LOG_SUFFIX)
        fd = open_transient(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise FileExistsError(f"segment {path} already exists and is not empty")
        seg = cls(dir, base_offset, size=0, guard=guard)
        seg.file = OpenFile(path, fd=fd, guard=seg.guard)
        seg.next_offset = base_offset
        seg.indexes_checked = True
        for index in (seg.offset_index, seg.time_index):
            if not index.path.exists():
                # Known empty: appends need not read it (they may run on the event loop, Log.append_fits_active).
                index.assume_empty()
        return seg

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path}, size={self.size})"

    # ------------------------------------------------------------------ files

    @property
    def dir(self) -> Path:
        return self.log_path.parent

    def rename_dir(self, new_dir: Path) -> None:
        # Open fds follow the files through their directory's rename; only the paths change. The renamer holds the
        # PathGuard (no reopen by the old path meanwhile) and pinned the .log open (readers need no reopen).
        self.log_path = new_dir / self.log_path.name
        self.file.path = self.log_path
        self.offset_index.rename(new_dir / self.offset_index.path.name)
        self.time_index.rename(new_dir / self.time_index.path.name)

    def _header_at(self, position: int, nowait: bool = False) -> BatchHeader:
        with self.file as fd:
            data = read_cached(fd, HEADER_SIZE, position) if nowait else read_exactly(fd, HEADER_SIZE, position)
            return record_batch.parse_header(data)

    # ------------------------------------------------------------------ recovery

    def recover(self, recovery_point: int) -> int:
        """Walk the batches of this (last) segment; cut a torn tail; return the segment's next offset.

        Batches holding offsets at or after `recovery_point` are CRC-checked: they may not have reached the
        disk whole before a crash. Earlier ones only have their headers checked.

        A segment not open yet (every one, at start-up) is walked through a descriptor of its own, closed right
        after, not through the LRU of open files: at 100,000 partitions the LRU would close nearly all of them
        again at once, and the opening threads waited for its lock more than they worked. A cut still goes
        through the LRU (`_cut`); both descriptors are of the same inode."""
        if self.file.is_open:
            with self.file as fd:
                return self._recover(fd, recovery_point)
        with self.guard:
            fd = open_transient(self.log_path, os.O_RDONLY)
        try:
            return self._recover(fd, recovery_point)
        finally:
            os.close(fd)

    def _recover(self, fd: int, recovery_point: int) -> int:
        file_size = os.fstat(fd).st_size
        pos = 0
        next_offset = self.base_offset
        max_ts, offset_of_max = -1, -1
        max_pid = -1
        buf = b""
        buf_start = 0
        while pos + HEADER_SIZE <= file_size:
            if pos + HEADER_SIZE > buf_start + len(buf):
                buf_start = pos
                # No further than the end: a read past it costs a second pread that returns nothing.
                buf = read_exactly(fd, min(max(_WALK_CHUNK, HEADER_SIZE), file_size - pos), pos)
            try:
                header = record_batch.parse_header(buf, pos - buf_start)
            except CorruptRecordError:
                break
            if pos + header.size > file_size or header.base_offset < next_offset:
                break
            if header.last_offset >= recovery_point:
                if pos + header.size > buf_start + len(buf):
                    buf_start = pos
                    buf = read_exactly(fd, min(max(_RECOVERY_CHUNK, header.size), file_size - pos), pos)
                try:
                    record_batch.check_crc(buf, header, pos - buf_start)
                except CorruptRecordError:
                    break
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            if header.producer_id > max_pid:
                max_pid = header.producer_id
            next_offset = header.next_offset
            pos += header.size
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max
        self.max_producer_id = max_pid
        if pos < file_size:
            self._cut(pos, next_offset)
        self.size = pos
        return next_offset

    def _cut(self, position: int, next_offset: int) -> None:
        with self.file as fd:
            os.ftruncate(fd, position)
            # The cut must be durable before new batches are written where the torn bytes were.
            os.fsync(fd)
        self.size = position
        self.next_offset = next_offset
        self.indexes_checked = False
        self.check_indexes()

    def check_indexes(self) -> None:
        """Drop index entries past the valid data (written before a crash lost the log bytes they point at),
        and resume the index interval from the last entry. Needs `size` and `next_offset` to be known."""
        if self.indexes_checked:
            return
        last = self.offset_index.last_entry()
        if last is not None and (last[1] >= self.size or last[0] >= self.next_offset - self.base_offset):
            entries = self.offset_index.entries()
            n = len(entries)
            end = self.next_offset - self.base_offset
            while n and (entries[n - 1][1] >= self.size or entries[n - 1][0] >= end):
                n -= 1
            self.offset_index.truncate_to_entries(n)
        last_time = self.time_index.last_entry()
        if last_time is not None and last_time[1] + self.base_offset >= self.next_offset:
            self.time_index.truncate_from_offset(self.next_offset)
        last = self.offset_index.last_entry()
        self.bytes_since_last_index_entry = self.size - last[1] if last is not None else self.size
        self.indexes_checked = True

    # ------------------------------------------------------------------ appends

    def append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader],
               index_interval_bytes: int) -> None:
        """Write whole validated batches at the end; publish the new size only once they are all written."""
        self.check_indexes()
        start = self.size
        with self.file as fd:
            try:
                write_all(fd, data, start)
            except OSError:
                try:
                    # Leave no partial batch behind the published size (a later roll would keep it forever).
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        self._dirty = True
        self.size = start + len(data)
        self.next_offset = headers[-1].next_offset
        position = start
        for header in headers:
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            if self.bytes_since_last_index_entry > index_interval_bytes:
                self.offset_index.append_entry(header.last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            size = header.size
            position += size
            self.bytes_since_last_index_entry += size

    def on_become_inactive(self) -> None:
        """The segment rolled: record its largest timestamp in the time index, as Kafka does."""
        self.check_indexes()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # ------------------------------------------------------------------ reads

    def _find_batch(self, offset: int, size: int, max_offset: int | None = None,
                    nowait: bool = False) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset >= `offset`, in the first `size` bytes, and
        whose base offset is below `max_offset` (when given)."""
        start = 0
        if nowait and not self.offset_index.loaded:
            raise WouldBlock(f"index of {self.log_path} not loaded")
        entry = self.offset_index.lookup(offset)
        if entry is not None and entry[1] < size:
            start = entry[1]
        pos = start
        while pos + HEADER_SIZE <= size:
            header = self._header_at(pos, nowait)
            if header.last_offset >= offset:
                if max_offset is not None and header.base_offset >= max_offset:
                    return None
                return pos, header
            pos += header.size
        return None

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True,
             max_offset: int | None = None, nowait: bool = False) -> FileSlice | None:
        """Whole batches from the one holding `offset` (or the first after it), up to max_bytes; None when no
        batch of this segment holds `offset` or a later one.

        `max_offset` (the log end offset the caller published) excludes batches from there on: an append grows the
        segment before it publishes the new log end offset, so without the bound a reader could hand a client
        records past the end offset it reports, and the client's next fetch would be out of range.
        `nowait`: read nothing that is not in memory or the page cache (WouldBlock instead): a read on the event
        loop. The records themselves are not read here (the server sends them from the file)."""
        size = self.size
        found = self._find_batch(offset, size, max_offset, nowait)
        if found is None:
            return None
        position, first = found
        length = 0
        with self.file as fd:
            if first.size <= max_bytes or min_one:
                length = first.size
                pos = position + first.size
                # Batch lengths are read a page at a time: a walk over small batches is not a pread per batch.
                chunk, chunk_pos = b"", pos
                while pos + LOG_OVERHEAD <= size:
                    if pos + LOG_OVERHEAD > chunk_pos + len(chunk):
                        chunk_pos = pos
                        want = min(_OVERHEAD_CHUNK, size - pos)
                        chunk = read_cached(fd, want, pos) if nowait else read_exactly(fd, want, pos)
                        if len(chunk) < LOG_OVERHEAD:
                            break
                    base, batch_size = record_batch.parse_overhead(chunk, pos - chunk_pos)
                    if length + batch_size > max_bytes or pos + batch_size > size:
                        break
                    if max_offset is not None and base >= max_offset:
                        break
                    length += batch_size
                    pos += batch_size
            if not length:
                return FileSlice(self.log_path, position, 0, -1)
            try:
                return FileSlice(self.log_path, position, length, self.file.dup())
            except OSError as e:
                if not is_resource_limit(e):
                    raise
                return FileSlice(self.log_path, position, length, -1, read_exactly(fd, length, position))

    def batches(self, position: int = 0) -> list[tuple[int, BatchHeader]]:
        """(position, header) of every batch from `position`; a debugging and test aid."""
        out = []
        size = self.size
        while position + HEADER_SIZE <= size:
            header = self._header_at(position)
            out.append((position, header))
            position += header.size
        return out

    def largest_timestamp(self) -> int:
        """For retention: the largest record timestamp, else the .log's modification time (as Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        ts = self.time_index.largest_timestamp()
        if ts is not None and ts >= 0:
            return ts
        with self.guard:
            return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, offset >= start_offset."""
        size = self.size
        position = 0
        entry = self.time_index.lookup(timestamp)
        if entry is not None:
            found = self.offset_index.lookup(max(entry[1], start_offset))
            if found is not None and found[1] < size:
                position = found[1]
        while position + HEADER_SIZE <= size:
            header = self._header_at(position)
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                if header.compression != 0:
                    # Record timestamps are inside the compressed payload; answer at batch granularity.
                    return max(header.base_offset, start_offset), header.max_timestamp
                with self.file as fd:
                    data = read_exactly(fd, header.size, position)
                for offset, ts in _record_timestamps(data, header):
                    if ts >= timestamp and offset >= start_offset:
                        return offset, ts
            position += header.size
        return None

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        if self._dirty:
            # Appended batches are durable only after this; the recovery point moves up after it returns. If the
            # LRU closed the descriptor since, the reopened one's fsync covers the same inode's dirty pages.
            with self.file as fd:
                os.fsync(fd)
            self._dirty = False
        self.offset_index.flush()
        self.time_index.flush()

    def forget_indexes(self) -> None:
        self.offset_index.forget()
        self.time_index.forget()

    def hold_open(self) -> None:
        """Pin the .log open until `close` (a retired segment: readers of a snapshot may still read it after the
        unlink, and an unlinked file cannot be reopened)."""
        try:
            self.file.__enter__()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.file.close()
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Close and unlink the segment's files."""
        self.close()
        self.delete_files()

    def delete_files(self) -> None:
        """Unlink the segment's files, indexes first and the .log last (see the module docstring). The .log's
        fd stays open if it was pinned (`hold_open`): a reader may still be using it."""
        self.offset_index.delete()
        self.time_index.delete()
        with self.guard:
            for path in (self.log_path.with_suffix(TXN_INDEX_SUFFIX), self.log_path):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields) at `pos`: (value, next position)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CorruptRecordError("truncated or overlong varint in a record")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def _record_timestamps(data: bytes, header: BatchHeader) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of an uncompressed batch."""
    if header.is_log_append_time:
        return [(header.base_offset + i, header.max_timestamp) for i in range(header.record_count)]
    out = []
    pos = HEADER_SIZE
    for _ in range(header.record_count):
        length, pos = _read_varint(data, pos)
        body = pos + 1  # attributes i8
        ts_delta, p = _read_varint(data, body)
        offset_delta, _ = _read_varint(data, p)
        out.append((header.base_offset + offset_delta, header.base_timestamp + ts_delta))
        pos += length
    return out
