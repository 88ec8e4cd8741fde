"""Kafka's own start-up rule for the directory names in a log dir, restated: a broker refuses to start beside a
name it cannot parse, so the names moverd leaves in a dir are checked against it (tests/storage without a Kafka,
tests/kafka against the real broker)."""

from __future__ import annotations

import re

# Kafka's UnifiedLog.parseTopicPartitionName (2.x to 4.x): the names a broker starts beside.
_KAFKA_SUFFIXED_DIR = {s: re.compile(rf"^(\S+)-(\S+)\.(\S+){s}$") for s in ("-delete", "-future", "-stray")}


def accepts_partition_dir_name(name: str) -> bool:
    """Whether a Kafka broker starts with a directory of this name in a log dir (UnifiedLog.parseTopicPartitionName):
    a name ending in `-delete`, `-future` or `-stray` must be `<topic>-<partition>.<id>-<suffix>`, anything else
    `<topic>-<partition>` with an integer partition. Otherwise it stops with "... is not in the form of
    topic-partition or topic-partition.uniqueId-delete (if marked for deletion)"."""
    if "-" not in name:
        return False
    for suffix, pattern in _KAFKA_SUFFIXED_DIR.items():
        if name.endswith(suffix):
            if not pattern.match(name):
                return False
            name = name[:name.rindex(".")]
            break
    topic, _, partition = name.rpartition("-")
    if not topic or not partition:
        return False
    try:
        int(partition)
    except ValueError:
        return False
    return True
