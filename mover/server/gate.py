"""The rules of one client connection, in one place: what a client may ask at each point, and what each SASL step
does to the connection (sans-IO, as h11's _state.py keeps HTTP's rules in one table).

The connection (mover/server/connection.py) reads frames and decodes headers; before it routes a request it asks
`ConnectionGate.admit(api_key)`, and it hands SaslHandshake and SaslAuthenticate (or a v0 handshake's bare tokens)
to `handshake()` / `authenticate()`, whose answers say what to send, when, whether to close and who the connection
now runs as. The gate does no I/O, reads no clock but the one it is given and logs nothing: every decision is a
return value, so every rule is tested as a table (tests/server/test_gate.py) without sockets.

Phases (Kafka's SaslServerAuthenticator states, plus the listener without SASL and KIP-368's expiry):

    OPEN            no SASL on this listener: every request is routed
    HANDSHAKE   --SaslHandshake v1--> AUTHENTICATE --SaslAuthenticate (complete)--> AUTHENTICATED
                --SaslHandshake v0--> RAW_TOKENS   --bare token (complete)-------> AUTHENTICATED
    AUTHENTICATED --SaslHandshake v1, same mechanism--> REAUTHENTICATE --complete, same user--> AUTHENTICATED
    AUTHENTICATED --session lifetime over--> EXPIRED --SaslHandshake v1--> REAUTHENTICATE
    any step refused or failed --> CLOSED (the answer, if any, is sent first; then the connection closes)

`_ADMISSION` below is the whole admission policy: a request kind in a phase is routed, starts a SASL step, is
answered ILLEGAL_SASL_STATE, or closes the connection unanswered. Where it differs from Kafka it says so.

A run of requests read together may be admitted at once, ahead of handling the first of them (`admits_runs`, for a
route's `fast_many`), only where no request of the run can change what the gate admits: OPEN, a listener without
SASL (with SASL a request could be a SASL step, and a session may expire between two of them).

Listener-wide limits (max.connections, max.connections.per.ip, queued.max.request.bytes) are decided before a
connection exists, by mover/security/limits.py at accept; this gate is one connection's.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from mover.security.sasl import Outcome
from mover.wire.errors import ErrorCode
from mover.wire.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE

if TYPE_CHECKING:
    from mover.security.listener import ListenerContext


class Phase(enum.Enum):
    OPEN = "open"  # a listener without SASL
    HANDSHAKE = "handshake"  # SASL, nothing chosen yet
    AUTHENTICATE = "authenticate"  # mechanism chosen by a v1 handshake: SaslAuthenticate rounds
    RAW_TOKENS = "raw-tokens"  # mechanism chosen by a v0 handshake: the next frames are bare tokens
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "reauthenticate"  # KIP-368: SaslAuthenticate rounds on an authenticated connection
    EXPIRED = "expired"  # authenticated, but the session lifetime is over: only re-authentication may follow
    CLOSED = "closed"  # refused or failed: nothing more is admitted


class Kind(enum.Enum):
    """What the gate needs to know of a request: its api key, reduced to the four cases the rules tell apart."""

    API_VERSIONS = "ApiVersions"
    SASL_HANDSHAKE = "SaslHandshake"
    SASL_AUTHENTICATE = "SaslAuthenticate"
    OTHER = "any other API"
    TOKEN = "a bare token"  # a frame without a request header, after a v0 handshake


class Verdict(enum.Enum):
    SERVE = "serve"  # route it (ApiVersions: the server's own answer)
    HANDSHAKE = "handshake"  # decode it, then `handshake()`
    AUTHENTICATE = "authenticate"  # decode it (or take the bare frame), then `authenticate()`
    REFUSE = "refuse"  # answer it with ILLEGAL_SASL_STATE, then close
    ILLEGAL = "illegal"  # answer it with ILLEGAL_SASL_STATE and go on (Kafka's KafkaApis after authentication)
    CLOSE = "close"  # answer nothing; close once the earlier answers are written


_S, _H, _A, _R, _I, _C = (Verdict.SERVE, Verdict.HANDSHAKE, Verdict.AUTHENTICATE, Verdict.REFUSE, Verdict.ILLEGAL,
                          Verdict.CLOSE)

# The admission table: phase -> kind of request -> verdict. Columns: ApiVersions, SaslHandshake, SaslAuthenticate,
# any other API, a bare token.
_ADMISSION: dict[Phase, dict[Kind, Verdict]] = {
    phase: dict(zip(Kind, row, strict=True)) for phase, row in {
        # No SASL: everything goes to the routes (which do not serve SaslHandshake/SaslAuthenticate there: closed).
        Phase.OPEN: (_S, _S, _S, _S, _C),
        # ApiVersions may come first (KIP-511 clients ask before choosing a mechanism; Kafka answers it once, we
        # as often as asked: it changes nothing). SaslAuthenticate before a handshake is answered 34 and closed.
        Phase.HANDSHAKE: (_S, _H, _R, _C, _C),
        # Kafka: "Unexpected Kafka request of type X during SASL authentication": only the next round may come.
        Phase.AUTHENTICATE: (_C, _R, _A, _C, _C),
        # After a v0 handshake every frame is a token; the connection never decodes a header here.
        Phase.RAW_TOKENS: (_C, _C, _C, _C, _A),
        # A SaslHandshake starts re-authentication (KIP-368); a stray SaslAuthenticate gets Kafka's KafkaApis
        # answer (ILLEGAL_SASL_STATE, "after successful authentication") and the connection goes on.
        Phase.AUTHENTICATED: (_S, _H, _I, _S, _C),
        Phase.REAUTHENTICATE: (_C, _R, _A, _C, _C),
        # Kafka's SocketServer closes an expired session on its next request unless that request is a
        # SaslHandshake beginning re-authentication.
        Phase.EXPIRED: (_C, _H, _C, _C, _C),
        Phase.CLOSED: (_C, _C, _C, _C, _C),
    }.items()
}

_KIND_BY_KEY = {API_VERSIONS.key: Kind.API_VERSIONS, SASL_HANDSHAKE.key: Kind.SASL_HANDSHAKE,
                SASL_AUTHENTICATE.key: Kind.SASL_AUTHENTICATE}


EXPIRED_REASON = "SASL session expired (connections.max.reauth.ms) without re-authentication"

# Why a request is not admitted, for the connection's log line (and the error_message of a refused SaslAuthenticate).
_REASONS: dict[tuple[Phase, Kind], str] = {
    (Phase.HANDSHAKE, Kind.SASL_AUTHENTICATE): "SaslAuthenticate before a successful SaslHandshake",
    (Phase.AUTHENTICATE, Kind.SASL_HANDSHAKE): "SaslHandshake during SASL authentication",
    (Phase.REAUTHENTICATE, Kind.SASL_HANDSHAKE): "SaslHandshake during SASL re-authentication",
    (Phase.AUTHENTICATED, Kind.SASL_AUTHENTICATE): "SaslAuthenticate request received after successful "
                                                   "authentication",
}


def _reason(phase: Phase, kind: Kind) -> str:
    known = _REASONS.get((phase, kind))
    if known is not None:
        return known
    if phase is Phase.EXPIRED:
        return EXPIRED_REASON
    if phase is Phase.CLOSED:
        return "request after the connection was refused"
    if phase is Phase.HANDSHAKE:
        return "request before SASL authentication"
    if phase in (Phase.AUTHENTICATE, Phase.REAUTHENTICATE, Phase.RAW_TOKENS):
        return f"unexpected {kind.value} during SASL authentication"
    return f"unexpected {kind.value}"


class Admission(NamedTuple):
    verdict: Verdict
    reason: str = ""  # when not SERVE: why, for the log (and a refused SaslAuthenticate's error_message)
    closes: bool = False  # the connection is closed after it (REFUSE, CLOSE)


def _admission(phase: Phase, kind: Kind) -> Admission:
    verdict = _ADMISSION[phase][kind]
    quiet = verdict in (Verdict.SERVE, Verdict.HANDSHAKE, Verdict.AUTHENTICATE)
    return Admission(verdict, "" if quiet else _reason(phase, kind), verdict in (Verdict.REFUSE, Verdict.CLOSE))


# _ADMISSION by api key, per phase: every request of every connection is admitted, so the lookup is one dict.get on
# an int (an Enum's hash is a Python call) returning a prebuilt answer: (the three keys the rules name, any other).
_ROWS: dict[Phase, tuple[dict[int, Admission], Admission]] = {
    phase: ({key: _admission(phase, kind) for key, kind in _KIND_BY_KEY.items()}, _admission(phase, Kind.OTHER))
    for phase in Phase
}


class Mechanism(Protocol):
    """One SASL mechanism's exchange on one connection (mover.security.sasl.SaslServer)."""

    def evaluate_response(self, token: bytes) -> Outcome: ...


