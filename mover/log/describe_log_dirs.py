"""DescribeLogDirs: every configured log dir with its usage and the partitions in it, moves' copies included as future
replicas (Kafka's ReplicaManager.describeLogDirs); `LogDirInfo` is one dir's answer, which the api handler encodes.

It reads the LogDirs the LogManager owns (`dirs`, `replicas`, `storage_guard` around each dir's usage) and the
cordons from the live config; it calls nothing above it. No lock is taken: the replicas' grouping by dir and topic
(ReplicaLayout, mover/log/replica_layout.py) is kept between calls while no replica changes place, and each topic's
rows while none of its Logs changes size. Nothing here writes to a log dir.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.errors import KafkaStorageError
from mover.log.log_dirs import LogDirs
from mover.log.replica import layout_version
from mover.log.replica_layout import ReplicaLayout
from mover.storage.log_dir import disk_usage

# One partition of a log dir in DescribeLogDirs: (partition, size, offset_lag, is_future), the field order of the
# wire schema's DescribeLogDirsPartition, so the codec packs the rows without a dict each (mover/wire/plans.py).
PartitionRow = tuple[int, int, int, bool]


@dataclass
class LogDirInfo:
    path: Path
    error_code: int
    topics: dict[str, list[PartitionRow]] = field(default_factory=dict)
    total_bytes: int = -1
    usable_bytes: int = -1
    is_cordoned: bool = False  # KIP-1066, DescribeLogDirs v5


class DescribeLogDirs:
    def __init__(self, config: BrokerConfig, logs: LogDirs) -> None:
        self.config = config
        self._logs = logs
        self._layout: ReplicaLayout | None = None  # the grouping of the replicas, kept between calls
        self._layout_build = threading.Lock()

    def _replica_layout(self) -> ReplicaLayout:
        """The online replicas by dir and topic (mover/log/replica_layout.py): rebuilt only when the layout version
        moved since the last build. The version is read before the replicas are, so a change during the build makes
        the next call build again."""
        layout = self._layout
        version = layout_version()
        if layout is not None and layout.version == version:
            return layout
        # One build at a time: a build points each Log at its new group's watch, and two racing builds could leave
        # a Log ticking the watch of the layout that lost, whose rows would then never be rebuilt.
        with self._layout_build:
            layout = self._layout
            version = layout_version()
            if layout is None or layout.version != version:
                self._layout = layout = ReplicaLayout(version, list(self._logs.replicas.values()))
            return layout

    def describe(self, topics: dict[str, list[int] | None] | None = None) -> list[LogDirInfo]:
        """One entry per configured dir. `topics` None = every partition; {topic: None} = all its partitions.

        Hot at 10,000 partitions (an operator's describe every few seconds, the audit's collect of a fleet): the
        replicas' grouping by dir and topic is kept between calls while no replica changes place
        (`_replica_layout`), and each topic's rows while none of its Logs changes size, no lock."""
        out: dict[Path, LogDirInfo] = {}
        cordoned = self.config.cordoned_dirs()
        for state in self._logs.dirs.values():
            is_cordoned = state.path in cordoned
            if not state.online:
                out[state.path] = LogDirInfo(state.path, KafkaStorageError.code, is_cordoned=is_cordoned)
                continue
            out[state.path] = LogDirInfo(state.path, KafkaStorageError.code, is_cordoned=is_cordoned)
            with self._logs.storage_guard(state.path, "disk usage", reraise=False):
                total, usable = disk_usage(state.path)
                out[state.path] = LogDirInfo(state.path, 0, {}, total, usable, is_cordoned)
        layout = self._replica_layout()
        for path, info in out.items():
            placed = layout.by_dir.get(path) if info.error_code == 0 else None
            if not placed:
                continue
            rows_of = info.topics
            if topics is None:
                for name, group in placed.items():
                    rows_of[name] = group.rows()
                continue
            for name, group in placed.items():
                if name not in topics:
                    continue
                wanted = topics[name]
                rows = group.rows()
                if wanted is not None:
                    rows = [row for row in rows if row[0] in wanted]
                if rows:
                    rows_of[name] = rows
        for replica in layout.moving:
            move, current, tp = replica.move, replica.log, replica.tp
            if move is None or current is None or move.state.done:
                continue
            if topics is not None:
                wanted = topics.get(tp.topic, ())
                if wanted is not None and tp.partition not in wanted:
                    continue
            dest = out.get(move.destination_dir)
            if dest is not None and dest.error_code == 0:
                lag = max(current.log_end_offset - move.copied_log_end_offset(), 0)
                # A new list: the topic's rows may be the ones the group keeps between calls.
                dest.topics[tp.topic] = [*dest.topics.get(tp.topic, ()), (tp.partition, move.bytes_copied, lag, True)]
        return [out[p] for p in self.config.log_dirs]
