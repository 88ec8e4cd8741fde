"""The token buckets that throttle replica moves: the broker's (`intra.broker.throttled.rate`) and each log dir's
(`mover.log.dir.io.max.bytes.per.second`), and the MoveBudget a move pays them through."""

from throttle.budget import MoveBudget
from throttle.token_bucket import UNLIMITED, TokenBucket

__all__ = ["MoveBudget", "TokenBucket", "UNLIMITED"]
