"""Request and response headers, and whole-message encode/decode built on them.

Request header v1: api_key i16, api_version i16, correlation_id i32, client_id nullable string (always an i16
length, even in v2). v2 adds a tagged-field section. Response header v0: correlation_id; v1 adds tagged fields.
Which header a message uses follows from its API's flexible versions (`Api.request_header_version`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from mover.wire.codec import Chunk, _Reader, decode_struct, encode_struct, frame_length, tagged_section_length
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
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeader:
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
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    r = _Reader(mv, 0, len(mv))
    api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(mv, r.take(_FIXED_HEADER.size))
    (n,) = _I16.unpack_from(mv, r.take(2))
    if n < -1:
        raise DecodeError(f"negative client_id length {n}")
    client_id = None
    if n >= 0:
        p = r.take(n)
        try:
            client_id = str(mv[p : p + n], "utf-8")
        except UnicodeDecodeError:
            raise DecodeError("client_id is not UTF-8") from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    api = apis.get(api_key)
    if api is None or api_version not in api.valid:
        raise UnsupportedRequest(header)
    offset = r.pos
    if api.is_flexible(api_version):
        offset = tagged_section_length(mv, offset)
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
    head = _I32.pack(correlation_id)
    if a.response_header_version(api_version) == 1:
        head += b"\x00"
    return _framed(encode_struct(a.response, api_version, a.is_flexible(api_version), body, prefix=head))


def decode_response(
    api: Api | int, api_version: int, frame: bytes | memoryview
) -> tuple[ResponseHeader, dict[str, Any]]:
    """Decode an unframed response whose API and version the caller knows (from the correlation id).

    Raises:
        DecodeError: malformed.
    """
    a = _api(api)
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    r = _Reader(mv, 0, len(mv))
    (correlation_id,) = _I32.unpack_from(mv, r.take(4))
    offset = r.pos
    if a.response_header_version(api_version) == 1:
        offset = tagged_section_length(mv, offset)
    body = decode_struct(a.response, api_version, a.is_flexible(api_version), mv, offset)
    return ResponseHeader(correlation_id), body
