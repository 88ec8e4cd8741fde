"""Start-up recovery (KIP-113 "Handle failure that happens when broker is moving data or swapping replica").

scan (observe the disks, read-only) -> plan (pure decision) -> execute (renames, deletions, one log line each).
See docs/recovery.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from pathlib import Path

from recovery.execute import MoveToResume, Offline, RecoveryResult, describe, execute
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
    plan,
)
from recovery.scan import DirObservation, LeoOf, Observation, PartitionCopy, scan

__all__ = [
    "Action",
    "DeleteNow",
    "DirObservation",
    "KeepUntouched",
    "LeoOf",
    "MarkOffline",
    "MoveToResume",
    "Observation",
    "Offline",
    "PartitionCopy",
    "Plan",
    "Promote",
    "RecoveryResult",
    "RenameKafkaFuture",
    "ResumeMove",
    "ScheduleDelete",
    "describe",
    "execute",
    "plan",
    "recover",
    "scan",
]


def recover(
    log_dirs: list[Path],
    *,
    leo_of: LeoOf,
    schedule_delete: Callable[[Path], None],
    logger: logging.Logger,
    offline_dirs: Collection[Path] = (),
) -> RecoveryResult:
    """scan -> plan -> execute, for the daemon's start-up. Never raises an OSError."""
    the_plan = plan(scan(log_dirs, leo_of, offline_dirs=offline_dirs))
    result = execute(the_plan, schedule_delete=schedule_delete, logger=logger)
    logger.info(
        "recovery: %d actions, %d log dirs offline, %d partitions offline, %d moves to resume, %d deletes scheduled",
        len(result.done), len(result.failed_dirs), len(result.offline), len(result.resume), len(result.scheduled),
    )
    return result
