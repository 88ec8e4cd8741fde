"""Decide, from an Observation alone, what start-up recovery does. Pure: no I/O, no clock, no randomness.

KIP-113's four rules, per partition (all copies of it grouped across every log dir):
  1. a live `topic-partition` and a `.move` (or Kafka `-future`) on another good dir: resume the move;
  2. a `.move`, no live copy on any good dir, no bad dir: promote the `.move` (or, when retired copies of the same
     partition survive too, the copy with the highest log end offset; ties go to the `.move`);
  3. a `.move`, no live copy on any good dir, a bad dir exists: the partition is offline, nothing of it is touched;
  4. retired copies (`-delete`, which Kafka and moverd write, and an older moverd's `.delete`): scheduled for
     asynchronous deletion (an old `.delete` is first given the `-delete` name, recovery/execute.py).
Plus the cases the KIP does not name: see docs/recovery.md ("Beyond the four rules").

Actions of one partition come in the order that is crash-safe to execute (see recovery/execute.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mover.storage.names import DirKind, TopicPartition, current_dir_name, move_dir_name
from recovery.scan import DELETE_KINDS, MOVE_KINDS, Observation, PartitionCopy


@dataclass(frozen=True)
class ResumeMove:
    """Restart copying the live copy in `source_dir` into `move_path` (rule 1); the daemon's move does it."""

    tp: TopicPartition
    source_dir: Path
    move_path: Path
    reason: str = "rule 1: live copy and .move on good dirs"


@dataclass(frozen=True)
class RenameKafkaFuture:
    """Rename the real broker's `-future` copy to our `.move` name in the same dir, so our move can resume it."""

    tp: TopicPartition
    path: Path
    new_path: Path
    reason: str = "a Kafka -future copy becomes our .move"


@dataclass(frozen=True)
class Promote:
    """Rename a copy to `topic-partition` in its own dir: it becomes the live copy (rule 2)."""

    tp: TopicPartition
    path: Path
    new_path: Path
    reason: str = "rule 2: .move and no live copy anywhere"


@dataclass(frozen=True)
class DeleteNow:
    """Remove a `.move`/`-future` copy that must go (it duplicates data a live or promoted copy has)."""

    tp: TopicPartition
    path: Path
    reason: str


@dataclass(frozen=True)
class ScheduleDelete:
    """Hand a retired copy to the daemon, which deletes it after log.segment.delete.delay.ms (rule 4)."""

    tp: TopicPartition
    path: Path
    reason: str = "rule 4: retired copy"


@dataclass(frozen=True)
class MarkOffline:
    """The partition stays offline; none of `paths` is touched."""

    tp: TopicPartition
    paths: tuple[Path, ...]
    reason: str


@dataclass(frozen=True)
class KeepUntouched:
    """Leave a copy exactly as it is, and say so (e.g. a Kafka `-stray`)."""

    tp: TopicPartition
    path: Path
    reason: str


Action = ResumeMove | RenameKafkaFuture | Promote | DeleteNow | ScheduleDelete | MarkOffline | KeepUntouched


@dataclass(frozen=True)
class Plan:
    """What recovery will do: the actions in execution order, and the log dirs found bad (offline) by the scan."""

    actions: tuple[Action, ...]
    bad_dirs: dict[Path, str] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Action]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)


def plan(observation: Observation) -> Plan:
    dir_order = {d.path: i for i, d in enumerate(observation.dirs)}
    bad = observation.bad_dirs
    actions: list[Action] = []
    for tp, copies in observation.by_partition().items():
        actions += _plan_partition(tp, copies, bad, dir_order)
    return Plan(tuple(actions), dict(bad))


def _plan_partition(
    tp: TopicPartition, copies: tuple[PartitionCopy, ...], bad: dict[Path, str], dir_order: dict[Path, int]
) -> list[Action]:
    currents = [c for c in copies if c.kind is DirKind.CURRENT]
    moves = [c for c in copies if c.kind in MOVE_KINDS]
    deletes = [c for c in copies if c.kind in DELETE_KINDS]
    strays = [
        KeepUntouched(tp, c.path, "Kafka -stray copy: kept for the operator, never read or deleted")
        for c in copies
        if c.kind is DirKind.KAFKA_STRAY
    ]

    if len(currents) >= 2:
        # What a crash inside the real Kafka's swap leaves. Either copy may be the newer one, so choosing would
        # risk data: nothing is touched, the operator decides (each copy's offset is in the reason).
        ordered = currents + [c for c in copies if c.kind is not DirKind.CURRENT]
        offsets = ", ".join(f"{c.path} leo={c.leo}" for c in currents)
        return [MarkOffline(tp, tuple(c.path for c in ordered), f"{len(currents)} live copies: {offsets}")]

    if len(currents) == 1:
        return _with_current(tp, currents[0], moves, deletes, dir_order) + strays

    if moves and bad:
        # Rule 3: the live copy may be on a bad dir and newer than the .move; touching anything could lose it.
        dirs = ", ".join(str(p) for p in bad)
        return [MarkOffline(tp, tuple(c.path for c in copies),
                            f"rule 3: no live copy on a good dir and bad log dir(s) {dirs}")]

    if moves:
        return _promote(tp, moves, deletes, copies, dir_order) + strays

    return [ScheduleDelete(tp, c.path) for c in deletes] + strays


