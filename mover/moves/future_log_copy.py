"""FutureLogCopy: the copy of a replica's current Log into its future dir (`topic-partition.move`) until it is
caught up (KIP-113 step 4), which Kafka's ReplicaAlterLogDirsThread does for a future replica by fetching; here by
copying the files, byte for byte, in rounds, the last one under the replica lock for the swap.

It holds the copy's progress (bytes, the copy's log end offset, how far the copy is durable) and every write to
the `.move`: segments in throttled, paced chunks, the small files, the active indexes' new entries, the copy's
fsyncs. It never renames: the swap (mover/moves/future_log_swap.py) does, and the ReplicaMove
(mover/moves/replica_move.py) runs both. It calls neither: cancels and stops reach it as the move's two events.

Crash-safety invariants of the copy (the swap's, which rest on these, are at the top of future_log_swap.py):

* Until the first rename, the source `topic-partition` is the only live copy and is never modified by the move;
  `topic-partition.move` is a prefix copy that recovery resumes (rule 1) or that a cancel deletes.
* The `.move` holds every byte of the source, and on disk at least every byte the source has on disk (below its
  recovery point), fsynced with its directory (`fsync`), *before* the source is renamed to `-delete`, and again
  (under the lock, if a roll flushed the source meanwhile) before the copy takes the appends. Bytes above the
  recovery point are durable nowhere until the next flush, in the source as in the copy (Kafka's flush policy); the
  copy's tail is fsynced right after the promotion, outside the lock, which therefore holds no fsync in the common
  case.
* The promoted copy holds every file of the source's dir as it was at the switch, not only its `.log` bytes: a
  producer snapshot, say, is copied, and one the source deleted meanwhile (pruned, or past its log end offset) is
  deleted from the copy. The small files are copied outside the lock, then again under it only if a file changed
  since: `Log.files_version` (mover/storage/log.py) is read *before* the unlocked listing and compared under the
  lock. Every change of the source's files by path (a roll, a producer snapshot written or deleted) holds the replica
  lock and bumps the version after the change is visible, so an unchanged version under the lock means the listing
  missed nothing. A roll alone would not tell: its snapshot is written after its append, and an unlocked listing can
  fall between the two (it saw the new active segment, not the snapshot). Whatever name the source has meanwhile
  (the `-delete` after the retirement rename, where a snapshot waiting in the PathGuard lands), the listing reads the
  source's current name: only the move's thread renames it. Half-written `*.tmp` files (an atomic write in progress)
  are never copied; the finished file bumps the version.
* The copy's log end offset (`copied_leo`: DescribeLogDirs' offset lag, and how far an fsync of the copy counts as
  durable against the source's recovery point) never exceeds what the copy holds: after each chunk, the offset after
  the last whole batch copied (mover/moves/batch_end.py, from the source's index and batch headers); under the lock,
  the source's log end offset, which no append moves then. Reading the source's log end offset after an unlocked
  copy could count appends made since the segment was listed as copied, and durable, and spare a needed fsync.
* Retention is paused while the move is attached to its Replica, so the source only grows by appends; the copy is a
  byte-exact prefix of it at every moment, and `.log` bytes after the swap equal those of a never-moved copy.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mover.faults import crash_point
from mover.moves import priority
from mover.moves.batch_end import BatchEnd
from mover.storage.files import fsync_dir, start_writeback, write_all
from mover.storage.log import Log
from mover.storage.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    PARTITION_METADATA_FILE,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from throttle.token_bucket import TokenBucket

# A round that has less than this to copy is a catch-up round (the appends that arrived during the round before):
# it runs at the daemon's priority and is never paused. Paced at nice 19 on busy CPUs, a round chasing a steady
# producer could take longer than the producer needs to append the next CAUGHT_UP_BYTES (replica_move.py), round
# after round, and the move did not end (bench/produce_during_move.py: one move in ~1,000 ran past 60 s, and more
# with retired copies holding page cache). At full speed this much copies from page cache in a few milliseconds.
CATCH_UP_ROUND_BYTES = 16 * 1024 * 1024

# An unthrottled copy moves this much per step: one copy_file_range (the kernel loops inside it, the GIL released).
# Between steps the move thread takes the GIL for its bookkeeping, and each hand-off of the GIL to or from a thread
# the scheduler disfavours can keep the event loop waiting (py-spy of moverd during moves, with 8 MiB steps: the loop
# waited for the GIL in 15% of its samples, 1.6% without moves, the copy thread being between two steps or inside a
# step's GIL hand-off). Fewer steps, fewer such windows.
# An unthrottled copy starts no writeback of its own (as `cp` and Kafka's own move do not): the kernel's flusher
# and dirty limits bound the backlog, and the fsync after the bulk, outside the lock, writes the rest. A per-step
# sync_file_range made such a copy wait for the device queue step by step, 0.80-0.93x of `cp` on a slow disk
# (docs/data-path.md, "Move speed"). A throttled copy, slower than the disk, kicks the writeback of each chunk: the
# queue has room, so it costs the copy nothing, and its final fsync does not write minutes of copy at once (without
# the kick a 200 MiB move at 12.5 MiB/s ended 0.3 s late: bench/throttle_accuracy.py 0.978 of the rate, 0.999 with).
UNTHROTTLED_STEP = 64 * 1024 * 1024

# Compare this much of a resumed `.move` segment's tail with the source before trusting the prefix: a crash can
# leave a torn batch in the source that recovery later truncates and overwrites.
RESUME_VERIFY_BYTES = 64 * 1024


class MoveInterrupted(Exception):
    """Raised inside the copy loop (and by `FutureLogCopy.check`) when the move was cancelled or the daemon is
    stopping."""


@dataclass
class SegmentCopy:
    # The last whole batch in the bytes copied so far: while this segment is being copied, the copy's log end offset.
    end: BatchEnd
    copied: int = 0
    index_copied: bool = False


@dataclass(eq=False)
class FutureLogCopy:
    move_path: Path  # the `.move` dir
    bucket: TokenBucket
    # The move's own events (ReplicaMove.cancel / fail set the first, stop the second): the copy only reads them.
    cancelled: threading.Event
    stopped: threading.Event

    bytes_copied: int = 0
    bytes_resumed: int = 0  # of bytes_copied, what a resumed move found already copied (metrics count only the rest)
    bytes_total: int = 0
    # Set by the swap when it begins: its rounds run at the daemon's priority and are never paused, whatever their
    # size (appends are about to wait on them).
    swapping: bool = False
    segments: dict[int, SegmentCopy] = field(default_factory=dict)
    copied_leo: int = 0
    durable_leo: int = 0  # the copy is fsynced up to here
    _written: set[Path] = field(default_factory=set)  # files of the copy written since the last fsync
    _small_seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # small file -> (size, mtime) copied
    _created: set[int] = field(default_factory=set)  # segments whose .log exists in the copy, even if empty
    # The swap's own descriptors, open from the last unlocked round to the end of the swap: each open or close
    # under the replica lock may wait for the GIL and the scheduler (file name -> fd; the source's .log under
    # "src:" + name).
    _held_fds: dict[str, int] = field(default_factory=dict)
    # The active segment the last unlocked copy of the small files saw, and the entry counts of its indexes then
    # (None: not loaded): under the lock, if it is still active, only index entries appended since are written.
    _small_active: int | None = None
    _index_entries: tuple[int | None, int | None] = (None, None)
    # The source's `files_version` read before the last copy of the small files (None: never copied): under the lock,
    # a different version means a file changed since, and the small files are copied again.
    small_version: int | None = None
    unlinked: bool = False  # a file was deleted from the copy since its last fsync
    # Pauses an unthrottled copy while the machine's CPUs are saturated by others (mover/moves/priority.py).
    pacer: priority.CopyPacer = field(default_factory=priority.CopyPacer)

    def check(self) -> None:
        if self.cancelled.is_set() or self.stopped.is_set():
            raise MoveInterrupted

    def begin(self, source: Log) -> None:
        """The `.move` dir with the partition's topic id in it, and what a resumed move's `.move` already holds."""
        # The .move itself is not fsynced into its parent here: if it vanishes in a power cut, the move simply
        # starts over from the source, which is untouched.
        self.move_path.mkdir(exist_ok=True)
        # The topic id first (Kafka's partition.metadata, written once per partition): a KRaft broker refuses to
        # start beside a partition dir without it, so a `.move` a kill -9 leaves is one rename away from a `-future`
        # that Kafka resumes (docs/operations.md). Fsynced with the bulk; the swap copies it again.
        if _copy_whole(source.dir / PARTITION_METADATA_FILE, self.move_path / PARTITION_METADATA_FILE):
            self._written.add(self.move_path / PARTITION_METADATA_FILE)
        self._verify_resumed_prefix(source)

    def _verify_resumed_prefix(self, source: Log) -> None:
        """Trust an existing `.move` (a resumed move) only as far as it matches the source byte for byte."""
        src = {s.base_offset: s for s in source.segment_files()}
        for entry in os.scandir(self.move_path):
            parsed = parse_segment_file_name(entry.name)
            if parsed is None:
                continue
            base, suffix = parsed
            path = Path(entry.path)
            if base not in src:
                # A segment the source no longer has (retention ran before the move resumed).
                path.unlink()
                continue
            if suffix != LOG_SUFFIX:
                continue
            have = entry.stat().st_size
            keep = min(have, src[base].size)
            if keep and not _same_tail(src[base].log_path, path, keep):
                keep = 0
            if keep != have:
                os.truncate(path, keep)
            self.segments[base] = SegmentCopy(BatchEnd(base), copied=keep)
        resumed = sum(s.copied for s in self.segments.values())
        self.bytes_resumed = resumed  # before bytes_copied: a reader in between sees too little, never too much
        self.bytes_copied = resumed

    def copy_round(self, source: Log, *, locked: bool, hold_active: bool = False) -> int:
        """Copy every byte the source has now and the copy lacks. Returns the number of bytes copied.
        `hold_active`: keep the last segment's two descriptors open for the swap's locked round."""
        segments = source.segment_files()
        self.bytes_total = sum(s.size for s in segments)
        copied = {base: c.copied for base, c in self.segments.items()}
        bulk = sum(max(0, s.size - copied.get(s.base_offset, 0)) for s in segments) >= CATCH_UP_ROUND_BYTES
        moved = 0
        for i, seg in enumerate(segments):
            state = self.segments.get(seg.base_offset)
            if state is None:
                state = self.segments[seg.base_offset] = SegmentCopy(BatchEnd(seg.base_offset))
            if state.copied < seg.size or seg.base_offset not in self._created:
                self._created.add(seg.base_offset)
                moved += self._copy_file(seg.log_path, self.move_path / seg.log_path.name, state, seg.size,
                                         locked=locked, hold=hold_active and i == len(segments) - 1, bulk=bulk)
            closed = i < len(segments) - 1
            if closed and not state.index_copied and state.copied >= seg.size:
                # A rolled segment's indexes never change again; copy them once, outside the lock.
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    dst = self.move_path / (seg.log_path.stem + suffix)
                    if _copy_whole(seg.log_path.with_suffix(suffix), dst):
                        self._written.add(dst)
                state.index_copied = True
            self._update_copied_leo(source, segments, i, locked=locked)
        return moved

    def _copy_file(self, src: Path, dst: Path, state: SegmentCopy, size: int, *, locked: bool,
                   hold: bool = False, bulk: bool = True) -> int:
        moved = 0
        held = "src:" + src.name in self._held_fds
        if hold or held:
            src_fd = self._held_fd(src, source=True)
            dst_fd = self._held_fd(dst)
        else:
            src_fd = os.open(src, os.O_RDONLY)
        try:
            if not (hold or held):
                dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
            self._written.add(dst)
            try:
                while state.copied < size:
                    step = UNTHROTTLED_STEP if self.bucket.rate is None else self.bucket.chunk_size()
                    n = min(step, size - state.copied)
                    if locked:
                        # Never wait on the throttle holding the lock; the debt slows the next moves instead.
                        self.bucket.consume(n)
                    else:
                        self.check()
                        if not self.bucket.acquire(n, cancelled=self._interrupted):
                            raise MoveInterrupted
                    # The bulk copy's CPU (kernel time, with the GIL released) at nice 19; the rest of the move at
                    # the daemon's (mover/moves/priority.py). Catch-up rounds stay at the daemon's: they must outrun
                    # the producers (CATCH_UP_ROUND_BYTES).
                    low = bulk and not self.swapping and not locked
                    pace = low and self.bucket.rate is None
                    if pace:
                        self.pacer.start()
                    with priority.copying() if low else contextlib.nullcontext():
                        done = _copy_range(src_fd, dst_fd, state.copied, n)
                        if not locked and self.bucket.rate is not None:
                            start_writeback(dst_fd, state.copied, done)
                    state.copied += done
                    moved += done
                    self.bytes_copied += done
                    if not locked:
                        self._advance_end(src_fd, src, state)
                    if pace:
                        # A throttled move is paced by its rate already; an unthrottled one yields saturated CPUs.
                        self._pause(self.pacer.pause_for())
                    if not locked:
                        crash_point("move.mid_copy")
                if not locked:
                    self._advance_end(src_fd, src, state)  # a resumed segment, copied before this move started
            finally:
                if not (hold or held):
                    os.close(dst_fd)
        finally:
            if not (hold or held):
                os.close(src_fd)
        return moved

    def _advance_end(self, src_fd: int, src: Path, state: SegmentCopy) -> None:
        """The copy's log end offset, after a chunk of this segment: the offset after its last whole batch copied
        (batch_end.py: the source's offset index and a few batch headers, never the records). Never under the lock:
        the switch sets the exact value."""
        state.end.advance(src_fd, src.with_suffix(INDEX_SUFFIX), state.copied)
        self.copied_leo = max(self.copied_leo, state.end.offset)

    def _held_fd(self, path: Path, *, source: bool = False) -> int:
        key = ("src:" if source else "") + path.name
        fd = self._held_fds.get(key)
        if fd is None:
            fd = self._held_fds[key] = (os.open(path, os.O_RDONLY) if source
                                        else os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        return fd

    def close_held_fds(self) -> None:
        fds, self._held_fds = self._held_fds, {}
        for fd in fds.values():
            os.close(fd)

    def catch_up_unlocked(self, source: Log) -> None:
        """Rounds outside the lock right before it: appends since the last round are copied now, so the locked round
        only copies what arrives between here and taking the lock. A roll in the meantime flushed the source past what
        the copy has on disk: fsync the copy here too, so that the lock needs no fsync unless a roll falls in the last
        moments before it. The active segment's descriptors (source and copy) stay open for the locked round."""
        for _ in range(3):
            self.copy_round(source, locked=False, hold_active=True)
            self.copy_small_files(source, locked=False)
            if source.recovery_point <= self.durable_leo and not self.unlinked:
                break
            self.fsync(self.move_path)
        active_base = self._small_active
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if active_base is not None:
                self._held_fd(self.move_path / segment_file_name(active_base, suffix))

    def copy_active_indexes(self, source: Log) -> bool:
        """Under the lock, when no file of the source changed since the last unlocked copy of the small files (the
        caller compared `files_version`): write the active segment's index entries appended since, from memory, into
        the copy's index files (one pwrite each, on descriptors opened before the lock). False, having written
        nothing: the caller copies the small files as before (a roll in between, or an index not in memory)."""
        active = source.active_segment
        if active.base_offset != self._small_active:
            return False
        indexes = (active.offset_index, active.time_index)
        counts = [idx.entry_count() for idx in indexes]
        for before, now in zip(self._index_entries, counts, strict=True):
            if before is None or now is None or now < before:
                return False
        for idx, before in zip(indexes, self._index_entries, strict=True):
            assert before is not None
            data = idx.encoded_since(before)
            if data:
                dst = self.move_path / idx.path.name
                write_all(self._held_fd(dst), data, before * idx.entry_size)
                self._written.add(dst)
        return True

    def _pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking at least every 50 ms so a cancel or a stop is not kept waiting."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self._interrupted():
            self.cancelled.wait(min(left, 0.05))

    def _interrupted(self) -> bool:
        return self.cancelled.is_set() or self.stopped.is_set()

    def copy_small_files(self, source: Log, *, locked: bool) -> None:
        """The active segment's indexes and the per-partition files (partition.metadata, leader-epoch-checkpoint,
        producer snapshots), whole. They are small, and only the lock makes them consistent with the last appended
        batch. So they are copied once outside the lock, and under it only what may have changed since: the active
        segment's indexes (written in place, so neither size nor mtime tells) and any other file whose size or
        mtime differs from the copy made outside (a snapshot written at a roll in between, say). Fewer file
        creations and truncations under the lock: each may wait for the file system's journal. A file this copied
        earlier that the source no longer has (a pruned or stale producer snapshot) is deleted from the copy.
        The source's `files_version` is read first (see the module's invariants): a change after it is either in
        this listing or seen by the lock."""
        version = source.files_version
        if not locked:
            # Read before the copies below: an entry appended meanwhile is then written again under the lock, never
            # missed (while a move is attached, retention is paused and index entries are only appended). A roll
            # after this read makes the lock copy the small files the old way (see copy_active_indexes).
            active = source.active_segment
            self._small_active = active.base_offset
            self._index_entries = (active.offset_index.entry_count(), active.time_index.entry_count())
        segments = source.segment_files()
        closed = {s.base_offset for s in segments[:-1]}
        present: set[str] = set()
        for entry in os.scandir(source.dir):
            present.add(entry.name)
            if not entry.is_file() or entry.name.endswith(TMP_SUFFIX):
                # A `.tmp` is an atomic write in progress (or a crash's leftover): the file it becomes is copied.
                continue
            parsed = parse_segment_file_name(entry.name)
            active_index = False
            if parsed is not None:
                base, suffix = parsed
                if suffix == LOG_SUFFIX:
                    continue
                if suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and base in closed:
                    if (copy := self.segments.get(base)) is not None and copy.index_copied:
                        continue
                active_index = suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and base not in closed
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            seen = (st.st_size, st.st_mtime_ns)
            if locked and not active_index and self._small_seen.get(entry.name) == seen:
                continue
            dst = self.move_path / entry.name
            if _copy_whole(Path(entry.path), dst):
                self._written.add(dst)
                self._small_seen[entry.name] = seen
        for name in [n for n in self._small_seen if n not in present]:
            # Gone from the source since this copied it. Durable with the copy's next fsync, which comes before the
            # switch (`unlinked`): a stale snapshot back in the serving copy after a power cut could be trusted once
            # its log grew past the offset.
            self.unlinked = True
            del self._small_seen[name]
            dst = self.move_path / name
            self._written.discard(dst)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dst)
        self.small_version = version

    def fsync(self, where: Path) -> None:
        """fsync what the copy wrote since the last call, and its directory (`where`: the `.move`, or the
        promoted dir after the swap), and note how far the copy is durable."""
        for path in sorted(self._written):
            fd = os.open(where / path.name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._written.clear()
        fsync_dir(where)
        self.unlinked = False
        self.durable_leo = self.copied_leo

    def _update_copied_leo(self, source: Log, segments: list, i: int, *, locked: bool) -> None:
        """After segment i's copy (segments are copied in order, each to its listed size): the copy's log end offset.
        Never above what the copy holds: it is also how far the copy counts as durable after an fsync."""
        seg = segments[i]
        state = self.segments[seg.base_offset]
        if state.copied < seg.size:
            return
        if i + 1 < len(segments):
            nxt = segments[i + 1].base_offset
        elif locked:
            nxt = source.log_end_offset  # no append runs under the lock: the listed size holds every offset
        else:
            # The last whole batch found in the copy (`_copy_file`): appends since the listing raised the source's log
            # end offset past what was copied.
            nxt = state.end.offset
        self.copied_leo = max(self.copied_leo, nxt)


# -------------------------------------------------------------------- file helpers


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> int:
    """Zero-copy: copy_file_range in the kernel, falling back to sendfile across file systems that refuse it."""
    done = 0
    while done < count:
        try:
            n = os.copy_file_range(src_fd, dst_fd, count - done, offset + done, offset + done)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            os.lseek(dst_fd, offset + done, os.SEEK_SET)
            n = os.sendfile(dst_fd, src_fd, offset + done, count - done)
        if n == 0:
            raise OSError(errno.EIO, "source segment shorter than its recorded size")
        done += n
    return done


def _copy_whole(src: Path, dst: Path) -> bool:
    """Copy a whole small file; False when the source does not exist (an index Kafka never wrote, say). An existing
    copy is written over and cut only if it is longer than the source: no truncate-and-regrow (a journal wait each)
    when a file is copied again."""
    try:
        src_fd = os.open(src, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(src_fd).st_size
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if size:
                _copy_range(src_fd, dst_fd, 0, size)
            if os.fstat(dst_fd).st_size > size:
                os.ftruncate(dst_fd, size)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return True


def _same_tail(a: Path, b: Path, length: int) -> bool:
    start = max(0, length - RESUME_VERIFY_BYTES)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        fa.seek(start)
        fb.seek(start)
        return fa.read(length - start) == fb.read(length - start)
