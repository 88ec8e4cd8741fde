"""Kafka 3.7.0's finished copies that are never swapped in (KAFKA-16365, fixed in 3.7.1; docs/kafka-compat.md): a
broker whose AssignmentsManager lost the controller's acknowledgement of a copy's new dir keeps the copy complete
(offset lag 0) beside the live replica, and swaps no move in until it restarts. The trigger is a race inside the
broker (a move started while it still reports its replicas' dirs, e.g. just after it started), so a test that moves
on a real 3.7.0 meets it now and then whatever the code under test does.

Tests forgive that and only that, as an operator would fix it: a broker whose copy has been complete for `grace_s`
without being swapped in is restarted, which swaps its pending copies in. A copy that is not complete is never
forgiven, and the restarts are bounded, so a move that really stalls still fails its test."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mover.admin.client import Client
from mover.admin.log_dir_state import describe_broker

# Kafka swaps a copy in at the move thread's next pass once its lag is 0 (well under a second here); a loaded
# machine's broker can be seconds late, never this late.
GRACE_S = 45.0


@dataclass(frozen=True)
class FutureCopy:
    broker: int
    name: str  # topic-partition
    log_dir: str
    size: int
    offset_lag: int


def future_copies(client: Client, brokers: Iterable[int],
                  topics: dict[str, list[int]] | None = None) -> list[FutureCopy]:
    """Every copy a log-dir move is building on `brokers` (of `topics`; None: every topic)."""
    return [FutureCopy(b, p.name, d.path, p.size, p.offset_lag)
            for b in brokers for d in describe_broker(client, b, topics) for p in d.partitions if p.is_future]


@dataclass
class Unswapped:
    """Restarts (through `restart`) the brokers of copies complete and unswapped for `grace_s`: call `check` from
    a poll. `restarted` lists each broker restarted, in order; past `most` restarts it raises instead."""
    restart: Callable[[int], None]
    say: Callable[[str], None] = print
    grace_s: float = GRACE_S
    most: int = 2
    restarted: list[int] = field(default_factory=list)
    # Each complete copy (broker, partition, dir) and when it was first seen complete. Not forgotten when its lag
    # rises again: a producer writing to the partition makes a stuck copy's lag flicker above 0.
    _complete_since: dict[tuple[int, str, str], float] = field(default_factory=dict)

    def check(self, copies: list[FutureCopy]) -> list[int]:
        now = time.monotonic()
        present = {(c.broker, c.name, c.log_dir) for c in copies}
        self._complete_since = {k: t for k, t in self._complete_since.items() if k in present}
        for c in copies:
            if c.offset_lag == 0:
                self._complete_since.setdefault((c.broker, c.name, c.log_dir), now)
        stuck = sorted({b for (b, _, _), t in self._complete_since.items() if now - t >= self.grace_s})
        if not stuck:
            return []
        if len(self.restarted) + len(stuck) > self.most:
            raise AssertionError(f"copies complete but not swapped in on brokers {stuck} after {self.restarted} "
                                 f"restarted already: {copies}")
        self.say(f"Kafka 3.7.0 left complete copies unswapped on brokers {stuck} (KAFKA-16365): {copies}; "
                 f"restarting them")
        for b in stuck:
            self.restart(b)
        self.restarted += stuck
        self._complete_since.clear()
        return stuck
