"""SaslHandshake and SaslAuthenticate on a connection: the wire side of mover.security.sasl.

They are answered by the connection itself, in request order, because they change what the connection may do next
(like ApiVersions, they never reach the api handlers). A failed authentication is answered after
`connection.failed.authentication.delay.ms` (a timer, not a sleep: the loop keeps serving everyone else) and then
the connection is closed, as Kafka does; a client hammering wrong passwords gets one try per delay per connection.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import TYPE_CHECKING

from mover.security.sasl import Outcome
from mover.wire import DecodeError, ErrorCode, RequestHeader, decode_struct, encode_response
from mover.wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

if TYPE_CHECKING:
    from mover.server.connection import Connection

log = logging.getLogger("mover.security")

_SIZE = struct.Struct(">i")


def admit_sasl(conn: Connection, header: RequestHeader, frame: bytes, offset: int) -> bool:
    """Answer one SaslHandshake or SaslAuthenticate; False when the connection must close after the answers."""
    sasl = conn.sasl
    assert sasl is not None
    api = SASL_HANDSHAKE if header.api_key == SASL_HANDSHAKE.key else SASL_AUTHENTICATE
    version = header.api_version
    try:
        body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
    except DecodeError as e:
        log.warning("connection %s: malformed %s request (%s); closing it", conn.peer, api.name, e)
        return False
    if api is SASL_HANDSHAKE:
        code = sasl.handshake(body["mechanism"], version)
        response = {"error_code": int(code), "mechanisms": sasl.mechanisms}
        conn._queue_done(encode_response(api, version, header.correlation_id, response))
        if code != ErrorCode.NONE:
            log.warning("connection %s: SaslHandshake for %r refused (%s); closing it", conn.peer,
                        body["mechanism"], code.name)
            return False
        return True
    if sasl.raw_tokens:
        outcome = Outcome(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate after a v0 SaslHandshake")
    else:
        outcome = sasl.authenticate(body["auth_bytes"])
    lifetime_ms = _on_outcome(conn, outcome)
    response = {
        "error_code": int(outcome.error),
        "error_message": outcome.message,
        "auth_bytes": outcome.token,
        "session_lifetime_ms": lifetime_ms,
    }
    chunks = encode_response(api, version, header.correlation_id, response)
    if outcome.error == ErrorCode.SASL_AUTHENTICATION_FAILED and conn.listener is not None:
        conn._queue_later(conn.listener.failed_auth_delay_s, chunks)
        return False
    conn._queue_done(chunks)
    return not outcome.failed


def admit_raw_token(conn: Connection, frame: bytes) -> bool:
    """A v0-handshake token: answered with the bare next token; a failure just closes, as Kafka's v0 path does."""
    sasl = conn.sasl
    assert sasl is not None
    outcome = sasl.authenticate(frame)
    _on_outcome(conn, outcome)
    if outcome.failed:
        if conn.listener is not None:
            conn._queue_later(conn.listener.failed_auth_delay_s, None)
        return False
    conn._queue_done([_SIZE.pack(len(outcome.token)) + outcome.token])
    return True


def _on_outcome(conn: Connection, outcome: Outcome) -> int:
    """Apply a finished step to the connection; the session lifetime to announce (ms, 0 = unlimited)."""
    sasl = conn.sasl
    assert sasl is not None
    if outcome.failed:
        log.warning("connection %s: SASL %s authentication failed on listener %s: %s", conn.peer, sasl.mechanism,
                    conn.session.listener, outcome.message)
        return 0
    if not outcome.complete:
        return 0
    conn.session.principal = f"User:{sasl.user}"
    # Authenticated: requests may be as large as socket.request.max.bytes again.
    conn._frames.max_size = conn.server.max_request_size
    reauth_ms = conn.listener.security.reauth_ms if conn.listener is not None else 0
    if reauth_ms > 0:
        conn.session_expires = time.monotonic() + reauth_ms / 1000
    log.info("connection %s: authenticated as %s (%s) on listener %s", conn.peer, conn.session.principal,
             sasl.mechanism, conn.session.listener)
    return reauth_ms
