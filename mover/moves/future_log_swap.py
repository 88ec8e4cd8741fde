"""FutureLogSwap: the swap of a replica's current Log for its caught-up future copy (KIP-113's last steps; Kafka's
LogManager.replaceCurrentWithFutureLog): the retirement rename of the source to `-delete`, the switch of the
Replica to the copy under the replica lock, the promotion rename of `.move` to `topic-partition`, and the fsyncs
that order them on disk. The copy's own bytes and fsyncs are FutureLogCopy's (mover/moves/future_log_copy.py),
whose invariants this relies on; the ReplicaMove (mover/moves/replica_move.py) runs the swap and reads what it left
(`promoted`, `retired`, `keep_copy`, `lock_hold_seconds`). It calls nothing above it.

Crash-safety invariants of the swap (what a kill -9 at any instant leaves, and why recovery/ makes it whole again):

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
     promotes; a failure never deletes that copy (`promoted`). A failure between 1 and 3 renames the source back
     (`_restore_source`, fsynced) or, if even that fails, keeps the `.move` for recovery (`keep_copy`).
  4. Promotion rename `.move` -> `topic-partition` while the copy serves appends; then the fsync of the destination
     dir (the promotion durable), then the copy's tail files.
* The source is renamed away *before* the `.move` is renamed in, and that is durable first (2). Kafka renames in
  the other order and a crash in between leaves two live copies that it refuses to start with; this order never
  has two live copies.
* The promoted copy holds every file of the source's dir as it was at the switch: under the lock the small files
  are copied again only if the source's `Log.files_version` moved since the unlocked listing read it (every change
  of the source's files by path holds the replica lock and bumps it), else only the active indexes' new entries;
  why that misses nothing is future_log_copy.py's invariant.
* Cancels and stops are honoured until the retirement rename; after it the swap goes through or puts the source
  back.
* The `-delete` name is unique per move (a fresh uuid), so moving a partition back and forth never collides with a
  retired copy still waiting for deletion.
"""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from mover.faults import crash_point
from mover.log.replica import Replica
from mover.moves import priority
from mover.moves.future_log_copy import FutureLogCopy
from mover.storage.files import fsync_dir
from mover.storage.log import Log
from mover.storage.names import TopicPartition, current_dir_name, delete_dir_name

log = logging.getLogger(__name__)

# A roll of the source just before the swap's lock would need an fsync of the copy under it: give the lock back,
# fsync outside, and try again this many times before fsyncing under the lock.
SWAP_FSYNC_RETRIES = 3


