"""mover/server/gate.py as tables: every phase x every request kind, every phase x every SASL step, with a scripted
mechanism and a hand-turned clock (the gate is sans-IO: no sockets here; tests/security runs the same rules over
real sockets with kafka-python and kcat). The expected tables are written out here, not derived from the gate's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mover.security.sasl import Outcome
from mover.server.gate import Admission, ConnectionGate, Phase, SaslRules, TokenAnswer
from mover.wire.errors import ErrorCode
from mover.wire.messages import API_VERSIONS, METADATA, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE

LIFETIME_MS = 1000
DELAY_S = 0.25
MAX_RECEIVE = 4096


class Script:
    """A mechanism whose answers the token names: b"more" -> another round, b"ok:USER" -> complete as USER,
    anything else -> SASL_AUTHENTICATION_FAILED."""

    def evaluate_response(self, token: bytes) -> Outcome:
        if token == b"more":
            return Outcome(token=b"challenge")
        if token.startswith(b"ok:"):
            return Outcome(token=b"final", user=token[3:].decode())
        return Outcome(ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: Invalid username or password")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


RULES = SaslRules(mechanisms=("PLAIN", "SCRAM-SHA-256"), new_mechanism=lambda m: Script(),
                  session_lifetime_ms=LIFETIME_MS, failed_delay_s=DELAY_S, max_receive_size=MAX_RECEIVE)


def _authenticated(gate: ConnectionGate) -> None:
    assert gate.handshake("PLAIN", 1).error == ErrorCode.NONE
    assert gate.authenticate(b"ok:alice").principal == "User:alice"


# How to reach each phase through the gate's own API (so a table row tests the phase as a connection reaches it).
REACH: dict[Phase, Callable[[ConnectionGate, Clock], None]] = {
    Phase.OPEN: lambda g, c: None,
    Phase.HANDSHAKE: lambda g, c: None,
    Phase.AUTHENTICATE: lambda g, c: g.handshake("PLAIN", 1),
    Phase.RAW_TOKENS: lambda g, c: g.handshake("PLAIN", 0),
    Phase.AUTHENTICATED: lambda g, c: _authenticated(g),
    Phase.REAUTHENTICATE: lambda g, c: (_authenticated(g), g.handshake("PLAIN", 1)),
    # The gate notices the expiry at the next request; a SaslHandshake is admitted and leaves it EXPIRED.
    Phase.EXPIRED: lambda g, c: (_authenticated(g), setattr(c, "now", c.now + LIFETIME_MS / 1000 + 0.001),
                                 g.admit(SASL_HANDSHAKE.key)),
    Phase.CLOSED: lambda g, c: g.admit(METADATA.key),
}


def gate_in(phase: Phase) -> tuple[ConnectionGate, Clock]:
    clock = Clock()
    gate = ConnectionGate(None if phase is Phase.OPEN else RULES, clock)
    REACH[phase](gate, clock)
    assert gate.phase is phase
    return gate, clock


def test_every_phase_is_reachable() -> None:
    for phase in Phase:
        gate_in(phase)


# phase -> (ApiVersions, SaslHandshake, SaslAuthenticate, Metadata): verdict, and the phase after it.
K = (API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key, METADATA.key)
ADMISSION = {
    Phase.OPEN: ("serve", "serve", "serve", "serve"),
    Phase.HANDSHAKE: ("serve", "handshake", "refuse", "close"),
    Phase.AUTHENTICATE: ("close", "refuse", "authenticate", "close"),
    Phase.RAW_TOKENS: ("close", "close", "close", "close"),
    Phase.AUTHENTICATED: ("serve", "handshake", "illegal", "serve"),
    Phase.REAUTHENTICATE: ("close", "refuse", "authenticate", "close"),
    Phase.EXPIRED: ("close", "handshake", "close", "close"),
    Phase.CLOSED: ("close", "close", "close", "close"),
}


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
def test_admission_table(phase: Phase) -> None:
    for key, expected in zip(K, ADMISSION[phase], strict=True):
        gate, _ = gate_in(phase)
        got: Admission = gate.admit(key)
        assert got.verdict.value == expected, (phase, key)
        after = Phase.CLOSED if expected in ("close", "refuse") else phase
        assert gate.phase is after, (phase, key)
        assert bool(got.reason) == (expected not in ("serve", "handshake", "authenticate")), (phase, key, got)


def test_only_raw_tokens_takes_bare_frames() -> None:
    assert [p for p in Phase if gate_in(p)[0].raw_tokens] == [Phase.RAW_TOKENS]


# phase -> may a run of requests be admitted together (Route.fast_many): only where no request can change what the
# gate admits, i.e. without SASL (an authenticated session could expire between them; a run could hold a SASL step).
RUNS = {Phase.OPEN: True, Phase.HANDSHAKE: False, Phase.AUTHENTICATE: False, Phase.RAW_TOKENS: False,
        Phase.AUTHENTICATED: False, Phase.REAUTHENTICATE: False, Phase.EXPIRED: False, Phase.CLOSED: False}


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
def test_runs_are_admitted_only_without_sasl(phase: Phase) -> None:
    gate, _ = gate_in(phase)
    assert gate.admits_runs is RUNS[phase]
    gate.admit(METADATA.key)
    assert gate.admits_runs is RUNS[gate.phase]


def test_an_authenticated_session_expires_after_its_lifetime_not_before() -> None:
    gate, clock = gate_in(Phase.AUTHENTICATED)
    clock.now += LIFETIME_MS / 1000
    assert gate.admit(PRODUCE.key).verdict.value == "serve"  # at the boundary still served
    clock.now += 0.001
    refused = gate.admit(PRODUCE.key)
    assert refused.verdict.value == "close" and "expired" in refused.reason
    assert gate.phase is Phase.CLOSED


def test_reauthentication_restarts_the_lifetime() -> None:
    gate, clock = gate_in(Phase.AUTHENTICATED)
    clock.now += 0.9
    assert gate.admit(SASL_HANDSHAKE.key).verdict.value == "handshake"
    assert gate.handshake("PLAIN", 1).error == ErrorCode.NONE
    assert gate.admit(SASL_AUTHENTICATE.key).verdict.value == "authenticate"
    assert gate.authenticate(b"ok:alice").session_lifetime_ms == LIFETIME_MS
    clock.now += 0.9  # 1.8 s after the first authentication, 0.9 s after the second
    assert gate.admit(METADATA.key).verdict.value == "serve"


def test_no_lifetime_means_no_expiry() -> None:
    clock = Clock()
    gate = ConnectionGate(SaslRules(("PLAIN",), lambda m: Script()), clock)
    _authenticated(gate)
    clock.now += 1e9
    assert gate.admit(METADATA.key).verdict.value == "serve"


# SaslHandshake in each phase where it may run: (mechanism, version) -> (error, close, phase after).
HANDSHAKES = {
    Phase.HANDSHAKE: {
        ("PLAIN", 1): (ErrorCode.NONE, False, Phase.AUTHENTICATE),
        ("PLAIN", 0): (ErrorCode.NONE, False, Phase.RAW_TOKENS),
        ("SCRAM-SHA-256", 1): (ErrorCode.NONE, False, Phase.AUTHENTICATE),
        ("GSSAPI", 1): (ErrorCode.UNSUPPORTED_SASL_MECHANISM, True, Phase.CLOSED),
    },
    Phase.AUTHENTICATED: {
        ("PLAIN", 1): (ErrorCode.NONE, False, Phase.REAUTHENTICATE),
        ("PLAIN", 0): (ErrorCode.ILLEGAL_SASL_STATE, True, Phase.CLOSED),  # KIP-368 needs SaslAuthenticate
        ("SCRAM-SHA-256", 1): (ErrorCode.ILLEGAL_SASL_STATE, True, Phase.CLOSED),  # the mechanism stays
        ("GSSAPI", 1): (ErrorCode.UNSUPPORTED_SASL_MECHANISM, True, Phase.CLOSED),
    },
}
HANDSHAKES[Phase.EXPIRED] = HANDSHAKES[Phase.AUTHENTICATED]


@pytest.mark.parametrize("phase", list(HANDSHAKES), ids=lambda p: p.value)
def test_handshake_table(phase: Phase) -> None:
    for (mechanism, version), (error, close, after) in HANDSHAKES[phase].items():
        gate, _ = gate_in(phase)
        answer = gate.handshake(mechanism, version)
        assert (answer.error, answer.close, gate.phase) == (error, close, after), (phase, mechanism, version)
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
        assert bool(answer.reason) == close


# A SaslAuthenticate round (or bare token) in each phase where one may run:
# token -> (error, close, phase after, principal, delay before the answer, session lifetime announced).
_FAIL = (ErrorCode.SASL_AUTHENTICATION_FAILED, True, Phase.CLOSED, None, DELAY_S, 0)
_ROUND = {
    b"more": (ErrorCode.NONE, False, None, None, 0.0, 0),  # None: the phase stays
    b"ok:alice": (ErrorCode.NONE, False, Phase.AUTHENTICATED, "User:alice", 0.0, LIFETIME_MS),
    b"garbage": _FAIL,
}
TOKENS = {
    Phase.AUTHENTICATE: {**_ROUND, b"ok:bob": (ErrorCode.NONE, False, Phase.AUTHENTICATED, "User:bob", 0.0,
                                                LIFETIME_MS)},
    Phase.RAW_TOKENS: {**_ROUND, b"ok:bob": (ErrorCode.NONE, False, Phase.AUTHENTICATED, "User:bob", 0.0,
                                              LIFETIME_MS)},
    # Re-authentication must not change the principal (KIP-368).
    Phase.REAUTHENTICATE: {**_ROUND, b"ok:bob": _FAIL},
}


@pytest.mark.parametrize("phase", list(TOKENS), ids=lambda p: p.value)
def test_authenticate_table(phase: Phase) -> None:
    for token, (error, close, after, principal, delay, lifetime) in TOKENS[phase].items():
        gate, _ = gate_in(phase)
        answer: TokenAnswer = gate.authenticate(token)
        got = (answer.error, answer.close, gate.phase, answer.principal, answer.delay_s, answer.session_lifetime_ms)
        assert got == (error, close, after or phase, principal, delay, lifetime), (phase, token)


@pytest.mark.parametrize("phase", [p for p in Phase if p not in HANDSHAKES or p not in TOKENS],
                         ids=lambda p: p.value)
def test_steps_run_only_where_admitted(phase: Phase) -> None:
    """The connection calls handshake() / authenticate() only when admit() (or raw_tokens) said so: a call anywhere
    else is a bug in the caller, and the gate says so rather than moving to some state."""
    if phase not in HANDSHAKES:
        with pytest.raises(AssertionError):
            gate_in(phase)[0].handshake("PLAIN", 1)
    if phase not in TOKENS:
        with pytest.raises(AssertionError):
            gate_in(phase)[0].authenticate(b"ok:alice")


def test_frame_limit_while_not_authenticated_only() -> None:
    limited = {p for p in Phase if gate_in(p)[0].frame_limit == MAX_RECEIVE}
    assert limited == {Phase.HANDSHAKE, Phase.AUTHENTICATE, Phase.RAW_TOKENS, Phase.REAUTHENTICATE, Phase.CLOSED}
    assert gate_in(Phase.AUTHENTICATED)[0].frame_limit is None
    assert gate_in(Phase.OPEN)[0].frame_limit is None


def test_a_multi_round_exchange_keeps_its_phase_until_complete() -> None:
    gate, _ = gate_in(Phase.AUTHENTICATE)
    for _ in range(3):
        assert gate.admit(SASL_AUTHENTICATE.key).verdict.value == "authenticate"
        answer = gate.authenticate(b"more")
        assert (answer.token, answer.principal, gate.phase) == (b"challenge", None, Phase.AUTHENTICATE)
    assert gate.authenticate(b"ok:alice").principal == "User:alice"
    assert gate.admit(METADATA.key).verdict.value == "serve"