@dataclass(frozen=True)
class SaslRules:
    """What a SASL listener requires of its connections (mover/config/security.py parses the keys)."""

    mechanisms: Sequence[str]  # sasl.enabled.mechanisms, in the order SaslHandshake lists them
    new_mechanism: Callable[[str], Mechanism]  # a fresh exchange for one of `mechanisms`
    session_lifetime_ms: int = 0  # connections.max.reauth.ms; 0 = sessions never expire
    failed_delay_s: float = 0.1  # connection.failed.authentication.delay.ms
    max_receive_size: int = 524288  # sasl.server.max.receive.size: the largest frame read while authenticating


def sasl_rules(listener: ListenerContext | None) -> SaslRules | None:
    """The rules of a listener's security settings; None when it does not use SASL."""
    if listener is None or not listener.security.uses_sasl:
        return None
    return SaslRules(
        mechanisms=tuple(listener.security.sasl_mechanisms),
        new_mechanism=listener.sasl_server,
        session_lifetime_ms=listener.security.reauth_ms,
        failed_delay_s=listener.failed_auth_delay_s,
        max_receive_size=listener.sasl_max_receive_size,
    )


@dataclass(frozen=True)
class HandshakeAnswer:
    error: ErrorCode
    mechanisms: list[str]
    close: bool  # after sending the answer
    reason: str = ""  # when refused, for the log


