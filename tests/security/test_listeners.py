"""Listeners of every security protocol on one daemon, with kafka-python and kcat; TLS refusals as Kafka refuses."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from mover.config.broker import BrokerConfig, ConfigError
from mover.testing.certs import Issued, Pki
from mover.wire.messages import API_VERSIONS, METADATA
from tests.security.helpers import (
    PROTOCOLS,
    Raw,
    SecureBroker,
    authenticate,
    client_kwargs,
    client_tls,
    produce_consume,
)

BROKER_SSL = ("SSL", "SASL_SSL")


@pytest.mark.parametrize("listener", PROTOCOLS)
def test_kafka_python_produce_consume_admin_on_each_listener(broker: SecureBroker, listener: str) -> None:
    kw = client_kwargs(broker, listener)
    topic = f"t-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(**kw)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()
    assert produce_consume(kw, topic) == [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("listener", PROTOCOLS)
def test_metadata_advertises_the_listener_the_client_came_in_on(broker: SecureBroker, listener: str) -> None:
    tls = client_tls(broker.pki) if listener in BROKER_SSL else None
    with Raw(broker.ports[listener], tls=tls) as raw:
        if listener.startswith("SASL"):
            assert authenticate(raw, "PLAIN", "alice", "alice-secret")["error_code"] == 0
        md = raw.call(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})
    assert [(b["host"], b["port"]) for b in md["brokers"]] == [("127.0.0.1", broker.ports[listener])]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
@pytest.mark.parametrize("listener", PROTOCOLS)
def test_kcat_produce_and_consume_on_each_listener(broker: SecureBroker, listener: str, tmp_path: Path) -> None:
    topic = f"kcat-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    opts = ["-b", broker.address(listener), "-X", f"security.protocol={listener.lower()}"]
    if listener in BROKER_SSL:
        opts += ["-X", f"ssl.ca.location={broker.pki.ca_file}"]
    if listener.startswith("SASL"):
        opts += ["-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    subprocess.run(["kcat", *opts, "-P", "-t", topic], input=b"one\ntwo\n", check=True, timeout=60)
    out = subprocess.run(["kcat", *opts, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two"]


def test_mutual_tls_principal_and_refusals(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    """ssl.client.auth=required: a client certificate from our CA gets in; none, expired or foreign ones do not."""
    b = SecureBroker(tmp_path, pki, server_cert, props={"ssl.client.auth": "required"})
    with b:
        alice = pki.issue("alice", organization="acme")
        with Raw(b.ports["SSL"], tls=client_tls(pki, alice)) as raw:
            assert raw.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
                "error_code"] == 0
        assert produce_consume(client_kwargs(b, "SSL", cert=alice), "mtls", 2) == [b"m0", b"m1"]
        expired = pki.issue("old", expired=True)
        foreign_pki = Pki(tmp_path / "other", name="Other CA")
        foreign = foreign_pki.issue("mallory")
        for cert in (None, expired, foreign):
            assert tls_refused(b.ports["SSL"], client_tls(pki, cert))
        assert b.alive()
        log = b.d.log()
        assert "TLS handshake failed" in log
        # Kafka's default principal for a certificate: its subject, RFC 2253, most specific first.
        assert "principal User:CN=alice,O=acme" in log


def tls_refused(port: int, ctx: ssl.SSLContext) -> bool:
    """The handshake fails, or (TLS 1.3 checks the client certificate after the client finished) the first request
    is answered by an alert and a closed connection: never by a Kafka response."""
    try:
        with Raw(port, tls=ctx) as raw:
            raw.send_request(API_VERSIONS, 0, {})
            return raw.recv_frame() is None
    except (ssl.SSLError, ConnectionError, OSError):
        return True


def test_plaintext_to_tls_port_and_tls_to_plaintext_port_are_closed(broker: SecureBroker) -> None:
    with Raw(broker.ports["SSL"]) as raw:
        raw.send_request(API_VERSIONS, 0, {})
        assert raw.recv_frame() is None  # the broker hangs up; it never answers a plaintext request on TLS
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with Raw(broker.ports["PLAINTEXT"], tls=client_tls(broker.pki)):
            pass  # the ClientHello reads as a frame size far over the limit: closed
    assert broker.alive()
    with Raw(broker.ports["PLAINTEXT"]) as raw:
        assert raw.call(API_VERSIONS, 0, {})["error_code"] == 0


def test_tls_below_1_2_is_refused(broker: SecureBroker) -> None:
    ctx = client_tls(broker.pki)
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    except ssl.SSLError:
        pass
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", broker.ports["SSL"]), timeout=10) as s:
            ctx.wrap_socket(s, server_hostname="localhost")
    assert broker.alive()


def test_pkcs12_and_inline_pem_key_stores(tmp_path: Path, pki: Pki) -> None:
    server = pki.issue("localhost", server=True, password="storepw")
    props = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": server.pkcs12,
        "ssl.keystore.password": "storepw",
        # The SSL listener alone overrides with inline PEM (Kafka's ssl.keystore.certificate.chain/key).
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.certificate.chain": server.cert_pem.replace("\n", "\\n\\\n"),
        "listener.name.sasl_ssl.ssl.keystore.key": server.key_pem.replace("\n", "\\n\\\n"),
        "listener.name.sasl_ssl.ssl.key.password": "storepw",
    }
    b = SecureBroker(tmp_path, pki, server, props=props)
    with b:
        for name in BROKER_SSL:
            assert produce_consume(client_kwargs(b, name), f"p12-{name.lower()}", 1) == [b"m0"]


def test_configuration_errors_are_one_line(tmp_path: Path) -> None:
    base = {"log.dirs": str(tmp_path / "d")}
    cases = [
        ({"listeners": "SSL://:9093"}, "ssl.keystore.location"),
        ({"listeners": "CLIENT://:9093"}, "listener.security.protocol.map"),
        ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not supported"),
        ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN"}, "plain.sasl.jaas.config"),
        ({"listeners": "PLAINTEXT://:9092", "super.users": "admin"}, "super.users"),
        ({"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"}, "TLS"),
        ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:1"}, "not in listeners"),
    ]
    for props, needle in cases:
        with pytest.raises(ConfigError) as e:
            BrokerConfig.from_properties({**base, **props})
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    cfg = BrokerConfig.from_properties({
        **base,
        "listeners": "CLIENT://:9093,REPLICATION://:9094",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,REPLICATION:PLAINTEXT",
        "listener.name.client.ssl.keystore.location": "/k.pem",
        "listener.name.client.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x\\"y";',
    })
    assert cfg.security is not None
    client = cfg.security.for_listener("CLIENT")
    assert client.protocol == "SASL_SSL" and client.plain_users == {"a": 'x"y'}
    assert cfg.security.for_listener("REPLICATION").protocol == "PLAINTEXT"
