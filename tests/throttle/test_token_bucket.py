"""The token bucket under real threads and the real clock.

Only bounds that slowness cannot break are asserted (never more than the budget; fairness as shares of what was
granted): a loaded machine makes the bucket grant less, never more.
"""

from __future__ import annotations

import threading
import time

import pytest

from throttle.token_bucket import MAX_CHUNK, MIN_CHUNK, TokenBucket


def test_unlimited_never_waits() -> None:
    bucket = TokenBucket(None)
    assert bucket.acquire(10**12)
    assert bucket.granted_bytes == 10**12
    assert bucket.chunk_size() == MAX_CHUNK


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0)
    with pytest.raises(ValueError):
        TokenBucket(100).set_rate(-5)


def test_chunk_size_bounds() -> None:
    assert TokenBucket(1000).chunk_size() == MIN_CHUNK
    assert TokenBucket(50 * 2**20).chunk_size() == 50 * 2**20 // 50
    assert TokenBucket(10 * 2**30).chunk_size() == MAX_CHUNK


def _hammer(bucket: TokenBucket, threads: int, seconds: float, chunk: int) -> list[int]:
    counts = [0] * threads
    stop = threading.Event()

    def work(i: int) -> None:
        while not stop.is_set():
            if bucket.acquire(chunk, cancelled=stop.is_set):
                counts[i] += chunk

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(seconds)  # the measured interval itself, not a wait for a condition
    stop.set()
    for t in ts:
        t.join(5)
    return counts


def test_never_exceeds_rate_plus_stated_burst_and_is_fair() -> None:
    rate = 4 * 2**20
    bucket = TokenBucket(rate)
    chunk = bucket.chunk_size()
    t0 = time.monotonic()
    counts = _hammer(bucket, 4, 1.0, chunk)
    elapsed = time.monotonic() - t0
    total = sum(counts)
    # The module's stated bound: rate * T + capacity + one request (the request in flight at the start).
    assert total <= rate * elapsed + bucket.capacity + chunk
    assert total > 0
    for c in counts:
        assert 0.15 * total <= c <= 0.35 * total, counts


def test_set_rate_releases_waiters_at_once() -> None:
    bucket = TokenBucket(1)  # one byte per second
    done = threading.Event()

    def waiter() -> None:
        bucket.acquire(10_000)  # a request above capacity is granted into debt...
        bucket.acquire(10_000)  # ...which this one would have to pay off: hours
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert not done.wait(0.2)
    bucket.set_rate(None)
    assert done.wait(5), "a waiter must see a new rate without waiting out the old one"
    t.join(5)


def test_lowering_the_rate_slows_waiters() -> None:
    bucket = TokenBucket(None)
    bucket.set_rate(1000)
    granted = []

    def waiter() -> None:
        bucket.acquire(100_000)
        granted.append(bucket.acquire(100_000, cancelled=lambda: len(granted) > 0))

    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.3)
    assert t.is_alive(), "100 kB of debt at 1 kB/s cannot be paid off at once"
    granted.append(None)
    t.join(5)
    assert granted[-1] is False


def test_cancel_pays_nothing() -> None:
    bucket = TokenBucket(10)
    assert bucket.acquire(10**9, cancelled=lambda: True) is False
    assert bucket.granted_bytes == 0


def test_consume_creates_debt_that_later_acquires_pay() -> None:
    now = [0.0]
    bucket = TokenBucket(1000, clock=lambda: now[0])
    bucket.consume(500)  # bucket starts empty, so it is 500 bytes in debt
    assert bucket._try_take(50) == pytest.approx(0.55)
    now[0] += 0.55
    assert bucket._try_take(50) is None