@dataclass(eq=False)
class FutureLogSwap:
    replica: Replica
    copy: FutureLogCopy
    destination_dir: Path  # log dir (not partition dir)
    lock_hold_seconds: float | None = None
    retired: tuple[Log, Path] | None = None  # set by the swap: the source Log and its `-delete` dir
    promoted: bool = False  # the copy serves the replica (the swap's lock hold is done)
    keep_copy: bool = False  # the source could not get its name back after the retirement rename: keep the .move

    @property
    def tp(self) -> TopicPartition:
        return self.replica.tp

    def run(self, source: Log, future: Log) -> None:
        """Swap the copy in for `source`; `future` is the copy opened as a Log. Raises what failed; `promoted`,
        `retired` and `keep_copy` then say what the failure left (the move's outcome and clean-up read them)."""
        try:
            # A move thread copies at a low priority; the swap holds the replica lock, which appends wait on, so it
            # runs at the daemon's own (mover/moves/priority.py): a thread at nice 19 holding the lock would wait
            # behind every other runnable thread of the machine while producers wait behind it.
            with priority.foreground():
                self._swap_held(source, future)
        finally:
            self.copy.close_held_fds()

    def _swap_held(self, source: Log, future: Log) -> None:
        """The swap, with both renames outside the replica lock: (1) the retirement rename while the source still
        serves appends; the fsync that makes it durable; (2) under the lock, the last catch-up copy and the switch of
        `replica.log` to the copy (still named `.move`); (3) the promotion rename while the copy serves. Appends in
        (1) are in the `-delete` (recovery promotes the longer of `.move` and `-delete`); appends from (2) on are in
        the copy. Each rename holds the renamed Log's PathGuard (`Log.rename_to`), not the replica lock."""
        copy = self.copy
        # From here the copy's rounds are the swap's, at the daemon's priority whatever their size.
        copy.swapping = True
        copy.catch_up_unlocked(source)
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
            copy.check()
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
            copy.catch_up_unlocked(source)
            while True:
                # At real-time priority for as long as appends wait (mover/moves/priority.py): on saturated CPUs a
                # thread of nice 0 waking inside the hold waits for a CPU behind every other runnable thread.
                with priority.locked_section(), self.replica.lock:
                    t0 = time.perf_counter()
                    if self.replica.log is not source:
                        raise OSError(errno.ESTALE, "the replica's log changed under the move")
                    crash_point("move.locked")
                    # The source, now under its `-delete` name, is read through descriptors (held or pinned).
                    copy.copy_round(source, locked=True)
                    # A file of the source changed since the last copy of the small files (a producer snapshot
                    # written after the unlocked listing, say): copy them again; otherwise only the active indexes'
                    # new entries, from memory. Writers of those files hold this lock, so the version holds still.
                    active_indexes_copied = (source.files_version == copy.small_version
                                             and copy.copy_active_indexes(source))
                    if not active_indexes_copied:
                        copy.copy_small_files(source, locked=True)
                    needs_fsync = source.recovery_point > copy.durable_leo or copy.unlinked
                    if not needs_fsync or attempt >= SWAP_FSYNC_RETRIES:
                        if needs_fsync:
                            # The source flushed bytes the copy holds only in page cache (a roll just before the
                            # lock, again and again), or a file the copy deleted may come back: they must be on disk
                            # before the copy takes over, since from the switch on a crash may promote the copy (it
                            # gets the appends).
                            copy.fsync(copy.move_path)
                        # Otherwise every byte the copy lacks on disk is above the source's recovery point: not durable
                        # in the source either, so a power cut loses nothing the source would have kept. The fsync
                        # follows after the promotion.
                        future.reload_after_copy(source, {b: c.copied for b, c in copy.segments.items()},
                                                 active_indexes_copied)
                        # The copy holds every byte the source had, taken under the lock: it serves from now on, under
                        # its `.move` name until the promotion below (its files are reached by descriptor or, under
                        # its PathGuard, by its current path).
                        self.replica.log = future
                        self.replica.log_dir = self.destination_dir
                        copy.copied_leo = future.log_end_offset
                        self.promoted = True
                        hold = max(hold, time.perf_counter() - t0)
                        break
                    hold = max(hold, time.perf_counter() - t0)
                # A roll flushed the source just before the lock: let appends go on while the copy is fsynced (under
                # load a journal commit takes tens of ms), then take the lock again; the next hold copies only what
                # arrives meanwhile. The lock is not held across this fsync unless the rolls keep coming.
                attempt += 1
                copy.fsync(copy.move_path)
        except BaseException:
            if not self.promoted:
                self._restore_source(source, old_path, delete_path)
            raise
        finally:
            early_pin.__exit__()
        self.lock_hold_seconds = hold
        # From here the replica lives in the destination whatever happens next: the outcome carries the retired
        # source so its owner checkpoints both dirs and deletes it, even if a rename or fsync below fails.
        self.retired = (source, delete_path)
        crash_point("move.switched")
        # Promote the copy while it serves appends (a roll or a snapshot by path waits in its PathGuard). Outside the
        # replica lock: a rename may wait for the file system's journal. The retirement is already durable.
        future.rename_to(new_path)
        # Durable promotion: until this fsync a crash leaves `.move` + `-delete`, which recovery resolves by
        # promoting the longer one (rule 2); after it, exactly the state the swap was heading to.
        fsync_dir(self.destination_dir)
        # The tail copied under the lock: the new log's recovery point (the source's) does not cover it, and its
        # next flush fsyncs only the active segment, so a segment rolled in the meantime is made durable here.
        copy.fsync(new_path)
        crash_point("move.after_swap")

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
            self.keep_copy = True
            log.error("move of %s: could not give %s its name %s back (%s); %s stays for recovery", self.tp,
                      delete_path, old_path.name, e, self.copy.move_path)
