"""The one poller of the tests and benches: wait for a condition instead of sleeping for a guessed time.

    offset = wait_for(lambda: log.log_end_offset >= 10 and log.log_end_offset, message="10 records appended")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Generous bound for a condition to become true: reaching it means the test failed. It only bounds how long a broken
# test hangs, so it is not tuned to the machine's speed.
WAIT_S = 60.0
# Short enough that a condition met in a millisecond costs little, long enough not to busy a shared 2-core machine.
POLL_INTERVAL_S = 0.01


class WaitTimeout(AssertionError):
    """The condition never became true: an assertion failure of the test that waited."""


def wait_for(condition: Callable[[], T], timeout: float = WAIT_S, message: str = "condition",
             interval: float = POLL_INTERVAL_S) -> T:
    """Poll `condition` until it returns something truthy and return that; raise WaitTimeout naming `message` once
    `timeout` seconds have passed."""
    if isinstance(timeout, str):  # the old helpers took (condition, what): catch a call written that way
        raise TypeError(f"wait_for(condition, timeout, message): timeout is {timeout!r}")
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)
