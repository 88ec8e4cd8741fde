"""Frame templates: a response encoded once by the declared encoder, then patched per answer; and request repeats,
a request decoded once and recognised again (RequestRepeat, at the end).

A small answer whose layout does not depend on its values (a one-partition Produce answer: the topic name, the
partition and the field set fix every byte except the correlation id and a few fixed-width integers) costs the
generic encoder a walk over its declaration per request. A template is that walk done once: the answer is encoded
by `encode_response` with distinctive sentinel values in the variable fields, each sentinel is located in the
frame, and `fill` writes the real values over them. Nothing is declared twice: the bytes come from the message's
one declaration, and `frame_template` refuses (ValueError) any layout it cannot prove value-independent: a
sentinel found twice or not at all, an answer with a file region, or a second encoding with other values that
the patched template does not reproduce byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from mover.wire.codec import decode_struct
from mover.wire.errors import DecodeError, EncodeError, UnsupportedRequest
from mover.wire.header import decode_request_header, encode_response
from mover.wire.schema import Api

# Fixed-width integer fields a template can patch, by width in bytes.
_FORMATS = {2: struct.Struct(">h"), 4: struct.Struct(">i"), 8: struct.Struct(">q")}
_CORRELATION = struct.Struct(">i")  # at offset 4 of every response frame (after the size)

# Sentinels: byte patterns that do not occur in ordinary answers (names, small counts, offsets), one per slot.
_SENTINELS = {2: (0x5A3C, 0x5B3D, 0x5C3E, 0x5D3F), 4: (0x5A3C1E0F, 0x5B3D1F10, 0x5C3E2011, 0x5D3F2112),
              8: (0x5A3C1E0F7B6D4E21, 0x5B3D1F107C6E4F22, 0x5C3E20117D6F5023, 0x5D3F21127E705124)}
# The check encoding's values: other values of every byte, negative ones included (-1 is Kafka's "unknown").
_CHECK = {2: (-2, 7, -3, 9), 4: (-2, 70000, -3, 9), 8: (-2, 1 << 40, -3, 9)}
_CHECK_CORRELATION = -7
# The correlation id's own sentinel, apart from the 4-byte slots' (a template may use all four of them).
_CORRELATION_SENTINEL = 0x5E402213


class FrameTemplate:
    """One response frame with its correlation id and `widths` integer slots left to fill."""

    __slots__ = ("_frame", "_slots")

    def __init__(self, frame: bytes, slots: list[tuple[struct.Struct, int]]) -> None:
        self._frame = frame
        self._slots = slots

    def fill(self, correlation_id: int, *values: int) -> bytes:
        """The frame with these values; byte-equal to encoding the same answer with `encode_response`.

        Raises:
            EncodeError: a value out of its field's range (as the encoder would).
        """
        buf = bytearray(self._frame)
        try:
            _CORRELATION.pack_into(buf, 4, correlation_id)
            for (fmt, offset), value in zip(self._slots, values, strict=True):
                fmt.pack_into(buf, offset, value)
        except (struct.error, ValueError) as e:
            raise EncodeError(f"template value out of range: {e}") from None
        return bytes(buf)


def frame_template(api: Api, version: int, make_body: Callable[..., dict[str, Any]],
                   widths: tuple[int, ...]) -> FrameTemplate:
    """The template of `make_body(*values)` at `version`, whose fixed-width integer fields (`widths` bytes each,
    at most four of a width) take `values`.

    Raises:
        ValueError: the answer's layout cannot be shown to be independent of the values (see the module docstring).
        EncodeError: `make_body` does not fit the declaration.
    """
    counts: dict[int, int] = {}
    sentinels: list[int] = []
    checks: list[int] = []
    for w in widths:
        if w not in _FORMATS:
            raise ValueError(f"no {w}-byte integer slot")
        k = counts[w] = counts.get(w, -1) + 1
        if k >= len(_SENTINELS[w]):
            raise ValueError(f"more than {len(_SENTINELS[w])} {w}-byte slots")
        sentinels.append(_SENTINELS[w][k])
        checks.append(_CHECK[w][k])
    frame = _one_chunk(encode_response(api, version, _CORRELATION_SENTINEL, make_body(*sentinels)))
    if _CORRELATION.unpack_from(frame, 4)[0] != _CORRELATION_SENTINEL:
        raise ValueError("the correlation id is not where a response frame has it")
    slots = []
    for w, s in zip(widths, sentinels, strict=True):
        pattern = _FORMATS[w].pack(s)
        at = frame.find(pattern)
        if at < 0 or frame.find(pattern, at + 1) >= 0:
            raise ValueError(f"sentinel {s:#x} not found exactly once: not a patchable {w}-byte field")
        slots.append((_FORMATS[w], at))
    template = FrameTemplate(frame, slots)
    expected = _one_chunk(encode_response(api, version, _CHECK_CORRELATION, make_body(*checks)))
    if template.fill(_CHECK_CORRELATION, *checks) != expected:
        raise ValueError(f"{api.name} v{version}: the layout depends on the values; no template")
    return template


def _one_chunk(chunks: list[Any]) -> bytes:
    if len(chunks) != 1 or not isinstance(chunks[0], bytes):
        raise ValueError("only answers encoded as one bytes chunk have templates")
    return chunks[0]


# ----------------------------------------------------------------------------------------------- request repeats

# Bytes flipped to make the probe of RequestRepeat.learn: every byte of the records becomes another byte.
_FLIP = bytes(b ^ 0xFF for b in range(256))
_IMMUTABLE = (int, str, bytes, bool, float)


class RequestRepeat:
    """A one-partition Produce request decoded once, recognised again when a later frame on the same connection has
    the same bytes but for its correlation id and its records (a client sending one record batch after another):
    `match` then gives the header and body `decode_request_header` and `decode_struct` would, without walking the
    declaration again. `learn` refuses (None) whatever it cannot prove: more than one topic or partition, records
    it cannot place, a mutable value outside the path to the records (each match shares the others), or a probe
    (the frame with every records byte changed) that does not decode to the same request with the changed records.
    Placed records are all a later match relies on: bytes before them equal, the parser reaches them at the same
    offset and reads as many, and the same bytes after them parse the same way."""

    __slots__ = ("_body", "_end", "_head", "_header", "_length", "_mid", "_part", "_start", "_tail", "_topic")

    def __init__(self, frame: bytes, start: int, end: int, header: Any, body: dict[str, Any]) -> None:
        self._length = len(frame)
        self._head = frame[:4]  # api key and version; the correlation id (4:8) differs per request
        self._mid = frame[8:start]
        self._tail = frame[end:]
        self._start, self._end = start, end
        self._header = header
        # Copies without the path to the records: a connection keeps this until its next learn, and must not keep
        # the first request's records (up to 64 KiB) alive for that long.
        topic = body["topic_data"][0]
        self._body = {k: v for k, v in body.items() if k != "topic_data"}
        self._topic = {k: v for k, v in topic.items() if k != "partition_data"}
        self._part = {k: v for k, v in topic["partition_data"][0].items() if k != "records"}

    @classmethod
    def learn(cls, api: Api, frame: bytes, header: Any, body: dict[str, Any]) -> RequestRepeat | None:
        """The repeat of this decoded one-partition Produce request, or None."""
        if type(frame) is not bytes:
            return None
        topics = body.get("topic_data")
        if type(topics) is not list or len(topics) != 1 or type(topics[0]) is not dict:
            return None
        parts = topics[0].get("partition_data")
        if type(parts) is not list or len(parts) != 1 or type(parts[0]) is not dict:
            return None
        records = parts[0].get("records")
        if type(records) is not bytes or not records:
            return None
        for d, path in ((body, "topic_data"), (topics[0], "partition_data"), (parts[0], "records")):
            if any(k != path and v is not None and type(v) not in _IMMUTABLE for k, v in d.items()):
                return None
        start = frame.rfind(records)
        end = start + len(records)
        if start < 8:
            return None
        probe_records = records.translate(_FLIP)
        probe = frame[:start] + probe_records + frame[end:]
        try:
            probe_header, _, offset = decode_request_header(probe)
            probe_body = decode_struct(api.request, header.api_version, api.is_flexible(header.api_version), probe,
                                       offset)
        except (DecodeError, UnsupportedRequest):
            return None
        repeat = cls(frame, start, end, header, body)
        if probe_header != header or probe_body != repeat._rebuild(probe_records):
            return None
        return repeat

    def match(self, frame: bytes | bytearray) -> tuple[Any, dict[str, Any]] | None:
        """(header, body) of `frame` if it repeats the learned request, else None. The body is new down to the
        partition, so a handler may change it; the records are the frame's."""
        start, end = self._start, self._end
        if (len(frame) != self._length or type(frame) is not bytes or frame[:4] != self._head
                or frame[end:] != self._tail or frame[8:start] != self._mid):
            return None
        header = self._header._replace(correlation_id=_CORRELATION.unpack_from(frame, 4)[0])
        return header, self._rebuild(frame[start:end])

    def _rebuild(self, records: bytes) -> dict[str, Any]:
        part = self._part.copy()
        part["records"] = records
        topic = self._topic.copy()
        topic["partition_data"] = [part]
        body = self._body.copy()
        body["topic_data"] = [topic]
        return body
