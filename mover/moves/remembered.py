"""RememberedDestinations: the log dir asked for a replica that is not on this broker yet (KIP-113).

An AlterReplicaLogDirs for a partition not here yet (its topic about to be created, say) answers
REPLICA_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION and remembers the dir; when the partition is created it goes
there (if that dir is still online). Kafka keeps these in memory without a bound; here the oldest is forgotten past
MAX_REMEMBERED, so a flood of requests for names that never appear cannot grow the daemon without limit. Not
persisted (nor in Kafka): a restart forgets them. Callers hold the LogManager's lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mover.storage.names import TopicPartition

# Ten times the 10,000 partitions a broker commonly carries.
MAX_REMEMBERED = 100_000


class RememberedDestinations:
    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._by_tp: dict[TopicPartition, Path] = {}  # insertion order = age: the first is evicted first

    def remember(self, tp: TopicPartition, dest: Path) -> None:
        self._by_tp.pop(tp, None)  # re-inserted last: the newest request is the last evicted
        self._by_tp[tp] = dest
        limit = self._limit if self._limit is not None else MAX_REMEMBERED
        while len(self._by_tp) > limit:
            del self._by_tp[next(iter(self._by_tp))]

    def take(self, tp: TopicPartition) -> Path | None:
        """The destination remembered for `tp`, forgotten as it is handed out (the partition is being created)."""
        return self._by_tp.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        self._by_tp.pop(tp, None)

    def forget_dir(self, path: Path) -> None:
        """A dir went offline: nothing may be created there any more."""
        for tp in [tp for tp, dest in self._by_tp.items() if dest == path]:
            del self._by_tp[tp]

    # Mapping-like reads, and `remembered[tp] = dir` for tests and tools that place partitions.
    def __setitem__(self, tp: TopicPartition, dest: Path) -> None:
        self.remember(tp, dest)

    def __getitem__(self, tp: TopicPartition) -> Path:
        return self._by_tp[tp]

    def __contains__(self, tp: object) -> bool:
        return tp in self._by_tp

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._by_tp))

    def __len__(self) -> int:
        return len(self._by_tp)
