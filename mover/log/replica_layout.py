"""ReplicaLayout: the online replicas grouped by log dir and topic, as DescribeLogDirs answers them.

Hot at 10,000 partitions (an operator's describe every few seconds, the audit's collect of a fleet). Two things are
kept between calls:
* the grouping itself, rebuilt only when the layout version moved (mover/log/replica.py: every write of a Replica's
  `log`, `log_dir`, `offline_reason` or `move`, and every change of the replica table, takes a new version);
* each group's rows `(partition_index, partition_size, offset_lag, is_future_key)`, rebuilt only when a Log of the
  group changed size since (each group is one `SizeWatch` that its Logs tick, mover/storage/log.py). A broker no one
  produces to answers from the rows it built last; one taking writes on every partition rebuilds each group it wrote.

No lock is taken: a reader reads the version (or the tick) before what it covers, so a change during a build makes
the next call build again, never keeps a stale answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mover.log.replica import Replica
from mover.storage.log import Log, SizeWatch

# (partition_index, partition_size, offset_lag, is_future_key): the field order of the schema's
# DescribeLogDirsPartition, which the codec packs in one call per array (mover/wire/plans.py).
Row = tuple[int, int, int, bool]


class TopicGroup:
    """One topic's online replicas in one dir, and the rows last built from them."""

    __slots__ = ("logs", "watch", "_built")

    def __init__(self) -> None:
        self.logs: list[tuple[int, Log]] = []
        self.watch = SizeWatch()
        self._built: tuple[int, list[Row]] | None = None  # (the watch's tick read before the sizes, the rows)

    def rows(self) -> list[Row]:
        """Every partition's row; shared between calls, so callers never change the list."""
        tick = self.watch.tick
        built = self._built
        if built is not None and built[0] == tick:
            return built[1]
        # offset_lag = high watermark - log end offset: 0 on a single broker, where they are equal (Log).
        rows = [(partition, current.size, 0, False) for partition, current in self.logs]
        self._built = (tick, rows)  # one store: a racing reader sees the old pair or the new one, never a mix
        return rows


class ReplicaLayout:
    """The grouping, true while the layout version reads `version`."""

    __slots__ = ("version", "by_dir", "moving")

    def __init__(self, version: int, replicas: Iterable[Replica]) -> None:
        self.version = version
        self.by_dir: dict[Path, dict[str, TopicGroup]] = {}
        self.moving: list[Replica] = []  # replicas with a move attached
        # id(dir object) -> (the object, its topics): a few distinct dir objects, and Path equality costs
        # microseconds; the object is kept so that a recycled id can never match.
        slots: dict[int, tuple[Path, dict[str, TopicGroup]]] = {}
        for replica in replicas:
            if replica.move is not None:
                self.moving.append(replica)
            current = replica.log
            if current is None or replica.offline_reason is not None:
                continue
            d = replica.log_dir
            slot = slots.get(id(d))
            if slot is None or slot[0] is not d:
                slot = slots[id(d)] = (d, self.by_dir.setdefault(d, {}))
            tp = replica.tp
            group = slot[1].get(tp.topic)
            if group is None:
                group = slot[1][tp.topic] = TopicGroup()
            group.logs.append((tp.partition, current))
            # The Log ticks this group's watch from now on. It is set before any reader of this layout reads the
            # tick, so a size changed before it was set is already in the Log when the rows are built.
            current.size_watch = group.watch
