"""SaslHandshake and SaslAuthenticate on the wire: decode the request, ask the connection's gate
(mover/server/gate.py, where every rule is), encode its answer.

They are answered by the connection itself, in request order, because they change what the connection may do next
(like ApiVersions, they never reach the api handlers). What an answer does to the connection (send it later, close
after it, run as a new principal) comes back as a `SaslReply` the connection applies: nothing here touches the
connection.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Any

from mover.server.gate import Admission, ConnectionGate, TokenAnswer, Verdict
from mover.wire import Chunk, DecodeError, ErrorCode, RequestHeader, decode_struct, encode_response
from mover.wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

log = logging.getLogger("mover.security")

_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class SaslReply:
    """What the connection does for one SASL request or bare token."""

    chunks: list[Chunk] | None  # the answer; None: nothing is sent
    delay_s: float = 0.0  # send it (and close, if `close`) this much later
    close: bool = False  # close once it is sent
    principal: str | None = None  # authentication completed: requests from now on run as this


_DROP = SaslReply(None, close=True)


def answer_sasl(gate: ConnectionGate, admission: Admission, header: RequestHeader, frame: bytes, offset: int,
                who: str) -> SaslReply:
    """Answer one SaslHandshake or SaslAuthenticate the gate admitted as HANDSHAKE, AUTHENTICATE, REFUSE or
    ILLEGAL. `who` names the connection in log lines."""
    api = SASL_HANDSHAKE if header.api_key == SASL_HANDSHAKE.key else SASL_AUTHENTICATE
    version = header.api_version
    try:
        body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
    except DecodeError as e:
        log.warning("connection %s: malformed %s request (%s); closing it", who, api.name, e)
        return _DROP
    if admission.verdict in (Verdict.REFUSE, Verdict.ILLEGAL):
        close = admission.verdict is Verdict.REFUSE
        log.warning("connection %s: %s: %s%s", who, api.name, admission.reason, "; closing it" if close else "")
        if api is SASL_HANDSHAKE:
            response: dict[str, Any] = {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
                                        "mechanisms": list(gate.rules.mechanisms) if gate.rules else []}
        else:
            response = {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "error_message": admission.reason,
                        "auth_bytes": b"", "session_lifetime_ms": 0}
        return SaslReply(encode_response(api, version, header.correlation_id, response), close=close)
    if api is SASL_HANDSHAKE:
        hs = gate.handshake(body["mechanism"], version)
        if hs.close:
            log.warning("connection %s: SaslHandshake refused (%s: %s); closing it", who, hs.error.name, hs.reason)
        answer = {"error_code": int(hs.error), "mechanisms": hs.mechanisms}
        return SaslReply(encode_response(api, version, header.correlation_id, answer), close=hs.close)
    step = gate.authenticate(body["auth_bytes"])
    _log_step(step, who)
    response = {
        "error_code": int(step.error),
        "error_message": step.message,
        "auth_bytes": step.token,
        "session_lifetime_ms": step.session_lifetime_ms,
    }
    chunks = encode_response(api, version, header.correlation_id, response)
    return SaslReply(chunks, step.delay_s, step.close, step.principal)


def answer_raw_token(gate: ConnectionGate, frame: bytes, who: str) -> SaslReply:
    """A v0-handshake token: answered with the bare next token; a failure closes without an answer (after the
    failed-authentication delay), as Kafka's v0 path does."""
    step = gate.authenticate(frame)
    _log_step(step, who)
    if step.failed:
        return SaslReply(None, step.delay_s, close=True)
    return SaslReply([_SIZE.pack(len(step.token)) + step.token], principal=step.principal)


def _log_step(step: TokenAnswer, who: str) -> None:
    if step.failed:
        log.warning("connection %s: SASL %s authentication failed: %s", who, step.mechanism, step.message)
    elif step.principal is not None:
        log.info("connection %s: authenticated as %s (%s)", who, step.principal, step.mechanism)
