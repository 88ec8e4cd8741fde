"""MoveBudget: what one replica move pays for each chunk it copies: the broker-wide bucket
(`replica.alter.log.dirs.io.max.bytes.per.second`) and the buckets of the two dirs it touches
(`mover.log.dir.io.max.bytes.per.second`: the source dir's for the read, the destination's for the write).

It answers the same calls as a TokenBucket (`rate`, `chunk_size`, `acquire`, `consume`), so a move copies exactly as
it did with the one bucket. Each bucket keeps its own guarantees (TokenBucket: paid before the bytes move, FIFO
among its waiters): a chunk goes when every bucket on its path has paid for it, so no dir and not the broker ever
runs ahead of its budget, and two moves out of one dir share that dir's budget between them.

Buckets are always taken in the same order (broker, then the dirs by path) and none is held while waiting for the
next: a waiter holds tokens, never a lock, so two moves crossing the same dirs in opposite directions cannot block
each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from throttle.token_bucket import TokenBucket


class MoveBudget:
    def __init__(self, buckets: Sequence[TokenBucket]) -> None:
        # The same bucket twice (a dir's budget for a move within one dir) would charge it twice for one byte.
        unique: list[TokenBucket] = []
        for b in buckets:
            if all(b is not u for u in unique):
                unique.append(b)
        self.buckets = tuple(unique)

    @property
    def rate(self) -> float | None:
        """The tightest rate on the path (None: none is limited)."""
        rates = [b.rate for b in self.buckets if b.rate is not None]
        return min(rates) if rates else None

    def chunk_size(self) -> int:
        """The smallest chunk any limited bucket asks for: a fiftieth of a second of the tightest budget."""
        return min((b.chunk_size() for b in self.buckets if b.rate is not None),
                   default=self.buckets[0].chunk_size() if self.buckets else 0)

    def acquire(self, n: int, *, cancelled: Callable[[], bool] | None = None) -> bool:
        """Block until every bucket has paid for `n` bytes. False, with what was paid given back, if `cancelled()`
        became true first."""
        paid: list[TokenBucket] = []
        for b in self.buckets:
            if not b.acquire(n, cancelled=cancelled):
                for p in paid:
                    p.refund(n)
                return False
            paid.append(b)
        return True

    def consume(self, n: int) -> None:
        """Pay every bucket without waiting (the swap's tail under the replica lock): the debt slows what comes next."""
        for b in self.buckets:
            b.consume(n)
