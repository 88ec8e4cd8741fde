"""Kafka wire protocol, sans-IO: message declarations, one generic codec, headers, framing, error codes.

    from mover.wire import FrameDecoder, decode_request, encode_response, messages

    for frame in decoder.feed(data):              # bytes from the socket
        header, body = decode_request(frame)      # body: dict keyed by snake_case field names
        chunks = encode_response(header.api_key, header.api_version, header.correlation_id, reply)
        # chunks: bytes, plus any FileRegion given as a `records` value (send those with sendfile)

See docs/wire.md.
"""

from __future__ import annotations

from mover.wire import messages
from mover.wire.chunks import Chunk, frame_length, join_chunks, records_length
from mover.wire.codec import decode_struct, encode_struct
from mover.wire.errors import DecodeError, EncodeError, ErrorCode, FrameTooLarge, UnsupportedRequest
from mover.wire.file_region import FileRegion
from mover.wire.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from mover.wire.header import (
    RequestHeader,
    ResponseHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from mover.wire.messages import ALL_APIS, API_BY_KEY
from mover.wire.schema import Api, Array, Field, Struct, Versions
from mover.wire.template import FrameTemplate, frame_template

__all__ = [
    "ALL_APIS",
    "API_BY_KEY",
    "DEFAULT_MAX_FRAME_SIZE",
    "Api",
    "Array",
    "Chunk",
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "Field",
    "FileRegion",
    "FrameDecoder",
    "FrameTemplate",
    "FrameTooLarge",
    "RequestHeader",
    "ResponseHeader",
    "Struct",
    "UnsupportedRequest",
    "Versions",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decode_struct",
    "encode_request",
    "encode_response",
    "encode_struct",
    "frame_length",
    "frame_template",
    "join_chunks",
    "messages",
    "records_length",
]
