"""MoveBudget: a move pays the broker's bucket and the buckets of the dirs it reads and writes, under real threads.

As in test_token_bucket.py, only bounds a loaded machine cannot break are asserted: never more than a budget."""

from __future__ import annotations

import threading
import time

from throttle.budget import MoveBudget
from throttle.token_bucket import MIN_CHUNK, TokenBucket


def _copy(budget: MoveBudget, stop: threading.Event, counted: list[int]) -> None:
    while not stop.is_set():
        n = budget.chunk_size()
        if budget.acquire(n, cancelled=stop.is_set):
            counted[0] += n


def test_two_moves_out_of_one_dir_share_its_budget_and_each_destination_keeps_its_own() -> None:
    """d1 -> d2 and d1 -> d3 at once: d1 (read by both) holds its budget in total, d2 and d3 each theirs, the broker's
    is the sum it allows."""
    broker = TokenBucket(None)
    d1, d2, d3 = TokenBucket(4 * 2**20), TokenBucket(3 * 2**20), TokenBucket(1 * 2**20)
    moves = [MoveBudget([broker, d1, d2]), MoveBudget([broker, d1, d3])]
    counted = [[0], [0]]
    stop = threading.Event()
    threads = [threading.Thread(target=_copy, args=(m, stop, c)) for m, c in zip(moves, counted, strict=True)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(1.5)  # the measured interval itself
    stop.set()
    for t in threads:
        t.join(5)
    elapsed = time.monotonic() - t0
    into_d2, into_d3 = counted[0][0], counted[1][0]

    def bound(bucket: TokenBucket) -> float:  # TokenBucket's stated bound: rate * T + capacity + one request
        assert bucket.rate is not None
        return bucket.rate * elapsed + bucket.capacity + bucket.chunk_size()

    assert into_d2 <= bound(d2) and into_d3 <= bound(d3)
    assert into_d2 + into_d3 <= bound(d1) + d1.chunk_size()
    assert d1.granted_bytes == into_d2 + into_d3 == broker.granted_bytes
    assert into_d2 > 0 and into_d3 > 0


def test_rate_and_chunk_are_the_tightest_and_one_bucket_is_paid_once() -> None:
    broker, d1 = TokenBucket(None), TokenBucket(10 * 2**20)
    budget = MoveBudget([broker, d1, d1])  # a move within one dir pays that dir once per byte
    assert budget.buckets == (broker, d1)
    assert budget.rate == 10 * 2**20 and budget.chunk_size() == d1.chunk_size()
    assert MoveBudget([TokenBucket(None)]).rate is None
    assert MoveBudget([TokenBucket(None), TokenBucket(1000)]).chunk_size() == MIN_CHUNK


def test_a_cancelled_acquire_gives_back_what_the_first_buckets_paid() -> None:
    first, second = TokenBucket(1_000_000), TokenBucket(1000)
    time.sleep(0.11)  # let `first` fill to its capacity (0.1 s of its rate)
    second.consume(10_000)  # deep in debt: the next acquire waits ~10 s
    budget = MoveBudget([first, second])
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert not budget.acquire(50_000, cancelled=cancel.is_set)
    assert first.granted_bytes == 0
