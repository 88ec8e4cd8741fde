"""The token bucket behind `intra.broker.throttled.rate`, shared by every ReplicaMoveThread.

Kafka's own throttle (a windowed quota that counts bytes after writing them and then backs off for a second) lets a
fresh move burst about eleven seconds' worth of quota and swings from 0.06x to 1.40x of the limit in one-second
windows. This bucket pays *before* the bytes move, so the rate can never run ahead of the budget:

* The bucket holds at most `capacity = rate * burst_seconds` tokens (bytes). An idle bucket fills to capacity, so a
  new move may start with at most that burst.
* A request larger than the capacity waits until the bucket is full and then drives it into debt; the debt is paid
  off before anyone else proceeds. Requests should be small (the movers ask for `chunk_size()` bytes at a time).
* Bound: in any interval of length T, at most `rate * T + capacity + largest single request` bytes are granted.
  With the defaults (burst 0.1 s, chunks of rate/50) a 1-second window holds at most 1.12x the rate.
* Fair: waiters are served strictly in arrival order (a ticket queue), so each of N threads asking for equal chunks
  gets 1/N of the rate.
* `set_rate` takes effect at once, also for threads already waiting: only the head of the queue waits on the clock,
  and it recomputes its wait from the current rate whenever it is woken.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

UNLIMITED = None

# A tenth of a second of burst: small against the 1-second windows operators watch, and long enough that a
# thread's scheduling jitter (a few ms) does not cost throughput.
DEFAULT_BURST_SECONDS = 0.1

# Chunk sizes for callers. 64 KiB is the smallest copy that still keeps copy_file_range efficient; 8 MiB is what
# an unthrottled copy asks for, large enough that the per-call cost vanishes next to the bytes moved.
MIN_CHUNK = 64 * 1024
MAX_CHUNK = 8 * 1024 * 1024


class TokenBucket:
    def __init__(
        self,
        rate_bytes_per_s: float | None = UNLIMITED,
        *,
        burst_seconds: float = DEFAULT_BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst_seconds <= 0:
            raise ValueError("burst_seconds must be positive")
        self._clock = clock
        self._burst_seconds = burst_seconds
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self._rate: float | None = None
        self._tokens = 0.0
        self._stamp = clock()
        self._granted = 0
        self.set_rate(rate_bytes_per_s)

    @property
    def rate(self) -> float | None:
        return self._rate

    @property
    def capacity(self) -> float:
        return float("inf") if self._rate is None else self._rate * self._burst_seconds

    @property
    def granted_bytes(self) -> int:
        """Bytes granted since creation (for metrics and benchmarks)."""
        return self._granted

    def chunk_size(self) -> int:
        """How many bytes a mover should ask for at a time: a fiftieth of a second's worth, within bounds."""
        rate = self._rate
        if rate is None:
            return MAX_CHUNK
        return int(min(MAX_CHUNK, max(MIN_CHUNK, rate / 50)))

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        if rate_bytes_per_s is not None and rate_bytes_per_s <= 0:
            raise ValueError("the throttle rate must be positive (or None for unlimited)")
        with self._cond:
            self._refill()
            if rate_bytes_per_s is None:
                self._tokens = 0.0
            elif self._rate is None:
                # Leaving "unlimited": start with an empty bucket so the new limit holds from this instant.
                self._tokens = 0.0
            else:
                self._tokens = min(self._tokens, rate_bytes_per_s * self._burst_seconds)
            self._rate = float(rate_bytes_per_s) if rate_bytes_per_s is not None else None
            self._cond.notify_all()

    def acquire(self, n: int, *, cancelled: Callable[[], bool] | None = None) -> bool:
        """Block until `n` bytes are paid for. Returns False (nothing paid) if `cancelled()` became true first."""
        if n <= 0:
            return True
        ticket = object()
        with self._cond:
            if self._rate is None and not self._queue:
                self._granted += n
                return True
            self._queue.append(ticket)
            try:
                while True:
                    if cancelled is not None and cancelled():
                        return False
                    if self._queue[0] is ticket:
                        wait = self._try_take(n)
                        if wait is None:
                            return True
                    else:
                        wait = None
                    # Waking at least every 50 ms lets a cancelled mover leave without a notify.
                    self._cond.wait(timeout=0.05 if wait is None else min(wait, 0.05))
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def consume(self, n: int) -> None:
        """Pay for bytes already moved without waiting (the swap's tail under the replica lock): the debt makes
        the next waiters wait, so the long-run rate still holds."""
        with self._cond:
            self._refill()
            if self._rate is not None:
                self._tokens -= n
            self._granted += n

    def refund(self, n: int) -> None:
        """Give back `n` bytes granted but not used (a MoveBudget whose next bucket was cancelled): at most up to
        the bucket's capacity, so a refund never makes a burst larger than an idle bucket's."""
        with self._cond:
            self._refill()
            if self._rate is not None:
                self._tokens = min(self._tokens + n, self._rate * self._burst_seconds)
            self._granted -= n
            self._cond.notify_all()

    def _try_take(self, n: int) -> float | None:
        """Take n tokens if the bucket allows; else return how long to wait. Caller holds the lock."""
        rate = self._rate
        if rate is None:
            self._granted += n
            return None
        self._refill()
        need = min(float(n), rate * self._burst_seconds)
        if self._tokens >= need:
            self._tokens -= n
            self._granted += n
            return None
        return (need - self._tokens) / rate

    def _refill(self) -> None:
        now = self._clock()
        elapsed = now - self._stamp
        self._stamp = now
        if self._rate is not None and elapsed > 0:
            self._tokens = min(self._tokens + elapsed * self._rate, self._rate * self._burst_seconds)
