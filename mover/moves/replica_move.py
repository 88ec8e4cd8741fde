"""ReplicaMove: one move of one replica to another log dir, following KIP-113's nine steps.

A move knows nothing above it: `run()` (on a ReplicaMoveThread) returns a MoveOutcome (the final state; after a
swap, the retired Log and its `-delete` dir; the dirs a failure found broken), and the move's owner
(mover/moves/manager.py, for the LogManager) consumes it: checkpoints, the delayed delete, dirs offline, detaching
the move from its Replica. Only then does `wait()` return.

A move has two parts, each its own module below this one: the copy of the source into the `.move` (FutureLogCopy,
mover/moves/future_log_copy.py: the rounds until caught up, the copy's fsyncs) and the swap (FutureLogSwap,
mover/moves/future_log_swap.py: the two renames, the switch under the replica lock, the fsyncs that order them).
Each states its crash-safety invariants at its top. This module runs them in order, holds the move's state, its
cancel and stop, and says how it ended; the only file operation here is the delete of a copy it gives up.

Crash-safety invariants of the move as a whole (what a kill -9 at any instant leaves, and why recovery/ makes it
whole again):

* Until the first rename, the source `topic-partition` is the only live copy and is never modified by the move;
  `topic-partition.move` is a prefix copy that recovery resumes (rule 1) or that a cancel deletes (`_discard_copy`).
* Cancels and stops are honoured until the retirement rename; after it the swap goes through or puts the source
  back. A cancelled or failed move deletes its `.move`, but never once the copy serves the replica (the swap's
  `promoted`), nor while the source is stuck under its `-delete` name (`keep_copy`): recovery promotes the longer
  of the two then (rule 2). A stop for shutdown leaves the `.move`, which the next start resumes.
"""

from __future__ import annotations

import enum
import errno
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mover.faults import crash_point
from mover.log.replica import Replica
from mover.moves.future_log_copy import FutureLogCopy, MoveInterrupted
from mover.moves.future_log_swap import FutureLogSwap
from mover.storage.dir_health import is_no_space, probe_log_dir
from mover.storage.log import Log, LogConfig
from mover.storage.names import move_dir_name
from mover.wire.errors import ErrorCode
from throttle.token_bucket import TokenBucket

log = logging.getLogger(__name__)

# A round of copying that moved less than this is "caught up" (KIP-113 step 4): the rest is copied under the
# replica lock. 1 MiB copies in well under a millisecond from page cache, which keeps the lock hold short.
CAUGHT_UP_BYTES = 1024 * 1024

# If producers outrun the copy, stop chasing after this many rounds and take the lock anyway; Kafka has no bound.
MAX_UNLOCKED_ROUNDS = 1000


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
    error: str | None = None
    error_code: int = 0
    rounds: int = 0  # copy rounds before the swap (the first copies the bulk; the others catch up with appends)
    _cancel: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _finished: threading.Event = field(default_factory=threading.Event)
    _failed_dirs: list[tuple[Path, OSError]] = field(default_factory=list)
    # The move's two parts, made with it: the copy into the `.move` (its progress, how far it is durable) and the
    # swap (whether the copy serves, the retired source, the lock's hold), read by the outcome and the clean-up.
    _copy: FutureLogCopy = field(init=False)
    _swap: FutureLogSwap = field(init=False)

    def __post_init__(self) -> None:
        self._copy = FutureLogCopy(self.move_path, self.bucket, self._cancel, self._stop)
        self._swap = FutureLogSwap(self.replica, self._copy, self.destination_dir)

    @property
    def bytes_copied(self) -> int:
        return self._copy.bytes_copied

    @bytes_copied.setter
    def bytes_copied(self, value: int) -> None:
        self._copy.bytes_copied = value

    @property
    def bytes_resumed(self) -> int:
        """Of bytes_copied, what a resumed move found already copied (metrics count only the rest)."""
        return self._copy.bytes_resumed

    @property
    def bytes_total(self) -> int:
        return self._copy.bytes_total

    @bytes_total.setter
    def bytes_total(self, value: int) -> None:
        self._copy.bytes_total = value

    @property
    def lock_hold_seconds(self) -> float | None:
        """How long the swap held the replica lock (None: it never switched)."""
        return self._swap.lock_hold_seconds

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
        return self._copy.copied_leo

    # ---------------------------------------------------------------- the thread's work

    def run(self) -> MoveOutcome:
        """Called by a ReplicaMoveThread. Never raises: every outcome ends in a done state."""
        t0 = time.monotonic()
        try:
            if self._cancel.is_set():
                raise MoveInterrupted
            self.state = MoveState.COPYING
            self._copy_and_swap()
            self._final = MoveState.COMPLETED
            log.info("moved %s from %s to %s (%d bytes in %.2f s and %d rounds, %.2f s of it paused for busy CPUs; "
                     "replica lock held %.1f ms)", self.tp, self.source_dir, self.destination_dir, self.bytes_copied,
                     time.monotonic() - t0, self.rounds, self._copy.pacer.paused,
                     (self.lock_hold_seconds or 0.0) * 1000)
        except MoveInterrupted:
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
        retired_log, retired_path = self._swap.retired if self._swap.retired is not None else (None, None)
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
        if self._swap.promoted or self._swap.keep_copy:
            return
        try:
            shutil.rmtree(self.move_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete %s: %s (recovery deletes it at the next start)", self.move_path, e)

    def _copy_and_swap(self) -> None:
        source = self.replica.current_log()
        crash_point("move.before_copy")
        self._copy.begin(source)

        while True:
            self._copy.check()
            moved = self._copy.copy_round(source, locked=False)
            self.rounds += 1
            if moved < CAUGHT_UP_BYTES or self.rounds >= MAX_UNLOCKED_ROUNDS:
                break
        # Make the bulk durable outside the lock, so that the lock rarely needs an fsync at all (see the swap).
        self._copy.fsync(self.move_path)
        self._copy.check()
        # Bytes below the source's recovery point were copied and fsynced: no need to CRC-check them again.
        future = Log.open(self.move_path, self.tp, self.log_config,
                          recovery_point=min(source.recovery_point, self._copy.copied_leo))
        try:
            self.state = MoveState.SWAPPING
            self._swap.run(source, future)
        except BaseException:
            if not self._swap.promoted:  # once promoted the copy is the replica's live log
                future.close()
            raise
