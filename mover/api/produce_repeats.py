"""Produce's Route.repeats: one connection's recogniser of a producer sending one batch after another to one
partition, so such a request is spared the generic decode (RequestRepeat, mover/wire/template.py; docs/data-path.md,
"Eighth round").
"""

from __future__ import annotations

from typing import Any

from mover.wire import RequestHeader
from mover.wire.messages import PRODUCE
from mover.wire.template import RequestRepeat

Body = dict[str, Any]

# Repeats a connection learns without a hit before it stops learning: a client whose requests never repeat (several
# partitions in turn) stops paying for learning after a few.
MAX_REPEAT_LEARNS = 4


class ProduceRepeats:
    """The last one-partition Produce request of a connection, learned when two decoded in a row have the same
    length, and matched against every later frame (`Recogniser`, mover/server/routes.py)."""

    __slots__ = ("_learns", "_length", "_repeat")

    def __init__(self) -> None:
        self._repeat: RequestRepeat | None = None
        self._length = -1  # of the last request decoded the usual way
        self._learns = 0  # repeats learned since the last hit

    def match(self, frame: bytes | bytearray) -> tuple[RequestHeader, Body] | None:
        repeat = self._repeat
        if repeat is None:
            return None
        hit = repeat.match(frame)
        if hit is not None:
            self._learns = 0
        return hit

    def saw(self, frame: bytes | bytearray, header: RequestHeader, body: Body) -> None:
        if len(frame) == self._length and self._learns < MAX_REPEAT_LEARNS:
            self._repeat = RequestRepeat.learn(PRODUCE, frame, header, body)  # type: ignore[arg-type]
            self._learns += 1
        self._length = len(frame)