def _with_current(
    tp: TopicPartition,
    current: PartitionCopy,
    moves: list[PartitionCopy],
    deletes: list[PartitionCopy],
    dir_order: dict[Path, int],
) -> list[Action]:
    """Rule 1 (and rule 4 for the retired copies). The live copy is the truth; every `.move` is a prefix of it."""
    actions: list[Action] = []
    elsewhere = [m for m in moves if m.log_dir != current.log_dir]
    # Ours before Kafka's (this daemon wrote it last), then the furthest along, then the first configured dir.
    elsewhere.sort(key=lambda m: (m.kind is not DirKind.MOVE, -_leo(m), dir_order[m.log_dir], m.path.name))
    keep = elsewhere[0] if elsewhere else None
    # Losers first: a dropped copy may hold the very name the kept -future is renamed to.
    for m in moves:
        if m.log_dir == current.log_dir:
            actions.append(DeleteNow(tp, m.path, f"copy in the same dir as the live copy {current.path}"))
        elif m is not keep:
            actions.append(DeleteNow(tp, m.path, f"another copy of the partition, {keep.path if keep else ''}, "
                                                 "is resumed instead"))
    if keep is not None:
        move_path = keep.log_dir / move_dir_name(tp)
        if keep.kind is DirKind.KAFKA_FUTURE:
            actions.append(RenameKafkaFuture(tp, keep.path, move_path))
        actions.append(ResumeMove(tp, current.log_dir, move_path))
    actions += [ScheduleDelete(tp, d.path) for d in deletes]
    return actions


_PREFERENCE = {DirKind.MOVE: 0, DirKind.KAFKA_FUTURE: 1, DirKind.DELETE: 2, DirKind.LEGACY_DELETE: 2}


def _promote(
    tp: TopicPartition,
    moves: list[PartitionCopy],
    deletes: list[PartitionCopy],
    copies: tuple[PartitionCopy, ...],
    dir_order: dict[Path, int],
) -> list[Action]:
    """Rule 2, never losing data: among the `.move`s/`-future`s and the retired copies, promote the longest copy.

    Every retired copy is a candidate, Kafka's `-delete` included: moverd's swap retires the source under that
    name while it still serves appends (the renames run outside the replica lock), so after a crash between the
    retirement and the switch to the copy the `-delete` is the longer copy (or after a power cut). The real
    broker renames its `-future` in before it retires the source, so a `-delete` of Kafka's sits beside a
    `.move`/`-future` with no live copy only after a partition delete interrupted mid-way; promoting it by offset
    then keeps the longer of two copies of the same partition, as before."""
    candidates = moves + deletes
    if len(candidates) == 1:
        winner = candidates[0]
        reason = "rule 2: .move and no live copy anywhere"
    else:
        unknown = [c for c in candidates if c.leo is None]
        if unknown:
            return [MarkOffline(tp, tuple(c.path for c in copies),
                                "rule 2 cannot choose: log end offset unreadable for "
                                + ", ".join(str(c.path) for c in unknown))]
        candidates.sort(key=lambda c: (-_leo(c), _PREFERENCE[c.kind], dir_order[c.log_dir], c.path.name))
        winner = candidates[0]
        reason = "rule 2: highest log end offset among " + ", ".join(f"{c.path.name}@{c.log_dir}={c.leo}"
                                                                     for c in candidates)
    # The winner becomes live first: a crash after any later step still finds a live copy.
    actions: list[Action] = [Promote(tp, winner.path, winner.log_dir / current_dir_name(tp), reason)]
    for m in moves:
        if m is not winner:
            actions.append(DeleteNow(tp, m.path, f"{winner.path} was promoted instead (log end offset "
                                                 f"{winner.leo} >= {m.leo})"))
    actions += [ScheduleDelete(tp, d.path) for d in deletes if d is not winner]
    return actions


def _leo(copy: PartitionCopy) -> int:
    """An unknown offset sorts below every known one."""
    return copy.leo if copy.leo is not None else -1
