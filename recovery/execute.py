"""Carry out a recovery Plan: the renames and deletions, one log line per action. Never raises an OSError.

Crash-safety invariants (a kill -9 at any instant of recovery leaves a state the next start recovers the same way):

* Recovery only renames within one log dir, and each rename is atomic: a copy is, at every instant, under exactly
  one name, so the next start sees either the old state or the new one, never a mix.
* Each rename is followed by an fsync of its parent directory before the next action, so the order of the renames
  on disk is the order of the plan, even after a power loss.
* A partition is never without a live copy while a candidate for one exists: rule 2 promotes its winner *before* any
  other copy of the partition is removed. (A crash right after the promotion leaves a live copy plus `.move`s, which
  is rule 1's case, and safe.)
* A `.move` that must go is first renamed to a fresh `-delete` name, then removed. A crash during the removal leaves
  a retired copy (rule 4), never a partial `.move` that could later be resumed or promoted.
* A retired copy under an older moverd's `.delete` name is renamed to a fresh `-delete` name (Kafka's) before it is
  scheduled: it may wait for its delayed delete past a stop, and a Kafka broker refuses to start beside a `.delete`.
  Either name is a retired copy to the next start, so a crash around that rename changes nothing.
* Nothing of an offline partition (MarkOffline) and nothing in a bad log dir is renamed or deleted.
* An OSError while carrying out an action marks that action's log dir as failed; later actions touching that dir
  are skipped. The daemon still starts: the dir is offline, its partitions with it.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mover.storage.files import fsync_dir
from mover.storage.names import DirKind, TopicPartition, delete_dir_name, parse_partition_dir
from recovery.plan import (
    Action,
    DeleteNow,
    KeepUntouched,
    MarkOffline,
    Plan,
    Promote,
    RenameKafkaFuture,
    ResumeMove,
    ScheduleDelete,
)


class Offline(NamedTuple):
    paths: tuple[Path, ...]
    reason: str


class MoveToResume(NamedTuple):
    tp: TopicPartition
    source_dir: Path
    move_path: Path


@dataclass
class RecoveryResult:
    """What the daemon needs after recovery: bad dirs, offline partitions, moves to restart."""

    failed_dirs: dict[Path, str] = field(default_factory=dict)
    offline: dict[TopicPartition, Offline] = field(default_factory=dict)
    resume: list[MoveToResume] = field(default_factory=list)
    scheduled: list[Path] = field(default_factory=list)
    done: list[Action] = field(default_factory=list)
    skipped: list[Action] = field(default_factory=list)


def describe(action: Action) -> str:
    """One line saying what the action does and why."""
    match action:
        case ResumeMove(tp, source_dir, move_path, reason):
            return f"resume move of {tp} from {source_dir} into {move_path} ({reason})"
        case RenameKafkaFuture(tp, path, new_path, reason):
            return f"rename {path} -> {new_path} ({reason})"
        case Promote(tp, path, new_path, reason):
            return f"promote {path} -> {new_path} ({reason})"
        case DeleteNow(tp, path, reason):
            return f"delete {path} now ({reason})"
        case ScheduleDelete(tp, path, reason):
            if _is_legacy_delete(path):
                return f"schedule delete of {path}, renamed to Kafka's -delete form first ({reason})"
            return f"schedule delete of {path} ({reason})"
        case MarkOffline(tp, paths, reason):
            return f"partition {tp} offline, untouched: {', '.join(map(str, paths))} ({reason})"
        case KeepUntouched(tp, path, reason):
            return f"keep {path} untouched ({reason})"
    raise TypeError(f"not a recovery action: {action!r}")


def touched_dirs(action: Action) -> tuple[Path, ...]:
    """The log dirs an action changes or depends on."""
    match action:
        case ResumeMove(_, source_dir, move_path, _):
            return (source_dir, move_path.parent)
        case MarkOffline() | KeepUntouched():
            return ()
        case _:
            return (action.path.parent,)


def execute(
    plan: Plan,
    *,
    schedule_delete: Callable[[Path], None],
    logger: logging.Logger,
) -> RecoveryResult:
    result = RecoveryResult(failed_dirs=dict(plan.bad_dirs))
    for path, error in plan.bad_dirs.items():
        logger.error("recovery: log dir %s is offline: %s", path, error)
    for action in plan:
        failed = [d for d in touched_dirs(action) if d in result.failed_dirs]
        if failed:
            _skip(action, failed[0], result, logger)
            continue
        try:
            _apply(action, schedule_delete, result)
        except OSError as e:
            failing = action.path.parent if not isinstance(action, ResumeMove) else action.source_dir
            error = f"{type(e).__name__}: {e}"
            logger.error("recovery: %s failed: %s; log dir %s is offline", describe(action), error, failing)
            result.failed_dirs[failing] = error
            _skip(action, failing, result, logger, logged=True)
            continue
        result.done.append(action)
        level = logging.WARNING if isinstance(action, MarkOffline | KeepUntouched) else logging.INFO
        logger.log(level, "recovery: %s", describe(action))
    _settle_failed_dirs(result)
    return result


def _settle_failed_dirs(result: RecoveryResult) -> None:
    """A dir that failed after some of its actions were done takes those partitions offline with it."""
    for action in result.done:
        if isinstance(action, Promote) and action.new_path.parent in result.failed_dirs:
            result.offline[action.tp] = Offline((action.new_path,), f"log dir {action.new_path.parent} failed")
    for move in list(result.resume):
        if move.source_dir in result.failed_dirs:
            result.resume.remove(move)
            result.offline[move.tp] = Offline((move.source_dir, move.move_path),
                                              f"log dir {move.source_dir} of the live copy failed")
        elif move.move_path.parent in result.failed_dirs:
            # The live copy is fine; only the move's destination is gone, so the move is not resumed.
            result.resume.remove(move)


def _apply(action: Action, schedule_delete: Callable[[Path], None], result: RecoveryResult) -> None:
    match action:
        case Promote(_, path, new_path, _) | RenameKafkaFuture(_, path, new_path, _):
            _rename(path, new_path)
        case DeleteNow(tp, path, _):
            retired = path.parent / delete_dir_name(tp)
            # Retire it under a `-delete` name first, so a crash mid-removal leaves no partial `.move`.
            _rename(path, retired)
            shutil.rmtree(retired)
        case ScheduleDelete(tp, path, _):
            if _is_legacy_delete(path):
                # Kafka's name, in case the daemon stops before the delayed delete (see the invariants above).
                retired = path.parent / delete_dir_name(tp)
                _rename(path, retired)
                path = retired
            schedule_delete(path)
            result.scheduled.append(path)
        case ResumeMove(tp, source_dir, move_path, _):
            result.resume.append(MoveToResume(tp, source_dir, move_path))
        case MarkOffline(tp, paths, reason):
            result.offline[tp] = Offline(paths, reason)
        case KeepUntouched():
            pass


def _skip(action: Action, failed_dir: Path, result: RecoveryResult, logger: logging.Logger, *,
          logged: bool = False) -> None:
    result.skipped.append(action)
    if not logged:
        logger.warning("recovery: skipped, log dir %s failed: %s", failed_dir, describe(action))
    # A partition whose live copy could not be made or used is offline, not silently missing.
    if isinstance(action, Promote):
        result.offline[action.tp] = Offline((action.path,), f"promotion failed: log dir {failed_dir} failed")
    elif isinstance(action, ResumeMove) and failed_dir == action.source_dir:
        result.offline[action.tp] = Offline((action.source_dir, action.move_path),
                                            f"log dir {failed_dir} of the live copy failed")


def _is_legacy_delete(path: Path) -> bool:
    parsed = parse_partition_dir(path.name)
    return parsed is not None and parsed.kind is DirKind.LEGACY_DELETE


def _rename(path: Path, new_path: Path) -> None:
    if os.path.lexists(new_path):
        # os.rename silently replaces an empty directory: refuse rather than overwrite anything.
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(new_path))
    os.rename(path, new_path)
    # Durable before the next action runs, so the on-disk order of renames is the plan's order.
    fsync_dir(new_path.parent)
