"""The token bucket that throttles replica moves (`intra.broker.throttled.rate`)."""

from throttle.token_bucket import UNLIMITED, TokenBucket

__all__ = ["TokenBucket", "UNLIMITED"]
