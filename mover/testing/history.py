"""What a system test's clients did, in the form its checks judge: every record value is unique,
`<producer>-<topic>-<partition>-<seq>-<padding>`, seq counting per producer and partition from 0, so a value read back
says who wrote it and in which order; `Acked` and `Failure` are what a producer was told, `Consumed` what a consumer
read. Producers, consumers, the exactly-once checks and the MoveWatcher all speak these, so they live apart from each.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

TP = tuple[str, int]
VALUE_RE = re.compile(r"^(?P<producer>[\w.]+)-(?P<topic>[\w.]+)-(?P<partition>\d+)-(?P<seq>\d+)-")


def make_value(producer: str, tp: TP, seq: int, pad: int) -> bytes:
    head = f"{producer}-{tp[0]}-{tp[1]}-{seq}-"
    return (head + "x" * max(0, pad - len(head))).encode()


@dataclass(frozen=True)
class Acked:
    """A record its producer got an acknowledgement for: where the broker said it put it, and when."""

    topic: str
    partition: int
    offset: int
    value: bytes
    at: float  # time.monotonic() of the acknowledgement
    # time.monotonic() when it was handed to the client (kafka-python producers): the broker appended it in
    # [sent, at], which is what tells a record written while a move ran from one acknowledged during it.
    sent: float | None = None


@dataclass
class Failure:
    topic: str
    partition: int
    value: bytes
    error: str
    at: float


@dataclass
class Consumed:
    """Per partition, (offset, value) in the order the consumer received them."""

    records: dict[TP, list[tuple[int, bytes]]] = field(default_factory=lambda: defaultdict(list))

    def next_offset(self, tp: TP) -> int:
        got = self.records.get(tp)
        return got[-1][0] + 1 if got else 0

    def count(self) -> int:
        return sum(len(v) for v in self.records.values())


def merge(parts: Iterable[Consumed]) -> Consumed:
    """One view from consumers that read disjoint partitions (one kcat per topic)."""
    out = Consumed()
    for part in parts:
        for tp, records in part.records.items():
            assert tp not in out.records, f"{tp} read by two of the merged consumers"
            out.records[tp] = list(records)
    return out