@dataclass(frozen=True)
class TokenAnswer:
    """The answer to one SaslAuthenticate round (or bare token) and what it does to the connection."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    token: bytes = b""
    session_lifetime_ms: int = 0  # announced in SaslAuthenticate v1+ when authentication completes
    delay_s: float = 0.0  # send the answer this much later (a failed authentication: one guess per delay)
    close: bool = False  # after sending the answer
    principal: str | None = None  # authentication completed: the connection runs as this from now on
    mechanism: str | None = None

    @property
    def failed(self) -> bool:
        return self.error != ErrorCode.NONE


_AUTHENTICATED = Phase.AUTHENTICATED  # a module global: read once per request, cheaper than the class attribute


class ConnectionGate:
    """One connection's phase, and the decisions that move it. `clock` gives monotonic seconds (for tests)."""

    def __init__(self, sasl: SaslRules | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.rules = sasl
        self.clock = clock
        self.phase = Phase.OPEN if sasl is None else Phase.HANDSHAKE  # (sets _row too)
        self.mechanism: str | None = None  # chosen by the last successful handshake
        self.user: str | None = None  # the authenticated user, kept across re-authentication
        self.expires_at: float | None = None  # KIP-368: end of the authenticated session (clock seconds)
        self._exchange: Mechanism | None = None

    # ------------------------------------------------------------------------------------------------ admission

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self._phase = phase
        self._row = _ROWS[phase]
        self._raw_tokens = _ADMISSION[phase][Kind.TOKEN] is Verdict.AUTHENTICATE
        self._admits_runs = phase is Phase.OPEN

    @property
    def raw_tokens(self) -> bool:
        """The next frame is a bare token, without a request header (after a v0 SaslHandshake)."""
        return self._raw_tokens

    @property
    def admits_runs(self) -> bool:
        """A run of requests may be admitted together, each before the one before it is handled (module docstring)."""
        return self._admits_runs

    @property
    def frame_limit(self) -> int | None:
        """The largest frame to read now: sasl.server.max.receive.size while a client is not (or is re-)
        authenticating; None = the server's own socket.request.max.bytes."""
        if self.rules is None or self.phase in (Phase.OPEN, Phase.AUTHENTICATED, Phase.EXPIRED):
            return None
        return self.rules.max_receive_size

    def admit(self, api_key: int) -> Admission:
        """What to do with a request whose header says `api_key`: `_ADMISSION`'s verdict in the current phase."""
        if self.expires_at is not None and self._phase is _AUTHENTICATED and self.clock() > self.expires_at:
            self.phase = Phase.EXPIRED
        by_key, other = self._row
        admission = by_key.get(api_key, other)
        if admission.closes:
            self.phase = Phase.CLOSED
        return admission

    # ------------------------------------------------------------------------------------------------ SASL steps

    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        """SaslHandshake, once `admit` said HANDSHAKE: choose the mechanism, or start re-authentication."""
        rules = self.rules
        assert rules is not None and self.phase in (Phase.HANDSHAKE, Phase.AUTHENTICATED, Phase.EXPIRED), self.phase
        mechanisms = list(rules.mechanisms)
        if mechanism not in rules.mechanisms:
            self.phase = Phase.CLOSED
            return HandshakeAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms, True,
                                   f"SaslHandshake for {mechanism!r}, not in sasl.enabled.mechanisms")
        reauthenticating = self.phase is not Phase.HANDSHAKE
        if reauthenticating and (mechanism != self.mechanism or version == 0):
            # KIP-368: re-authentication keeps the mechanism, and needs SaslAuthenticate (a v1 handshake): bare v0
            # tokens could not be told from requests on a connection already in use.
            self.phase = Phase.CLOSED
            return HandshakeAnswer(ErrorCode.ILLEGAL_SASL_STATE, mechanisms, True,
                                   f"re-authentication with SaslHandshake v{version} for {mechanism!r} (the "
                                   f"session used {self.mechanism!r}, v1 or later needed)")
        self.mechanism = mechanism
        self._exchange = rules.new_mechanism(mechanism)
        if reauthenticating:
            self.phase = Phase.REAUTHENTICATE
        else:
            self.phase = Phase.RAW_TOKENS if version == 0 else Phase.AUTHENTICATE
        return HandshakeAnswer(ErrorCode.NONE, mechanisms, False)

    def authenticate(self, token: bytes) -> TokenAnswer:
        """One SaslAuthenticate round (or bare token), once `admit` (or `raw_tokens`) said AUTHENTICATE."""
        rules = self.rules
        exchange = self._exchange
        assert rules is not None and exchange is not None, self.phase
        assert self.phase in (Phase.AUTHENTICATE, Phase.RAW_TOKENS, Phase.REAUTHENTICATE), self.phase
        outcome = exchange.evaluate_response(token)
        if outcome.failed:
            return self._fail(outcome.error, outcome.message)
        if outcome.user is None:
            return TokenAnswer(token=outcome.token)  # another round follows
        if self.phase is Phase.REAUTHENTICATE and outcome.user != self.user:
            return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, "Cannot change principals during "
                                                                     "re-authentication")
        self.user = outcome.user
        self.phase = Phase.AUTHENTICATED
        self._exchange = None
        lifetime_ms = rules.session_lifetime_ms
        self.expires_at = self.clock() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        return TokenAnswer(token=outcome.token, session_lifetime_ms=lifetime_ms, principal=f"User:{outcome.user}",
                           mechanism=self.mechanism)

    def _fail(self, error: ErrorCode, message: str | None) -> TokenAnswer:
        assert self.rules is not None
        self.phase = Phase.CLOSED
        self._exchange = None
        # Only a wrong credential is delayed (Kafka's connection.failed.authentication.delay.ms); a malformed
        # exchange is answered at once.
        delay = self.rules.failed_delay_s if error == ErrorCode.SASL_AUTHENTICATION_FAILED else 0.0
        return TokenAnswer(error, message, delay_s=delay, close=True, mechanism=self.mechanism)
