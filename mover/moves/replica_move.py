"""ReplicaMove: one move of one replica to another log dir, following KIP-113's nine steps.

A move knows nothing above it: `run()` (on a ReplicaMoveThread) returns a MoveOutcome (the final state; after a
swap, the retired Log and its `-delete` dir; the dirs a failure found broken), and the move's owner
(mover/moves/manager.py, for the LogManager) consumes it: checkpoints, the delayed delete, dirs offline, detaching
the move from its Replica. Only then does `wait()` return.

Crash-safety invariants (what a kill -9 at any instant leaves, and why recovery/ makes it whole again):

* Until the first rename, the source `topic-partition` is the only live copy and is never modified by the move;
  `topic-partition.move` is a prefix copy that recovery resumes (rule 1) or that a cancel deletes.
* The `.move` holds every byte of the source, and on disk at least every byte the source has on disk (below its
  recovery point), fsynced with its directory, *before* the source is renamed to `-delete`, and again (under the
  lock, if a roll flushed the source meanwhile) before the copy takes the appends. Bytes above the recovery point
  are durable nowhere until the next flush, in the source as in the copy (Kafka's flush policy); the copy's tail is
  fsynced right after the promotion, outside the lock, which therefore holds no fsync in the common case.
* Neither rename holds the replica lock. Each holds the renamed Log's PathGuard (`Log.rename_to`,
  mover/storage/path_guard.py) from the rename on disk to the paths updated in memory, so appends go on by
  descriptor through it and whatever reaches the Log's files by path (a roll, a reopen, a snapshot) waits for it
  and uses the new name. The swap, in order:
  1. Retirement rename `topic-partition` -> `-delete` while the source still serves appends (its files pinned).
     A crash from here until the switch leaves `.move` + `-delete` and no live copy; recovery promotes the longer
     (rule 2): the `-delete`, which holds every byte the `.move` has plus the appends since (a kill -9), or,
     after a power cut, whichever kept more, both being prefixes of the same history.
  2. fsync of the source's log dir: the retirement durable before the copy takes appends (a flush of the copy must
     never count while the old name could come back: recovery would then resume the move from the source) and
     before the promotion (never two live copies on disk). Outside any lock.
  3. Under the replica lock: the last catch-up copy (the source read by descriptor under its `-delete` name), the
     active segment's index entries appended since the last unlocked copy (from memory; all the small files only
     if a file of the source changed in between, see below), and the switch of `replica.log` to the copy, still
     named `.move`. A roll of the source just before (or a file deleted from the copy) makes the copy need an fsync
     first: the lock is given back for it and taken again.
     From here a crash leaves `.move` + `-delete` with the appends in the `.move`, the longer, which recovery
     promotes; a failure never deletes that copy (`_promoted`). A failure between 1 and 3 renames the source back
     (`_restore_source`, fsynced) or, if even that fails, keeps the `.move` for recovery (`_keep_copy`).
  4. Promotion rename `.move` -> `topic-partition` while the copy serves appends; then the fsync of the destination
     dir (the promotion durable), then the copy's tail files.
* The source is renamed away *before* the `.move` is renamed in, and that is durable first (2). Kafka renames in
  the other order and a crash in between leaves two live copies that it refuses to start with; this order never
  has two live copies.
* The promoted copy holds every file of the source's dir as it was at the switch, not only its `.log` bytes: a
  producer snapshot, say, is copied, and one the source deleted meanwhile (pruned, or past its log end offset) is
  deleted from the copy. The small files are copied outside the lock, then again under it only if a file changed
  since: `Log.files_version` (mover/storage/log.py) is read *before* the unlocked listing and compared under the
  lock. Every change of the source's files by path (a roll, a producer snapshot written or deleted) holds the replica
  lock and bumps the version after the change is visible, so an unchanged version under the lock means the listing
  missed nothing. A roll alone would not tell: its snapshot is written after its append, and an unlocked listing can
  fall between the two (it saw the new active segment, not the snapshot). Whatever name the source has meanwhile
  (the `-delete` after the retirement rename, where a snapshot waiting in the PathGuard lands), the listing reads the
  source's current name: only this thread renames it. Half-written `*.tmp` files (an atomic write in progress) are
  never copied; the finished file bumps the version.
* Cancels and stops are honoured until the retirement rename; after it the swap goes through or puts the source
  back.
* The `-delete` name is unique per move (a fresh uuid), so moving a partition back and forth never collides with a
  retired copy still waiting for deletion.
* The copy's log end offset (`_copied_leo`: DescribeLogDirs' offset lag, and how far an fsync of the copy counts as
  durable against the source's recovery point) never exceeds what the copy holds: after each chunk, the offset after
  the last whole batch copied (mover/moves/batch_end.py, from the source's index and batch headers); under the lock,
  the source's log end offset, which no append moves then. Reading the source's log end offset after an unlocked
  copy could count appends made since the segment was listed as copied, and durable, and spare a needed fsync.
* Retention is paused while the move is attached to its Replica, so the source only grows by appends; the copy is a
  byte-exact prefix of it at every moment, and `.log` bytes after the swap equal those of a never-moved copy.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mover.faults import crash_point
from mover.log.replica import Replica
from mover.moves import priority
from mover.moves.batch_end import BatchEnd
from mover.storage.dir_health import is_no_space, probe_log_dir
from mover.storage.files import fsync_dir, start_writeback, write_all
from mover.storage.log import Log, LogConfig
from mover.storage.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    PARTITION_METADATA_FILE,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    current_dir_name,
    delete_dir_name,
    move_dir_name,
    parse_segment_file_name,
    segment_file_name,
)
from mover.wire.errors import ErrorCode
from throttle.token_bucket import TokenBucket

log = logging.getLogger(__name__)

# A round of copying that moved less than this is "caught up" (KIP-113 step 4): the rest is copied under the
# replica lock. 1 MiB copies in well under a millisecond from page cache, which keeps the lock hold short.
CAUGHT_UP_BYTES = 1024 * 1024

# A round that has less than this to copy is a catch-up round (the appends that arrived during the round before):
# it runs at the daemon's priority and is never paused. Paced at nice 19 on busy CPUs, a round chasing a steady
# producer could take longer than the producer needs to append the next CAUGHT_UP_BYTES, round after round, and the
# move did not end (bench/produce_during_move.py: one move in ~1,000 ran past 60 s, and more with retired copies
# holding page cache). At full speed this much copies from page cache in a few milliseconds.
CATCH_UP_ROUND_BYTES = 16 * 1024 * 1024

# If producers outrun the copy, stop chasing after this many rounds and take the lock anyway; Kafka has no bound.
MAX_UNLOCKED_ROUNDS = 1000

# A roll of the source just before the swap's lock would need an fsync of the copy under it: give the lock back,
# fsync outside, and try again this many times before fsyncing under the lock.
SWAP_FSYNC_RETRIES = 3

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


class MoveState(enum.Enum):
    QUEUED = "queued"
    COPYING = "copying"
    SWAPPING = "swapping"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    STOPPED = "stopped"  # daemon shutdown: the .move stays and resumes at the next start

    @property
    def done(self) -> bool:
        return self in (MoveState.COMPLETED, MoveState.CANCELLED, MoveState.FAILED, MoveState.STOPPED)


@dataclass(frozen=True)
class MoveOutcome:
    """How a move ended, for its owner to act on (the move itself never calls back up).

    `retired_log` / `retired_path`: after a swap, the source Log (still open for fetches in flight) and the
    `-delete` dir it was renamed to; the owner rewrites both dirs' checkpoints and deletes it after
    log.segment.delete.delay.ms. `failed_dirs`: dirs a failed move found broken (the owner takes them offline).
    `leftover_copy`: a `.move` a move cancelled before it ran may have left (a resumed move's prefix)."""

    move: ReplicaMove
    state: MoveState
    retired_log: Log | None = None
    retired_path: Path | None = None
    failed_dirs: tuple[tuple[Path, OSError], ...] = ()
    leftover_copy: Path | None = None


class _Stop(Exception):
    """Raised inside the copy loop when the move was cancelled or the daemon is stopping."""


@dataclass
class _SegmentCopy:
    # The last whole batch in the bytes copied so far: while this segment is being copied, the copy's log end offset.
    end: BatchEnd
    copied: int = 0
    index_copied: bool = False


@dataclass(eq=False)  # identity semantics: moves are kept in sets and compared with `is`
class ReplicaMove:
    replica: Replica
    source_dir: Path  # log dir (not partition dir)
    destination_dir: Path
    bucket: TokenBucket
    log_config: LogConfig
    resume: bool = False

    state: MoveState = MoveState.QUEUED
    _final: MoveState | None = None  # how it ended; becomes `state` once the owner consumed the outcome
    bytes_copied: int = 0
    bytes_resumed: int = 0  # of bytes_copied, what a resumed move found already copied (metrics count only the rest)
    bytes_total: int = 0
    error: str | None = None
    error_code: int = 0
    lock_hold_seconds: float | None = None
    rounds: int = 0  # copy rounds before the swap (the first copies the bulk; the others catch up with appends)
    _cancel: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _finished: threading.Event = field(default_factory=threading.Event)
    _segments: dict[int, _SegmentCopy] = field(default_factory=dict)
    _copied_leo: int = 0
    _durable_leo: int = 0  # the copy is fsynced up to here
    _written: set[Path] = field(default_factory=set)  # files of the copy written since the last fsync
    _small_seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # small file -> (size, mtime) copied
    _created: set[int] = field(default_factory=set)  # segments whose .log exists in the copy, even if empty
    _retired: tuple[Log, Path] | None = None  # set by the swap: the source Log and its `-delete` dir
    _promoted: bool = False  # the copy serves the replica (the swap's lock hold is done)
    _keep_copy: bool = False  # the source could not get its name back after the retirement rename: keep the .move
    _failed_dirs: list[tuple[Path, OSError]] = field(default_factory=list)
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
    _small_version: int | None = None
    _unlinked: bool = False  # a file was deleted from the copy since its last fsync
    # Pauses an unthrottled copy while the machine's CPUs are saturated by others (mover/moves/priority.py).
    _pacer: priority.CopyPacer = field(default_factory=priority.CopyPacer)

    @property
    def tp(self):  # noqa: ANN201 - TopicPartition, kept short for readers
        return self.replica.tp

    @property
    def move_path(self) -> Path:
        return self.destination_dir / move_dir_name(self.tp)

    def cancel(self) -> None:
        """Abandon the move and delete its `.move` (a request for the current dir, `any`, or a third dir)."""
        self._cancel.set()

    def fail(self, reason: str) -> None:
        """Abandon the move because a dir it touches failed: it ends FAILED and cleans up what it can."""
        self.error, self.error_code = reason, int(ErrorCode.KAFKA_STORAGE_ERROR)
        self._cancel.set()

    def stop(self) -> None:
        """Stop for shutdown: keep the `.move` so the next start resumes it."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the move ended and its owner consumed the outcome (the Replica no longer holds it)."""
        return self._finished.wait(timeout)

    def finished(self) -> None:
        """Called after the owner consumed the outcome: the move takes its final state and `wait()` returns.

        Until then `state` stays COPYING / SWAPPING, so nobody (DescribeReplicaMoves, a test) sees a move done whose
        checkpoints, delete and detach have not happened yet."""
        if self._final is not None:
            self.state = self._final
        self._finished.set()

    def abandon(self) -> MoveOutcome:
        """End a move that never ran (cancelled while queued): no I/O here, on the request thread. A `.move` a
        resumed move had on disk is reported as `leftover_copy` for the owner to retire."""
        self._cancel.set()
        self._final = MoveState.FAILED if self.error else MoveState.CANCELLED
        log.info("move of %s to %s %s before it started", self.tp, self.destination_dir, self._final.value)
        return MoveOutcome(self, self._final, leftover_copy=self.move_path)

    def copied_log_end_offset(self) -> int:
        """The copy's log end offset, for DescribeLogDirs' offset_lag: the offset after the last whole batch copied, as
        of the last chunk (never ahead of the copy; exact from the switch on)."""
        return self._copied_leo

    # ---------------------------------------------------------------- the thread's work

    def run(self) -> MoveOutcome:
        """Called by a ReplicaMoveThread. Never raises: every outcome ends in a done state."""
        t0 = time.monotonic()
        try:
            if self._cancel.is_set():
                raise _Stop
            self.state = MoveState.COPYING
            self._copy_and_swap()
            self._final = MoveState.COMPLETED
            log.info("moved %s from %s to %s (%d bytes in %.2f s and %d rounds, %.2f s of it paused for busy CPUs; "
                     "replica lock held %.1f ms)", self.tp, self.source_dir, self.destination_dir, self.bytes_copied,
                     time.monotonic() - t0, self.rounds, self._pacer.paused, (self.lock_hold_seconds or 0.0) * 1000)
        except _Stop:
            if self._stop.is_set() and not self._cancel.is_set():
                self._final = MoveState.STOPPED
                log.info("move of %s stopped for shutdown; %s stays and resumes at the next start", self.tp,
                         self.move_path)
            else:
                self._final = MoveState.FAILED if self.error else MoveState.CANCELLED
                self._discard_copy()
                log.info("move of %s to %s %s%s", self.tp, self.destination_dir, self._final.value,
                         f": {self.error}" if self.error else "")
        except OSError as e:
            self._failed(e)
        except Exception as e:  # a bug must not kill the pool thread or leave the move attached
            log.exception("move of %s failed unexpectedly", self.tp)
            self.error, self.error_code = f"{type(e).__name__}: {e}", int(ErrorCode.UNKNOWN_SERVER_ERROR)
            self._final = MoveState.FAILED
            self._discard_copy()
        retired_log, retired_path = self._retired if self._retired is not None else (None, None)
        return MoveOutcome(self, self._final, retired_log, retired_path, tuple(self._failed_dirs))

    def _failed(self, e: OSError) -> None:
        self._final = MoveState.FAILED
        self.error = f"{e.strerror or e} ({errno.errorcode.get(e.errno or 0, e.errno)})"
        self.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        if is_no_space(e):
            # The destination is full, not broken: drop the copy, keep the dir online (Kafka takes it offline).
            log.warning("move of %s to %s aborted: destination full; deleting %s", self.tp,
                        self.destination_dir, self.move_path)
        else:
            log.error("move of %s from %s to %s failed: %s", self.tp, self.source_dir, self.destination_dir,
                      self.error)
            for d in (self.source_dir, self.destination_dir):
                if probe_log_dir(d, write=True) is not None:
                    self._failed_dirs.append((d, e))
        self._discard_copy()

    def _discard_copy(self) -> None:
        """A cancelled or failed move leaves no `.move` behind, as far as the destination still allows. Never once
        the copy serves the replica (a failure between the switch and the promotion), nor while the source is stuck
        under its `-delete` name: recovery promotes the longer of the two then."""
        if self._promoted or self._keep_copy:
            return
        try:
            shutil.rmtree(self.move_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete %s: %s (recovery deletes it at the next start)", self.move_path, e)

    def _check(self) -> None:
        if self._cancel.is_set() or self._stop.is_set():
            raise _Stop

    def _copy_and_swap(self) -> None:
        source = self.replica.current_log()
        crash_point("move.before_copy")
        # The .move itself is not fsynced into its parent here: if it vanishes in a power cut, the move simply
        # starts over from the source, which is untouched.
        self.move_path.mkdir(exist_ok=True)
        # The topic id first (Kafka's partition.metadata, written once per partition): a KRaft broker refuses to
        # start beside a partition dir without it, so a `.move` a kill -9 leaves is one rename away from a `-future`
        # that Kafka resumes (docs/operations.md). Fsynced with the bulk; the swap copies it again.
        if _copy_whole(source.dir / PARTITION_METADATA_FILE, self.move_path / PARTITION_METADATA_FILE):
            self._written.add(self.move_path / PARTITION_METADATA_FILE)
        self._verify_resumed_prefix(source)

        while True:
            self._check()
            moved = self._copy_round(source, locked=False)
            self.rounds += 1
            if moved < CAUGHT_UP_BYTES or self.rounds >= MAX_UNLOCKED_ROUNDS:
                break
        # Make the bulk durable outside the lock, so that the lock rarely needs an fsync at all (see _swap).
        self._fsync_copy(self.move_path)
        self._check()
        # Bytes below the source's recovery point were copied and fsynced: no need to CRC-check them again.
        future = Log.open(self.move_path, self.tp, self.log_config,
                          recovery_point=min(source.recovery_point, self._copied_leo))
        try:
            self._swap(source, future)
        except BaseException:
            if not self._promoted:  # once promoted the copy is the replica's live log
                future.close()
            raise

    def _swap(self, source: Log, future: Log) -> None:
        try:
            # A move thread copies at a low priority; the swap holds the replica lock, which appends wait on, so it
            # runs at the daemon's own (mover/moves/priority.py): a thread at nice 19 holding the lock would wait
            # behind every other runnable thread of the machine while producers wait behind it.
            with priority.foreground():
                self._swap_held(source, future)
        finally:
            self._close_held_fds()

    def _swap_held(self, source: Log, future: Log) -> None:
        """The swap, with both renames outside the replica lock: (1) the retirement rename while the source still
        serves appends; the fsync that makes it durable; (2) under the lock, the last catch-up copy and the switch of
        `replica.log` to the copy (still named `.move`); (3) the promotion rename while the copy serves. Appends in
        (1) are in the `-delete` (recovery promotes the longer of `.move` and `-delete`); appends from (2) on are in
        the copy. Each rename holds the renamed Log's PathGuard (`Log.rename_to`), not the replica lock."""
        self.state = MoveState.SWAPPING
        self._catch_up_unlocked(source)
        old_path = source.dir
        delete_path = old_path.parent / delete_dir_name(self.tp)
        new_path = self.destination_dir / current_dir_name(self.tp)
        hold = 0.0
        attempt = 0
        # Each segment's .log (and the active indexes) opened if the LRU had closed them, and pinned until the switch:
        # the retirement rename and the locked round open nothing, and the source is read by descriptor whatever its
        # name.
        early_pin = source.pin_files()
        early_pin.__enter__()
        try:
            # The last moment a cancel or a stop is honoured: from the retirement rename on, the swap goes through
            # (or, failing, puts the source back).
            self._check()
            if self.replica.log is not source:
                raise OSError(errno.ESTALE, "the replica's log changed under the move")
            # Retire the source first, while it still serves appends (by descriptor; anything by path waits for the
            # rename in its PathGuard). From here until the promotion no live copy exists on disk, and recovery
            # promotes the longer of `.move` and `-delete` (rule 2): the `-delete`, which has every byte the `.move`
            # has plus the appends since the last copy. The `.move` is fsynced up to the source's recovery point
            # (the rounds above), so it is complete as far as the source was durable in case a power cut keeps it
            # the longer. Never two live copies: the `.move` is renamed in only after this is durable.
            source.rename_to(delete_path)
            # The retirement durable before the switch and the promotion: the on-disk order must match (never two
            # live copies after a power cut, and no flush of the copy counted while the source's old name could
            # still come back). Outside any lock: under load this journal commit takes tens of ms.
            fsync_dir(old_path.parent)
            crash_point("move.retired")
            # Appends went on during the rename and the fsync (tens of ms under load): copy them now, so that the
            # lock copies only what arrives from here, and no roll since needs an fsync under it.
            self._catch_up_unlocked(source)
            while True:
                # At real-time priority for as long as appends wait (mover/moves/priority.py): on saturated CPUs a
                # thread of nice 0 waking inside the hold waits for a CPU behind every other runnable thread.
                with priority.locked_section(), self.replica.lock:
                    t0 = time.perf_counter()
                    if self.replica.log is not source:
                        raise OSError(errno.ESTALE, "the replica's log changed under the move")
                    crash_point("move.locked")
                    # The source, now under its `-delete` name, is read through descriptors (held or pinned).
                    self._copy_round(source, locked=True)
                    # A file of the source changed since the last copy of the small files (a producer snapshot
                    # written after the unlocked listing, say): copy them again; otherwise only the active indexes'
                    # new entries, from memory. Writers of those files hold this lock, so the version holds still.
                    active_indexes_copied = (source.files_version == self._small_version
                                             and self._copy_active_indexes(source))
                    if not active_indexes_copied:
                        self._copy_small_files(source, locked=True)
                    needs_fsync = source.recovery_point > self._durable_leo or self._unlinked
                    if not needs_fsync or attempt >= SWAP_FSYNC_RETRIES:
                        if needs_fsync:
                            # The source flushed bytes the copy holds only in page cache (a roll just before the
                            # lock, again and again), or a file the copy deleted may come back: they must be on disk
                            # before the copy takes over, since from the switch on a crash may promote the copy (it
                            # gets the appends).
                            self._fsync_copy(self.move_path)
                        # Otherwise every byte the copy lacks on disk is above the source's recovery point: not durable
                        # in the source either, so a power cut loses nothing the source would have kept. The fsync
                        # follows after the promotion.
                        future.reload_after_copy(source, {b: c.copied for b, c in self._segments.items()},
                                                 active_indexes_copied)
                        # The copy holds every byte the source had, taken under the lock: it serves from now on, under
                        # its `.move` name until the promotion below (its files are reached by descriptor or, under
                        # its PathGuard, by its current path).
                        self.replica.log = future
                        self.replica.log_dir = self.destination_dir
                        self._copied_leo = future.log_end_offset
                        self._promoted = True
                        hold = max(hold, time.perf_counter() - t0)
                        break
                    hold = max(hold, time.perf_counter() - t0)
                # A roll flushed the source just before the lock: let appends go on while the copy is fsynced (under
                # load a journal commit takes tens of ms), then take the lock again; the next hold copies only what
                # arrives meanwhile. The lock is not held across this fsync unless the rolls keep coming.
                attempt += 1
                self._fsync_copy(self.move_path)
        except BaseException:
            if not self._promoted:
                self._restore_source(source, old_path, delete_path)
            raise
        finally:
            early_pin.__exit__()
        self.lock_hold_seconds = hold
        # From here the replica lives in the destination whatever happens next: the outcome carries the retired
        # source so its owner checkpoints both dirs and deletes it, even if a rename or fsync below fails.
        self._retired = (source, delete_path)
        crash_point("move.switched")
        # Promote the copy while it serves appends (a roll or a snapshot by path waits in its PathGuard). Outside the
        # replica lock: a rename may wait for the file system's journal. The retirement is already durable.
        future.rename_to(new_path)
        # Durable promotion: until this fsync a crash leaves `.move` + `-delete`, which recovery resolves by
        # promoting the longer one (rule 2); after it, exactly the state the swap was heading to.
        fsync_dir(self.destination_dir)
        # The tail copied under the lock: the new log's recovery point (the source's) does not cover it, and its
        # next flush fsyncs only the active segment, so a segment rolled in the meantime is made durable here.
        self._fsync_copy(new_path)
        crash_point("move.after_swap")

    def _catch_up_unlocked(self, source: Log) -> None:
        """Rounds outside the lock right before it: appends since the last round are copied now, so the locked round
        only copies what arrives between here and taking the lock. A roll in the meantime flushed the source past what
        the copy has on disk: fsync the copy here too, so that the lock needs no fsync unless a roll falls in the last
        moments before it. The active segment's descriptors (source and copy) stay open for the locked round."""
        for _ in range(3):
            self._copy_round(source, locked=False, hold_active=True)
            self._copy_small_files(source, locked=False)
            if source.recovery_point <= self._durable_leo and not self._unlinked:
                break
            self._fsync_copy(self.move_path)
        active_base = self._small_active
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if active_base is not None:
                self._held_fd(self.move_path / segment_file_name(active_base, suffix))

    def _restore_source(self, source: Log, old_path: Path, delete_path: Path) -> None:
        """The swap failed after the retirement rename and before the copy took over: give the source its name back,
        durably, so the failed move leaves the partition as it found it (and the `.move` can be deleted). If that
        fails too, the `.move` stays: with no live copy on disk, recovery promotes the longer of the two, the
        `-delete` (rule 2), which the replica keeps serving until then."""
        try:
            with source.path_guard:
                if source.dir != delete_path:
                    return  # the retirement rename itself failed: nothing moved
                source.rename_to(old_path)
            # Durable before the `.move` is deleted: a power cut must not find the `-delete` alone.
            fsync_dir(old_path.parent)
        except OSError as e:
            self._keep_copy = True
            log.error("move of %s: could not give %s its name %s back (%s); %s stays for recovery", self.tp,
                      delete_path, old_path.name, e, self.move_path)

    # ---------------------------------------------------------------- copying

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
            self._segments[base] = _SegmentCopy(BatchEnd(base), copied=keep)
        resumed = sum(s.copied for s in self._segments.values())
        self.bytes_resumed = resumed  # before bytes_copied: a reader in between sees too little, never too much
        self.bytes_copied = resumed

    def _copy_round(self, source: Log, *, locked: bool, hold_active: bool = False) -> int:
        """Copy every byte the source has now and the copy lacks. Returns the number of bytes copied.
        `hold_active`: keep the last segment's two descriptors open for the swap's locked round."""
        segments = source.segment_files()
        self.bytes_total = sum(s.size for s in segments)
        copied = {base: c.copied for base, c in self._segments.items()}
        bulk = sum(max(0, s.size - copied.get(s.base_offset, 0)) for s in segments) >= CATCH_UP_ROUND_BYTES
        moved = 0
        for i, seg in enumerate(segments):
            state = self._segments.get(seg.base_offset)
            if state is None:
                state = self._segments[seg.base_offset] = _SegmentCopy(BatchEnd(seg.base_offset))
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

    def _copy_file(self, src: Path, dst: Path, state: _SegmentCopy, size: int, *, locked: bool,
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
                        self._check()
                        if not self.bucket.acquire(n, cancelled=self._interrupted):
                            raise _Stop
                    # The bulk copy's CPU (kernel time, with the GIL released) at nice 19; the rest of the move at
                    # the daemon's (mover/moves/priority.py). Catch-up rounds stay at the daemon's: they must outrun
                    # the producers (CATCH_UP_ROUND_BYTES).
                    low = bulk and self.state is MoveState.COPYING and not locked
                    pace = low and self.bucket.rate is None
                    if pace:
                        self._pacer.start()
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
                        self._pause(self._pacer.pause_for())
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

    def _advance_end(self, src_fd: int, src: Path, state: _SegmentCopy) -> None:
        """The copy's log end offset, after a chunk of this segment: the offset after its last whole batch copied
        (batch_end.py: the source's offset index and a few batch headers, never the records). Never under the lock:
        the switch sets the exact value."""
        state.end.advance(src_fd, src.with_suffix(INDEX_SUFFIX), state.copied)
        self._copied_leo = max(self._copied_leo, state.end.offset)

    def _held_fd(self, path: Path, *, source: bool = False) -> int:
        key = ("src:" if source else "") + path.name
        fd = self._held_fds.get(key)
        if fd is None:
            fd = self._held_fds[key] = (os.open(path, os.O_RDONLY) if source
                                        else os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        return fd

    def _close_held_fds(self) -> None:
        fds, self._held_fds = self._held_fds, {}
        for fd in fds.values():
            os.close(fd)

    def _copy_active_indexes(self, source: Log) -> bool:
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
            self._cancel.wait(min(left, 0.05))

    def _interrupted(self) -> bool:
        return self._cancel.is_set() or self._stop.is_set()

    def _copy_small_files(self, source: Log, *, locked: bool) -> None:
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
            # after this read makes the lock copy the small files the old way (see _copy_active_indexes).
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
                    if (copy := self._segments.get(base)) is not None and copy.index_copied:
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
            # switch (`_unlinked`): a stale snapshot back in the serving copy after a power cut could be trusted once
            # its log grew past the offset.
            self._unlinked = True
            del self._small_seen[name]
            dst = self.move_path / name
            self._written.discard(dst)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dst)
        self._small_version = version

    def _fsync_copy(self, where: Path) -> None:
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
        self._unlinked = False
        self._durable_leo = self._copied_leo

    def _update_copied_leo(self, source: Log, segments: list, i: int, *, locked: bool) -> None:
        """After segment i's copy (segments are copied in order, each to its listed size): the copy's log end offset.
        Never above what the copy holds: it is also how far the copy counts as durable after an fsync."""
        seg = segments[i]
        state = self._segments[seg.base_offset]
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
        self._copied_leo = max(self._copied_leo, nxt)


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
