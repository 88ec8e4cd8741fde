"""Request and response headers, and whole-message encode/decode built on them.

Request header v1: api_key i16, api_version i16, correlation_id i32, client_id nullable string (always an i16
length, even in v2). v2 adds a tagged-field section. Response header v0: correlation_id; v1 adds tagged fields.
Which header a message uses follows from its API's flexible versions (`Api.request_header_version`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from mover.wire.chunks import Chunk, frame_length
from mover.wire.codec import decode_struct, encode_framed, encode_struct, tagged_section_length
from mover.wire.cursor import Reader
from mover.wire.errors import DecodeError, EncodeError, UnsupportedRequest
from mover.wire.messages import API_BY_KEY
from mover.wire.schema import Api

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
]

_FIXED_HEADER = struct.Struct(">hhi")
# The fixed part of a request header and the client_id length: read with one unpack per request.
_HEADER_START = struct.Struct(">hhih")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PLACEHOLDER = b"\x00\x00\x00\x00"


class RequestHeader(NamedTuple):
    """Immutable, like the frozen dataclass it was, but built in a third of the time: one is made per request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    correlation_id: int


def _api(api: Api | int) -> Api:
    if isinstance(api, Api):
        return api
    try:
        return API_BY_KEY[api]
    except KeyError:
        raise EncodeError(f"unknown api key {api}") from None


def _framed(chunks: list[Chunk]) -> list[Chunk]:
    size = frame_length(chunks)
    first = chunks[0] if chunks and isinstance(chunks[0], bytes) else None
    if first is not None:
        chunks[0] = _I32.pack(size) + first
    else:
        chunks.insert(0, _I32.pack(size))
    return chunks


def encode_request(
    api: Api | int,
    api_version: int,
    correlation_id: int,
    body: dict[str, Any],
    client_id: str | None = "mover",
) -> list[Chunk]:
    """A framed request (int32 size, header, body) as chunks; `join_chunks` makes bytes of it.

    Raises:
        EncodeError: unknown API, version outside its range, or a body that does not fit the declaration.
    """
    a = _api(api)
    if api_version not in a.valid:
        raise EncodeError(f"{a.name} has no version {api_version}")
    head = bytearray(_FIXED_HEADER.pack(a.key, api_version, correlation_id))
    if client_id is None:
        head += _I16.pack(-1)
    else:
        cid = client_id.encode()
        head += _I16.pack(len(cid)) + cid
    flexible = a.is_flexible(api_version)
    if flexible:
        head.append(0)  # no header tagged fields
    return _framed(encode_struct(a.request, api_version, flexible, body, prefix=bytes(head)))


def decode_request_header(
    frame: bytes | memoryview, apis: dict[int, Api] = API_BY_KEY
) -> tuple[RequestHeader, Api, int]:
    """Read a request header from an unframed request.

    Returns:
        (header, api, offset of the body).

    Raises:
        DecodeError: the header is malformed.
        UnsupportedRequest: readable header, but an API key or version not in `apis`; carries the header.
    """
    size = len(frame)
    if size < _HEADER_START.size:
        raise DecodeError(f"need {_HEADER_START.size} bytes of request header, have {size}")
    api_key, api_version, correlation_id, n = _HEADER_START.unpack_from(frame, 0)
    if n < -1:
        raise DecodeError(f"negative client_id length {n}")
    client_id = None
    offset = _HEADER_START.size
    if n >= 0:
        end = offset + n
        if end > size:
            raise DecodeError(f"need {n} bytes of client_id at offset {offset}, have {size - offset}")
        try:
            client_id = str(frame[offset:end], "utf-8")
        except UnicodeDecodeError:
            raise DecodeError("client_id is not UTF-8") from None
        offset = end
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    api = apis.get(api_key)
    if api is None or api_version not in api.valid:
        raise UnsupportedRequest(header)
    if api_version in api.flexible:
        offset = tagged_section_length(frame, offset)
    return header, api, offset


def decode_request(
    frame: bytes | memoryview, apis: dict[int, Api] = API_BY_KEY
) -> tuple[RequestHeader, dict[str, Any]]:
    """Decode an unframed request: header and body dict.

    Raises:
        DecodeError: malformed.
        UnsupportedRequest: unknown API key or version (header readable).
    """
    header, api, offset = decode_request_header(frame, apis)
    return header, decode_struct(api.request, header.api_version, api.is_flexible(header.api_version), frame, offset)


def encode_response(api: Api | int, api_version: int, correlation_id: int, body: dict[str, Any]) -> list[Chunk]:
    """A framed response (int32 size, header, body) as chunks; record data given as file slices stays opaque.

    Raises:
        EncodeError: version outside the API's range or a body that does not fit the declaration.
    """
    a = _api(api)
    if api_version not in a.valid:
        raise EncodeError(f"{a.name} has no version {api_version}")
    # A placeholder for the frame size, patched once the body is written: one buffer, no second copy for the size.
    head = _PLACEHOLDER + _I32.pack(correlation_id)
    if a.response_header_version(api_version) == 1:
        head += b"\x00"
    return encode_framed(a.response, api_version, api_version in a.flexible, body, head)


def decode_response(
    api: Api | int, api_version: int, frame: bytes | memoryview
) -> tuple[ResponseHeader, dict[str, Any]]:
    """Decode an unframed response whose API and version the caller knows (from the correlation id).

    Raises:
        DecodeError: malformed.
    """
    a = _api(api)
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    r = Reader(mv, 0, len(mv))
    (correlation_id,) = _I32.unpack_from(mv, r.take(4))
    offset = r.pos
    if a.response_header_version(api_version) == 1:
        offset = tagged_section_length(mv, offset)
    body = decode_struct(a.response, api_version, a.is_flexible(api_version), mv, offset)
    return ResponseHeader(correlation_id), body
