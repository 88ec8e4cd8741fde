"""A bounded fuzz of the TLS and SASL handshakes: random bytes at each state never hurt the daemon or other clients.

Each run is bounded in time (FUZZ_S) and seeded, so a failure can be replayed from the seed in the message.
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
import time

import pytest

from mover.wire import ErrorCode
from mover.wire.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.security.helpers import Raw, SecureBroker, authenticate, client_tls

FUZZ_S = 3.0
ACCEPTABLE = {ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.ILLEGAL_SASL_STATE}


def _blob(rng: random.Random, n: int = 600) -> bytes:
    return rng.randbytes(rng.randrange(0, n))


def _drain(sock: socket.socket) -> None:
    """Read until the broker closes or stops talking; either is fine, as long as it does not hang forever."""
    sock.settimeout(2.0)
    try:
        while sock.recv(65536):
            pass
    except (OSError, ssl.SSLError):
        pass


def _until(deadline: float) -> bool:
    return time.monotonic() < deadline


@pytest.mark.parametrize("seed", [1, 2])
def test_fuzz_tls_handshake(broker: SecureBroker, seed: int) -> None:
    rng = random.Random(seed)
    port = broker.ports["SSL"]
    deadline = time.monotonic() + FUZZ_S
    n = 0
    while _until(deadline):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            kind = rng.randrange(3)
            if kind == 0:
                s.sendall(_blob(rng))  # garbage where a ClientHello belongs
            elif kind == 1:
                body = _blob(rng, 300)  # a handshake record header around garbage
                s.sendall(b"\x16\x03\x01" + struct.pack(">H", len(body)) + body)
            else:
                s.sendall(b"\x16\x03\x03" + struct.pack(">H", 0xFFFF) + _blob(rng, 100))  # a record never finished
                s.shutdown(socket.SHUT_WR)
            _drain(s)
        n += 1
    assert n > 0 and broker.alive(), f"seed {seed}"
    with Raw(port, tls=client_tls(broker.pki)) as raw:
        assert raw.call(API_VERSIONS, 0, {})["error_code"] == 0


@pytest.fixture(scope="module")
def with_carol(broker: SecureBroker) -> SecureBroker:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        broker.add_scram_user("carol", "carol-secret", mechanism)
    return broker


@pytest.mark.parametrize("seed", [3, 4])
def test_fuzz_sasl_states(with_carol: SecureBroker, seed: int) -> None:
    broker = with_carol
    rng = random.Random(seed)
    port = broker.ports["SASL_PLAINTEXT"]
    deadline = time.monotonic() + FUZZ_S
    while _until(deadline):
        with Raw(port) as raw:
            state = rng.randrange(4)
            if state == 0:  # random frame before any handshake
                body = _blob(rng, 200)
                raw.sock.sendall(struct.pack(">i", len(body)) + body)
                _drain(raw.sock)
                continue
            mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
            version = rng.choice([0, 1])
            assert raw.call(SASL_HANDSHAKE, version, {"mechanism": mechanism})["error_code"] == 0
            if version == 0:  # bare tokens
                token = _blob(rng)
                raw.sock.sendall(struct.pack(">i", len(token)) + token)
                _drain(raw.sock)
                continue
            if state == 1:  # a random first token
                code = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": _blob(rng)})["error_code"]
                assert code in ACCEPTABLE, (seed, code)
            elif state == 2 and mechanism != "PLAIN":  # a valid SCRAM first message, then a random final
                first = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"n,,n=carol,r=abcdefgh"})
                if first["error_code"] == 0:
                    code = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": _blob(rng)})["error_code"]
                    assert code in ACCEPTABLE, (seed, code)
            else:  # a random frame where SaslAuthenticate belongs
                body = _blob(rng, 200)
                raw.sock.sendall(struct.pack(">i", len(body)) + body)
            _drain(raw.sock)
    assert broker.alive(), f"seed {seed}"
    with Raw(port) as raw:
        assert authenticate(raw, "PLAIN", "alice", "alice-secret")["error_code"] == 0
