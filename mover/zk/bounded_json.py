"""JSON from ZooKeeper, and from the files operators give the tools, parsed only when its nesting is bounded.

Anyone who can write a znode can write `[` x 200,000: Python's json parser recurses once per level and raises
RecursionError (not ValueError) past the interpreter's recursion limit, which is shared with the calling thread's
stack; caught or not, it is the wrong place to learn that a znode is malformed. So the depth is measured first, in
C-speed passes over the bytes, and a document nested deeper than MAX_DEPTH is refused with a ValueError like any
other malformed JSON. Kafka's own parser (Jackson's StreamReadConstraints) refuses more than 1000 levels; every
znode Kafka or moverd writes is at most four deep, so a lower bound here refuses nothing real and keeps the parser
well inside Python's limit of 1000 frames wherever it runs. The size needs no bound of its own: ZooKeeper caps a
znode at jute.maxbuffer (1 MiB by default). The tools read their reassignment, topics-to-move, limits and capacity
files through `loads` too, so such a file is one error line ("nested deeper than 512 levels"), not an internal error.
"""

from __future__ import annotations

import json
import operator
from itertools import accumulate, repeat
from typing import Any

MAX_DEPTH = 512

_OPENERS = (b"[", b"{")
# Everything but the four brackets, deleted by bytes.translate.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# After translate: an opener becomes 2 and a closer 0, so "value - 1" is the step of the depth.
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class NestingTooDeepError(ValueError):
    pass


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects outside strings (for text that is not JSON, a number that is at
    least what json's parser would recurse to before it gives up)."""
    # Strings hold brackets that do not nest: drop escaped backslashes, then escaped quotes, and what is left
    # between unescaped quotes is string content (every other piece of a split on '"').
    outside = b"".join(data.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    steps = outside.translate(_STEP, _NOT_BRACKETS)
    return max(accumulate(map(operator.sub, steps, repeat(1))), default=0)


def loads(data: bytes) -> Any:
    """json.loads of UTF-8 bytes. Raises ValueError (UnicodeDecodeError, json's JSONDecodeError or
    NestingTooDeepError) for anything malformed, never RecursionError."""
    text = data.decode("utf-8")
    # Fewer openers than the bound cannot nest deeper than it: the usual znode skips the scan.
    if sum(data.count(o) for o in _OPENERS) > MAX_DEPTH and depth(data) > MAX_DEPTH:
        raise NestingTooDeepError(f"nested deeper than {MAX_DEPTH} levels")
    return json.loads(text)


def reason(e: ValueError) -> str:
    """Why `loads` refused a document, in words for a one-line error."""
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start})"
    return str(e)
