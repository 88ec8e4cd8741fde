"""MoveOutcomes: what a move's end means for the log dirs (the moves manager's `on_outcome`, as Kafka's LogManager
finishes replaceCurrentWithFutureLog): after a swap both dirs' checkpoints are rewritten and the retired copy goes to
the delayed delete; the dirs a move found broken go offline; a copy stopped by shutdown is parked under Kafka's
`-future` name; a resumed copy cancelled before it ran is retired.

It works on the LogDirs the LogManager owns (`dirs`, `storage_guard`, `dir_failed`, checkpoints, the delayed deletes)
and calls nothing above it. The moves manager calls `act_on` from a move's pool thread (or from `cancel` for a move
that never ran), before it detaches the move from its Replica; the LogManager's shutdown calls `park_stopped_copy`
for the moves that never started.

Crash-safety invariants:
* Checkpoint files list only the partitions whose current copy lives in that dir; after a swap both dirs'
  checkpoints are rewritten, so the entries follow the partition.
* A move stopped by shutdown leaves its copy under Kafka's `-future` name, made durable before shutdown goes on
  (`park_stopped_copy`): a moverd or a Kafka broker started next resumes it. The copy is at every moment under one of
  two names (`.move`, `-future`) that both mean "a copy to resume".
* A leftover `.move` is renamed to `-delete` before a new move to the same dir can start, and its bytes are deleted
  in the background; a crash in between leaves a `-delete` dir, which recovery deletes at the next start.
"""

from __future__ import annotations

import contextlib
import logging
import os

from mover.log.log_dirs import LogDirs
from mover.moves import MoveOutcome, MoveState, ReplicaMove
from mover.storage.files import atomic_write, fsync_dir
from mover.storage.names import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    PARTITION_METADATA_FILE,
    current_dir_name,
    delete_dir_name,
    future_dir_name,
)

log = logging.getLogger(__name__)


class MoveOutcomes:
    def __init__(self, logs: LogDirs) -> None:
        self._logs = logs

    def act_on(self, outcome: MoveOutcome) -> None:
        """A move's outcome, from its pool thread (or from `cancel` for one that never ran): act on it in storage.
        The moves manager then detaches the move from its Replica, which resumes retention."""
        logs = self._logs
        move = outcome.move
        for path, err in outcome.failed_dirs:
            logs.dir_failed(path, err)
        if outcome.retired_path is not None:
            for d in (move.source_dir, move.destination_dir):
                logs.write_checkpoints(d)
            logs.schedule_delete(outcome.retired_path, outcome.retired_log, delay=True)
        if outcome.state is MoveState.STOPPED:
            self.park_stopped_copy(move)
        if outcome.leftover_copy is not None and os.path.lexists(outcome.leftover_copy):
            # A resumed move's prefix, cancelled before it ran: renamed out of the way at once (a new move to the
            # same dir may start right after), its bytes deleted in the background.
            target = move.destination_dir / delete_dir_name(move.tp)
            with logs.storage_guard(move.destination_dir, f"retire {outcome.leftover_copy}", reraise=False):
                os.rename(outcome.leftover_copy, target)
                logs.schedule_delete(target, None, delay=False)

    def park_stopped_copy(self, move: ReplicaMove) -> None:
        """A move stopped by shutdown leaves its `.move`: rename it to Kafka's `-future` form in the same dir, a
        name both sides resume (recovery renames it back to `.move`; a Kafka broker, 2.x to 4.x, finishes the move
        itself) where a Kafka broker refuses to start beside a `.move` (docs/operations.md). One atomic rename
        within the dir, so the copy is under one of two names that both mean "a copy to resume".

        The copy gets the live copy's `partition.metadata` and `leader-epoch-checkpoint` first (the swap copies
        them only at its end): a KRaft broker refuses to start beside a `-future` without a topic id."""
        logs = self._logs
        path = move.move_path
        dest = move.destination_dir
        state = logs.dirs.get(dest)
        if state is None or not state.online or not os.path.lexists(path):
            return
        kafka_files: dict[str, bytes] = {}
        with logs.storage_guard(move.source_dir, f"read the files of {move.tp}", reraise=False):
            live = move.source_dir / current_dir_name(move.tp)
            for name in (PARTITION_METADATA_FILE, LEADER_EPOCH_CHECKPOINT_FILE):
                with contextlib.suppress(FileNotFoundError):
                    kafka_files[name] = (live / name).read_bytes()
        target = dest / future_dir_name(move.tp)
        with logs.storage_guard(dest, f"park {path}", reraise=False) as failed:
            for name, data in kafka_files.items():
                if not os.path.lexists(path / name):
                    # Whole or absent after a crash (tmp, fsync, rename); moverd's resumed copy overwrites it anyway.
                    atomic_write(path / name, data)
            os.rename(path, target)
            # Durable now, not at the next journal commit: a power cut after the stop must not bring back the
            # `.move` name, which would keep a Kafka broker from starting on this dir.
            fsync_dir(dest)
        if not failed:
            log.info("move of %s stopped: its copy %s is parked as %s for the next start", move.tp, path, target.name)
