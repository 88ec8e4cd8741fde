"""Kafka's offset checkpoint files (recovery-point-offset-checkpoint and its siblings).

Format (Kafka's CheckpointFile): line 1 the version `0`, line 2 the entry count N, then N lines
`topic partition offset`. An empty file, or one with only the version line, holds no entries: Kafka creates its
checkpoint files empty and reads them so (CheckpointReadBuffer.read).

Crash-safety invariants:
* A checkpoint is replaced atomically (files.atomic_write): `<name>.tmp` is written and fsynced, renamed over
  the old file, and the directory fsynced. A crash leaves the old or the new checkpoint, whole, and possibly a
  stray `<name>.tmp` that is ignored.
* Reading never modifies anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mover.storage.errors import CorruptCheckpointError
from mover.storage.files import atomic_write
from mover.storage.names import TopicPartition

CHECKPOINT_VERSION = 0


def parse_checkpoint(text: str, source: str = "checkpoint") -> dict[TopicPartition, int]:
    lines = text.splitlines()
    if len(lines) < 2 and (not lines or lines[0].strip() == str(CHECKPOINT_VERSION)):
        return {}
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{source}: missing or malformed version and count lines") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{source}: unsupported version {version}")
    body = [line for line in lines[2:] if line.strip()]
    if count < 0 or len(body) != count:
        raise CorruptCheckpointError(f"{source}: expected {count} entries, found {len(body)}")
    entries: dict[TopicPartition, int] = {}
    for line in body:
        fields = line.split()
        if len(fields) != 3:
            raise CorruptCheckpointError(f"{source}: malformed entry {line!r}")
        topic, partition, offset = fields
        try:
            entries[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptCheckpointError(f"{source}: malformed entry {line!r}") from None
    return entries


def format_checkpoint(entries: Mapping[TopicPartition, int]) -> str:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    # Sorted by a key, not by TopicPartition's own ordering, which builds two tuples per comparison.
    rows = sorted((tp.topic, tp.partition, offset) for tp, offset in entries.items())
    lines += [f"{topic} {partition} {offset}" for topic, partition, offset in rows]
    return "\n".join(lines) + "\n"


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file; {} when it does not exist; CorruptCheckpointError when malformed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text") from None
    return parse_checkpoint(text, str(path))


def write_checkpoint(path: Path, entries: Mapping[TopicPartition, int]) -> None:
    """Replace the checkpoint at `path` atomically and durably (see the module docstring)."""
    atomic_write(path, format_checkpoint(entries).encode("utf-8"))
