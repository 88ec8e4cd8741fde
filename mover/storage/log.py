"""Log: one copy of one partition, a directory of segments (Kafka: UnifiedLog / LocalLog).

Crash-safety invariants:
* Only the last segment can hold a torn tail: a segment is fsynced (with its indexes) when it rolls, before
  the next segment's file is created. So `open` walks only the last segment, and earlier segments are taken
  at the size the file system reports, never scanned: opening 10,000 partitions costs a stat per segment.
* On open, the last segment is cut at its last whole batch; batches at or after the recovery point must also
  pass their CRC check. The recovery point only moves up after an fsync (flush, roll).
* Batches are written before the segment's size, then the log end offset, are published; readers (no lock)
  read the log end offset first, so every byte it covers is already in the file.
* Retention unlinks the oldest segments (indexes first, then the .log). A crash half-way leaves segments the
  log start offset checkpoint may still cover; `open` takes max(checkpoint, first segment's base offset).
* Segment files are opened on demand and may be closed by the broker's LRU of open files (open_files.py): an
  idle partition holds no descriptor.
* The directory is renamed only by `rename_to`, which holds the Log's PathGuard (path_guard.py) from the rename to
  the last path updated in memory, with the .log files pinned open. Every operation that reaches a file of this
  Log by path (a roll's new segment and its dir fsync, a reopen, an index load, a stat, an unlink, a producer
  snapshot) holds the guard while it reads the path and uses it; appends to open descriptors do not. So a rename
  can run outside the replica lock while appends go on (a swap, mover/moves/future_log_swap.py), and nothing is ever
  created or opened under a stale name: after a swap's promotion the source's old name is the copy's.
* Files this class does not know (partition.metadata, leader-epoch-checkpoint, *.snapshot, Kafka's
  .txnindex, .deleted, ...) are never modified or removed, except a .txnindex of a segment retention deletes.
* `files_version` changes (`note_files_changed`) after every file of the directory is created, replaced or
  removed by path (a roll's new segment, retention, a producer snapshot written or deleted), only under the replica
  lock, and only *after* the change is visible in the directory. A reader that took the version before listing the
  directory and finds it unchanged under the replica lock therefore knows that the listing missed nothing: the move's
  copy of the small files (mover/moves/future_log_copy.py) relies on it, since a roll and its producer snapshot are two
  steps an unlocked listing can fall between.
* Every change of `_size` is followed by a tick of the Log's `size_watch` (when the broker gave it one): a reader
  that read the watch's tick before the sizes and finds it unchanged knows no size it read has changed since
  (`SizeWatch`; LogManager's DescribeLogDirs keeps its rows between calls on that).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mover.storage.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from mover.storage.files import fsync_dir, open_dir
from mover.storage.log_segment import FileSlice, LogSegment
from mover.storage.names import LOG_SUFFIX, TopicPartition, parse_segment_file_name
from mover.storage.open_files import Pinned
from mover.storage.path_guard import PathGuard
from mover.storage.record_batch import BatchHeader, set_base_offset, validate_batches

# Builds a NamedTuple from its values without _replace's per-call field walk (one per appended batch).
_new_tuple = tuple.__new__

# The directory rename of `Log.rename_to`; a module name so that a test can run something inside the window
# between the rename on disk and the paths updated in memory.
_rename = os.rename

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1

# One sequence for every watch: `next` is atomic under the GIL, and a value is handed out once, so a watch never
# reads a value a reader saw before a later change (two ticks stored out of order only cost the reader a rebuild).
_SIZE_TICKS = itertools.count(1)


class SizeWatch:
    """Ticks after every size change of the Logs it watches (their owner groups them: a dir's topic)."""

    __slots__ = ("tick",)

    def __init__(self) -> None:
        self.tick = next(_SIZE_TICKS)

# Retired segments stay open this long so a fetch holding their fd finishes (Kafka: file.delete.delay.ms).
RETIRED_FD_SECONDS = 60.0

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    retention_bytes: int = -1
    retention_ms: int = 604800000
    index_interval_bytes: int = 4096
    # Kafka's max.message.bytes: the largest batch an append accepts; None = only the segment size limits it.
    max_message_bytes: int | None = None


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1: CreateTime, the timestamps are the producer's


class SegmentFiles(NamedTuple):
    base_offset: int
    log_path: Path
    size: int


class Log:
    def __init__(self, dir: Path, tp: TopicPartition, config: LogConfig, segments: list[LogSegment],
                 log_end_offset: int, log_start_offset: int, recovery_point: int,
                 guard: PathGuard | None = None) -> None:
        # The segments' own guard (they were made with it), so that one guard covers every file of this Log.
        self.path_guard = guard if guard is not None else (segments[0].guard if segments else PathGuard())
        self.dir = dir
        self.tp = tp
        self.config = config
        self._segments = segments  # replaced, never mutated in place: readers iterate a snapshot
        self.log_end_offset = log_end_offset
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self._size = sum(s.size for s in segments)
        self.size_watch: SizeWatch | None = None
        # Producer ids this log held when it was opened, as far as the open walked (its last segment): the highest
        # one, and the offset from which the walk saw every batch. mover/storage/producer_state.py's
        # `highest_producer_id` adds the snapshots and the batches below that offset.
        last = segments[-1] if segments else None
        self.max_producer_id = last.max_producer_id if last is not None else -1
        self.producer_ids_from = last.base_offset if last is not None else log_start_offset
        self._retired: list[tuple[float, LogSegment]] = []
        self._closed = False
        # See the module's invariants: bumped under the replica lock after each change to the dir's files by path.
        self.files_version = 0

    def __repr__(self) -> str:
        return f"Log({self.dir}, leo={self.log_end_offset}, size={self._size})"

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, dir: Path, tp: TopicPartition, config: LogConfig, *, recovery_point: int = 0,
             log_start_offset: int = 0, sync: bool = True) -> Log:
        """`sync=False`: the caller makes a new partition's names durable itself before anyone relies on them (a
        bulk create fsyncs the new dirs on a few threads, LogManager._make_durable)."""
        created = False
        try:
            # Listed without a stat first: at start-up every dir exists, and the stat was a tenth of opening a log.
            it = os.scandir(dir)
        except FileNotFoundError:
            dir.mkdir(parents=True, exist_ok=True)
            created = True
            it = os.scandir(dir)
        bases: list[tuple[int, int]] = []
        with it:
            for entry in it:
                parsed = parse_segment_file_name(entry.name)
                if parsed is not None and parsed[1] == LOG_SUFFIX:
                    bases.append((parsed[0], entry.stat().st_size))
        bases.sort()
        guard = PathGuard()
        segments = [LogSegment(dir, base, size=size, guard=guard) for base, size in bases]
        if not segments:
            segments = [LogSegment.create(dir, log_start_offset, guard)]
            if sync:
                # The first segment's name must survive a crash before anything is appended to it.
                fsync_dir(dir)
        if created and sync:
            # The partition directory itself must be durable before checkpoints can name it.
            fsync_dir(dir.parent)
        try:
            leo = segments[-1].recover(recovery_point)
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        lso = min(max(log_start_offset, segments[0].base_offset), leo)
        return cls(dir, tp, config, segments, leo, lso, min(recovery_point, leo), guard)

    # ------------------------------------------------------------------ properties

    @property
    def size(self) -> int:
        return self._size

    def _sized(self) -> None:
        if (watch := self.size_watch) is not None:
            watch.tick = next(_SIZE_TICKS)

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset  # a single replica: everything appended is committed

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    def segment_files(self) -> list[SegmentFiles]:
        """A snapshot of the .log files and their published sizes (whole batches only), for a byte copy."""
        return [SegmentFiles(s.base_offset, s.log_path, s.size) for s in self._segments]

    # ------------------------------------------------------------------ append

    def append(self, buf: bytes | bytearray | memoryview, *, assign_offsets: bool = True,
               headers: list[BatchHeader] | None = None) -> AppendInfo:
        """Append whole v2 batches. The caller holds the replica lock. A writable buffer (bytearray) has its
        base offsets rewritten in place; an immutable one is copied once.

        `headers`: what `record_batch.validate_batches(buf)` returned, when the caller already ran it (the Replica's
        append path does, so each batch is parsed and CRC-checked once); otherwise validated here."""
        if headers is None:
            headers = validate_batches(buf)
        if not headers:
            raise CorruptRecordError("no record batch to append")
        limit = self.config.segment_bytes
        if len(buf) > limit:
            raise RecordTooLargeError(f"{len(buf)} bytes of batches exceed the segment size {limit}")
        max_message = self.config.max_message_bytes
        if max_message is not None:
            for h in headers:
                if h.size > max_message:
                    raise RecordTooLargeError(
                        f"a batch of {h.size} bytes exceeds max.message.bytes {max_message}")
        data: bytearray | memoryview | bytes = buf
        if assign_offsets:
            if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
                data = bytearray(buf)
            headers = self._assign_offsets(data, headers)  # type: ignore[arg-type]
        else:
            expected = self.log_end_offset
            for h in headers:
                if h.base_offset < expected:
                    raise CorruptRecordError(
                        f"batch base offset {h.base_offset} is below the next offset {expected} of {self.tp}")
                expected = h.next_offset
        first, last = headers[0].base_offset, headers[-1].last_offset
        active = self._segments[-1]
        if active.size > 0 and (active.size + len(data) > limit or last - active.base_offset > INT32_MAX):
            active = self._roll(first)
        active.append(data, headers, self.config.index_interval_bytes)
        self._size += len(data)
        if (watch := self.size_watch) is not None:
            watch.tick = next(_SIZE_TICKS)
        # Published last: a reader trusting the log end offset finds every byte of it in the file.
        self.log_end_offset = last + 1
        # One batch is the common Produce: its max without a generator; AppendInfo built as BatchHeader is above.
        max_ts = headers[0].max_timestamp if len(headers) == 1 else max(h.max_timestamp for h in headers)
        return _new_tuple(AppendInfo, (first, last, max_ts, -1))

    def append_fits_active(self, nbytes: int) -> bool:
        """Whether an append of `nbytes` goes into the active segment as it is: no roll (whose fsyncs wait for the
        disk) and the segment's indexes already checked and loaded (else the append may read its index files, as the
        first one after a swap does).
        Then `append` is one pwrite to the page cache and perhaps an index entry: the Replica's quick path, which
        runs on the event loop, asks this under the lock."""
        active = self._segments[-1]
        return (active.indexes_checked and active.offset_index.loaded and active.time_index.loaded
                and active.size + nbytes <= self.config.segment_bytes
                and self.log_end_offset + nbytes - active.base_offset <= INT32_MAX)

    def _assign_offsets(self, data: bytearray | memoryview, headers: list[BatchHeader]) -> list[BatchHeader]:
        offset = self.log_end_offset
        pos = 0
        out = []
        for h in headers:
            set_base_offset(data, pos, offset)
            h = _new_tuple(BatchHeader, (offset, *h[1:]))  # h._replace(base_offset=offset), without its checks
            out.append(h)
            offset = h.next_offset
            pos += h.size
        return out

    def _roll(self, base_offset: int) -> LogSegment:
        old = self._segments[-1]
        old.on_become_inactive()
        # A rolled segment is never scanned on open again: it must be whole on disk before the next exists.
        old.flush()
        # The new file by path: under the guard, so that a rename of the directory in progress (a swap's, outside
        # the replica lock) finishes first and this reads the dir's current name.
        # The segment joins the list under the guard too: a rename that follows updates its paths with the others'.
        with self.path_guard:
            new = LogSegment.create(self.dir, base_offset, self.path_guard)
            dir_fd = open_dir(self.dir)
            self._segments = [*self._segments, new]
        # The new segment's name must be durable before batches in it can be acknowledged. Through a descriptor
        # opened under the guard, which follows the dir through a rename: the guard is not held across the fsync.
        # (A failure here leaves the segment in the list, empty, as a failed write after a roll would.)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.recovery_point = max(self.recovery_point, base_offset)
        self.note_files_changed()
        return new

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True, nowait: bool = False) -> FileSlice:
        """Whole batches from the batch holding `offset`, at most max_bytes (at least one if min_one). `nowait`:
        WouldBlock rather than wait for the disk (LogSegment.read)."""
        leo = self.log_end_offset  # read before the segments: everything below it is already written
        segments = self._segments
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.tp} is outside [{self.log_start_offset}, {leo}]")
        if offset < leo:
            i = max(bisect.bisect_right([s.base_offset for s in segments], offset) - 1, 0)
            for seg in segments[i:]:
                found = seg.read(offset, max_bytes, min_one=min_one, max_offset=leo, nowait=nowait)
                if found is not None:
                    return found
        active = segments[-1]
        return FileSlice(active.log_path, active.size, 0, -1)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp`; None if there is none.
        -1 (latest) and -2 (earliest) answer (log end offset, -1) and (log start offset, -1), as in
        ListOffsets."""
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        start = self.log_start_offset
        for seg in self._segments:
            if seg.size == 0 or seg.largest_timestamp() < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------------ durability and retention

    def flush(self) -> None:
        leo = self.log_end_offset  # captured first: the fsync covers at least these bytes
        self._segments[-1].flush()
        self.recovery_point = max(self.recovery_point, leo)

    def delete_retained_segments(self, now_ms: int | None = None) -> int:
        """Delete the oldest segments beyond retention.bytes / retention.ms (never the active one); returns
        how many were deleted. The caller holds the replica lock and skips this while a move runs."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        self._close_retired()
        segments = self._segments
        closed = segments[:-1]
        by_bytes = 0
        if self.config.retention_bytes >= 0:
            excess = self._size - self.config.retention_bytes
            for seg in closed:
                if excess - seg.size < 0:
                    break
                excess -= seg.size
                by_bytes += 1
        by_time = 0
        if self.config.retention_ms >= 0:
            for seg in closed:
                if now_ms - seg.largest_timestamp() <= self.config.retention_ms:
                    break
                by_time += 1
        n = max(by_bytes, by_time)
        if n == 0:
            return 0
        doomed = segments[:n]
        self._segments = segments[n:]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self._size -= sum(s.size for s in doomed)
        self._sized()
        deadline = time.monotonic() + RETIRED_FD_SECONDS
        for seg in doomed:
            # Unlink now, close later: a fetch may still be sending from the fd. No directory fsync: a deleted
            # segment that comes back after a crash is below the checkpointed log start offset, or is retained
            # again on the next check.
            seg.hold_open()
            seg.delete_files()
            self._retired.append((deadline, seg))
        self.note_files_changed()
        log.info("%s: retention deleted %d segments, log start offset now %d", self.tp, n,
                 self.log_start_offset)
        return n

    def _close_retired(self, force: bool = False) -> None:
        now = time.monotonic()
        keep = []
        for deadline, seg in self._retired:
            if force or deadline <= now:
                seg.close()
            else:
                keep.append((deadline, seg))
        self._retired = keep

    # ------------------------------------------------------------------ moves

    def note_files_changed(self) -> None:
        """A file of this Log's directory was created, replaced or removed by path (by this class or by the producer
        state): called under the replica lock, after the change. See the module's invariants."""
        self.files_version += 1

    def pin_files(self, *, appends: bool = True) -> Pinned:
        """Hold every segment's .log open across a rename of this Log's directory, so that lock-free readers need no
        reopen (which would wait for the PathGuard) meanwhile; with `appends`, the active segment's two index files
        too (created empty if absent, as Kafka always has them), so that appends need none either (they would wait
        holding the replica lock). Taking it may open files: before the guard."""
        segments = self._segments
        if not appends:
            return Pinned(s.file for s in segments)
        active = segments[-1]
        return Pinned([*(s.file for s in segments), active.offset_index.file, active.time_index.file], create=True)

    def rename_to(self, new_dir: Path, *, appends: bool = True) -> None:
        """Rename this Log's directory to `new_dir` (same file system) while appends may go on: open descriptors
        follow the files; the PathGuard, held from the rename to the last path updated, keeps every path-based
        operation from using the old name. No fsync here: the caller says why its rename must be durable, and when.
        First, outside the guard (each may open a file, which takes it): the files are pinned and, if `appends` may
        go on during the rename (a swap; not a topic delete), the active segment's index entries are loaded, so that
        an append reads or opens nothing by path then (only a roll waits for the rename, holding the replica
        lock)."""
        if appends:
            active = self._segments[-1]
            active.offset_index.load()
            active.time_index.load()
        with self.pin_files(appends=appends), self.path_guard:
            _rename(self.dir, new_dir)
            self.rename_dir(new_dir)

    def rename_dir(self, new_dir: Path) -> None:
        """The directory was renamed on disk; open fds stay valid (Linux), only the paths change. The caller holds
        the PathGuard across the rename and this (`rename_to`)."""
        with self.path_guard:
            self.dir = new_dir
            for seg in self._segments:
                seg.rename_dir(new_dir)

    def reload_after_copy(self, source: Log, sizes: dict[int, int] | None = None,
                          active_indexes_copied: bool = False) -> None:
        """This Log's dir now holds a byte-identical copy of `source`'s files: take its state. Runs under the
        replica lock during a swap, so it reads no log or index data, and no stat either where the copier says
        how many bytes it wrote (`sizes`, by base offset): each syscall there may wait for the GIL and the disk.
        `active_indexes_copied`: the active segment's index files hold exactly the source's loaded entries, which
        the copy then keeps in memory instead of reading them back at its first append."""
        mine = {s.base_offset: s for s in self._segments}
        segments: list[LogSegment] = []
        active = source._segments[-1]
        for src in source._segments:
            seg = mine.pop(src.base_offset, None)
            known = None if sizes is None else sizes.get(src.base_offset)
            if seg is None:
                seg = LogSegment(self.dir, src.base_offset, size=known, guard=self.path_guard)
            elif known is None:
                with self.path_guard:
                    seg.size = os.stat(seg.log_path).st_size
            else:
                seg.size = known
            if seg.size != src.size:
                log.error("%s: copy of %s has %d bytes, source %d", self.tp, seg.log_path, seg.size, src.size)
            if src is active and active_indexes_copied:
                seg.offset_index.adopt_entries(src.offset_index)
                seg.time_index.adopt_entries(src.time_index)
            else:
                # The copy replaced the index files' content; reload them lazily, on first use.
                seg.forget_indexes()
            seg.next_offset = src.next_offset
            seg.max_timestamp, seg.offset_of_max_timestamp = src.max_timestamp, src.offset_of_max_timestamp
            seg.bytes_since_last_index_entry = src.bytes_since_last_index_entry
            seg.indexes_checked = src.indexes_checked
            segments.append(seg)
        for extra in mine.values():
            # A segment the source does not have (an empty one made when the copy was opened early).
            extra.close()
            extra.delete_files()
        self._segments = segments
        self._size = sum(s.size for s in segments)
        self._sized()
        self.log_start_offset = source.log_start_offset
        self.recovery_point = source.recovery_point
        self.log_end_offset = source.log_end_offset
        # The same batches: what either open walk saw holds for both (batches appended since are in the Replica's
        # producer state, which follows the swap).
        self.max_producer_id = max(self.max_producer_id, source.max_producer_id)
        self.producer_ids_from = min(self.producer_ids_from, source.producer_ids_from)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close()
        self._close_retired(force=True)
