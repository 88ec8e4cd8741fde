"""SASL (KIP-152) with PLAIN and SCRAM-SHA-256/512: real clients in, wrong ones refused as Kafka refuses them."""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from mover.testing.certs import Issued, Pki
from mover.wire import ErrorCode
from mover.wire.messages import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.security.helpers import Raw, SecureBroker, authenticate, client_kwargs, client_tls, produce_consume

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture(scope="module")
def scram_broker(broker: SecureBroker) -> SecureBroker:
    for mechanism in SCRAM:
        broker.add_scram_user("carol", "carol-secret", mechanism)
    return broker


def tls_for(b: SecureBroker, listener: str):  # noqa: ANN201 - an ssl.SSLContext or None
    return client_tls(b.pki) if listener == "SASL_SSL" else None


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_kafka_python_authenticates_and_works(scram_broker: SecureBroker, listener: str, mechanism: str) -> None:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", "carol-secret")
    kw = client_kwargs(scram_broker, listener, user=user, password=password, mechanism=mechanism)
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    assert produce_consume(kw, topic, 3) == [b"m0", b"m1", b"m2"]
    admin = KafkaAdminClient(**kw)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_wrong_password_or_user_is_refused_and_others_unaffected(scram_broker: SecureBroker, mechanism: str,
                                                                  listener: str) -> None:
    user, good = ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", "carol-secret")
    port = scram_broker.ports[listener]
    for who, password in ((user, "wrong"), ("nobody", good)):
        with Raw(port, tls=tls_for(scram_broker, listener)) as raw:
            answer = authenticate(raw, mechanism, who, password)
            assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert raw.closed_by_peer()
    with Raw(port, tls=tls_for(scram_broker, listener)) as raw:
        assert authenticate(raw, mechanism, user, good)["error_code"] == 0
        assert raw.call(METADATA, 1, {"topics": None})["brokers"][0]["port"] == port
    assert scram_broker.alive()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_kcat_sasl_ssl(scram_broker: SecureBroker, mechanism: str) -> None:
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", "carol-secret")
    topic = f"kcat-sasl-{uuid.uuid4().hex[:6]}"
    opts = ["-b", scram_broker.address("SASL_SSL"), "-X", "security.protocol=sasl_ssl",
            "-X", f"ssl.ca.location={scram_broker.pki.ca_file}", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    subprocess.run(["kcat", *opts, "-P", "-t", topic], input=b"x\n", check=True, timeout=60)
    out = subprocess.run(["kcat", *opts, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60)
    assert out.stdout.split() == [b"x"]
    bad = [*opts[:-2], "-X", "sasl.password=wrong", "-m", "5"]
    out = subprocess.run(["kcat", *bad, "-L"], capture_output=True, timeout=60)
    assert out.returncode != 0


def test_unsupported_mechanism_and_illegal_states(broker: SecureBroker) -> None:
    port = broker.ports["SASL_PLAINTEXT"]
    with Raw(port) as raw:
        answer = raw.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert set(answer["mechanisms"]) == {"PLAIN", *SCRAM}
        assert raw.closed_by_peer()
    with Raw(port) as raw:
        # SaslAuthenticate without a handshake first.
        answer = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
        assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert raw.closed_by_peer()
    with Raw(port) as raw:
        # Anything but ApiVersions before authentication: the connection is closed, nothing is answered.
        assert raw.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
        raw.send_request(METADATA, 1, {"topics": None})
        assert raw.recv_frame() is None
    assert broker.alive()


def test_gate_rules_during_and_after_an_exchange(broker: SecureBroker) -> None:
    """mover/server/gate.py's table over a real socket: while an exchange runs only its next SaslAuthenticate may
    come (Kafka: "Unexpected Kafka request ... during SASL authentication"), and a stray SaslAuthenticate after
    authentication gets Kafka's ILLEGAL_SASL_STATE answer on a connection that goes on."""
    port = broker.ports["SASL_PLAINTEXT"]
    with Raw(port) as raw:
        assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        raw.send_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert raw.recv_frame() is None
    with Raw(port) as raw:
        assert authenticate(raw, "PLAIN", "alice", "alice-secret")["error_code"] == 0
        stray = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"})
        assert stray["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert "after successful authentication" in stray["error_message"]
        assert raw.call(METADATA, 1, {"topics": None})["brokers"]
    assert broker.alive()


def test_oversize_first_frame_is_refused(broker: SecureBroker) -> None:
    with Raw(broker.ports["SASL_PLAINTEXT"]) as raw:
        # Over sasl.server.max.receive.size (Kafka's 512 KiB): closed on the size prefix, nothing allocated.
        raw.sock.sendall(struct.pack(">i", 524289) + b"\0" * 1000)
        assert raw.closed_by_peer()
    assert "larger than the limit of 524288" in broker.d.log()
    with Raw(broker.ports["SASL_PLAINTEXT"]) as raw:
        assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0


def test_v0_handshake_with_bare_tokens(broker: SecureBroker) -> None:
    with Raw(broker.ports["SASL_PLAINTEXT"]) as raw:
        assert raw.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0alice\0alice-secret"
        raw.sock.sendall(struct.pack(">i", len(token)) + token)
        assert raw.recv_frame() == b""  # PLAIN's server answer is empty
        md = raw.call(METADATA, 1, {"topics": None})
        assert md["brokers"][0]["port"] == broker.ports["SASL_PLAINTEXT"]


def test_a_thousand_failed_logins_in_a_row(broker: SecureBroker) -> None:
    port = broker.ports["SASL_PLAINTEXT"]

    def attempt(i: int) -> int:
        with Raw(port) as raw:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            code = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0alice\0guess{i}".encode()})["error_code"]
            assert raw.closed_by_peer()
            return code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(attempt, range(1000)))
    assert codes == [ErrorCode.SASL_AUTHENTICATION_FAILED] * 1000
    assert broker.alive()
    assert produce_consume(client_kwargs(broker, "SASL_PLAINTEXT"), f"after-{uuid.uuid4().hex[:6]}", 1) == [b"m0"]


def test_reauthentication_lifetime(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    """connections.max.reauth.ms: announced in SaslAuthenticate v1+; a session past it is closed on its next request
    unless it re-authenticated (KIP-368), which keeps the connection."""
    b = SecureBroker(tmp_path, pki, server_cert, props={"connections.max.reauth.ms": 300})
    with b:
        port = b.ports["SASL_PLAINTEXT"]
        token = {"auth_bytes": b"\0alice\0alice-secret"}
        with Raw(port) as raw:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            assert raw.call(SASL_AUTHENTICATE, 1, token)["session_lifetime_ms"] == 300
            deadline = time.monotonic() + 0.35
            while time.monotonic() < deadline:  # a timer, not a condition: the session must outlive 300 ms
                time.sleep(0.05)
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            assert raw.call(SASL_AUTHENTICATE, 1, token)["error_code"] == 0
            assert raw.call(METADATA, 1, {"topics": None})["brokers"]
            # Switching user on re-authentication is refused.
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            bob = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0bob\0bob-secret"})
            assert bob["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        with Raw(port) as raw:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            assert raw.call(SASL_AUTHENTICATE, 1, token)["error_code"] == 0
            deadline = time.monotonic() + 0.35
            while time.monotonic() < deadline:
                time.sleep(0.05)
            raw.send_request(METADATA, 1, {"topics": None})
            assert raw.recv_frame() is None
        assert "expired" in b.d.log()


def test_scram_users_over_the_wire_with_kafka_python(broker: SecureBroker) -> None:
    """AlterUserScramCredentials (KIP-554): kafka-python's admin client adds a user, who then authenticates; the
    deletion takes the user out again; bad alterations get Kafka's error codes."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin._users import UserScramCredentialDeletion, UserScramCredentialUpsertion

    admin = KafkaAdminClient(**client_kwargs(broker, "PLAINTEXT"))
    try:
        result = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", "SCRAM-SHA-512", "d-pw")])
        assert result == {"dave": None}
        with Raw(broker.ports["SASL_PLAINTEXT"]) as raw:
            assert authenticate(raw, "SCRAM-SHA-512", "dave", "d-pw")["error_code"] == 0
        weak = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("erin", "SCRAM-SHA-256", "e-pw", iterations=100)])
        assert "Iterations" in (weak["erin"] or "")
        missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", "SCRAM-SHA-256")])
        assert missing["nobody"] is not None
        assert admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", "SCRAM-SHA-512")]) == {
            "dave": None}
        with Raw(broker.ports["SASL_PLAINTEXT"]) as raw:
            assert authenticate(raw, "SCRAM-SHA-512", "dave", "d-pw")["error_code"] == (
                ErrorCode.SASL_AUTHENTICATION_FAILED)
    finally:
        admin.close()
