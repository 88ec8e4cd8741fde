"""Shared by tests/security: a real moverd with secure listeners on fixed free ports, raw wire access, clients."""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from mover.admin.client import AuthenticationFailed, BrokerConnection
from mover.security.client_config import ClientSecurity
from mover.testing.certs import Issued, Pki
from mover.testing.moverd import Moverd
from mover.testing.ports import free_ports
from mover.testing.raw import RawClient
from mover.testing.wait import wait_for
from mover.wire import Api
from mover.wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" '
              'user_bob="bob-secret" user_admin="admin-secret";')
# A client's JAAS line for SCRAM: .format(user, password).
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
# ACLs on, admin the super user, and a resource without ACLs refused to everyone else.
ACLS_ON = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "false",
}


class SecureBroker:
    """A Moverd with one listener per security protocol, each on its own fixed port (restarts keep them)."""

    def __init__(self, tmp: Path, pki: Pki, server: Issued, *, props: dict[str, Any] | None = None) -> None:
        self.ports = dict(zip(PROTOCOLS, free_ports(len(PROTOCOLS)), strict=True))
        self.pki = pki
        listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        base: dict[str, Any] = {
            "listeners": listeners,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": server.keystore,
            "ssl.truststore.location": pki.ca_file,
            "ssl.client.auth": "requested",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": 10,
        }
        base.update(props or {})
        self.listeners = listeners
        self.d = Moverd(tmp, props=base)

    def start(self) -> SecureBroker:
        self.d.start()
        self.d.props["listeners"] = self.listeners  # Moverd rewrites it to the first listener after start
        return self

    def restart(self) -> SecureBroker:
        self.d.restart()
        self.d.props["listeners"] = self.listeners
        return self

    def stop(self) -> None:
        if self.d.proc is not None:
            self.d.stop()

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def alive(self) -> bool:
        return self.d.proc is not None and self.d.proc.poll() is None

    def add_scram_user(self, user: str, password: str, mechanism: str) -> None:
        import subprocess
        import sys

        out = subprocess.run(
            [sys.executable, "-m", "mover.daemon", "--config", str(self.d.config), "--add-scram-user", user,
             "--mechanism", mechanism],
            input=password + "\n", capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        # A running moverd notices the changed credentials file within a second: wait until it does.
        wait_for(lambda: self.scram_accepted(user, password, mechanism),
                 message=f"moverd accepting the new SCRAM credentials of {user}")

    def scram_accepted(self, user: str, password: str, mechanism: str) -> bool:
        from scramp import ScramClient

        from mover.wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

        with Raw(self.ports["SASL_PLAINTEXT"]) as raw:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
            client = ScramClient([mechanism], user, password)
            first = raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": client.get_client_first().encode()})
            if first["error_code"]:
                return False
            client.set_server_first(first["auth_bytes"].decode())
            return raw.call(SASL_AUTHENTICATE, 1, {"auth_bytes": client.get_client_final().encode()})[
                "error_code"] == 0

    def __enter__(self) -> SecureBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_scram_user(b: SecureBroker, user: str, password: str, mechanism: str) -> None:
    """Store the credentials and wait until the running moverd has read them (it re-reads its store on change)."""
    b.add_scram_user(user, password, mechanism)
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                               "sasl.jaas.config": SCRAM_JAAS.format(user, password)})

    def accepted() -> bool:
        try:
            BrokerConnection("127.0.0.1", b.ports["SASL_PLAINTEXT"], security=security).close()
        except AuthenticationFailed:
            return False
        return True

    wait_for(accepted, message=f"moverd to accept the new {mechanism} credentials of {user}")


def client_kwargs(b: SecureBroker, name: str, *, user: str = "alice", password: str = "alice-secret",
                  mechanism: str = "PLAIN", cert: Issued | None = None) -> dict[str, Any]:
    """kafka-python settings for listener `name`."""
    kw: dict[str, Any] = {"bootstrap_servers": b.address(name), "request_timeout_ms": 15000}
    if name in ("SSL", "SASL_SSL"):
        kw.update(security_protocol=name, ssl_cafile=str(b.pki.ca_file))
        if cert is not None:
            kw.update(ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key))
    if name.startswith("SASL"):
        kw.update(security_protocol=name, sasl_mechanism=mechanism, sasl_plain_username=user,
                  sasl_plain_password=password)
    return kw


def produce_consume(kw: dict, topic: str, n: int = 5) -> list[bytes]:
    """`n` records (m0, m1, ...) produced to `topic` with kafka-python settings `kw`, then read back from the start;
    the values read."""
    producer = KafkaProducer(**kw)
    try:
        for i in range(n):
            producer.send(topic, f"m{i}".encode()).get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **kw)
    try:
        return [m.value for m in itertools.islice(consumer, n)]  # the timeout only ends a short read
    finally:
        consumer.close()


class Raw(RawClient):
    """The security tests' raw connection: `call` returns the body, and a reset or a TLS alert reads as closed (a
    refused handshake or a dropped session is what these tests provoke)."""

    def send_request(self, api: Api, version: int, body: dict[str, Any]) -> None:
        self.send(self.request_bytes(api, version, body))

    def call(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        return super().call(api, version, body)[1]

    def recv_exact(self, n: int) -> bytes | None:
        try:
            return super().recv_exact(n)
        except (ConnectionResetError, ssl.SSLError):
            return None

    def closed_by_peer(self) -> bool:
        """True when the broker closed the connection (EOF or reset) within the socket timeout."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except TimeoutError:
            return False


def authenticate(raw: Raw, mechanism: str, user: str, password: str) -> dict:
    """One SASL exchange over a raw connection with scramp's client; the last SaslAuthenticate answer."""
    assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    if mechanism == "PLAIN":
        return raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    from scramp import ScramClient

    client = ScramClient([mechanism], user, password)
    first = raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()})
    if first["error_code"]:
        return first
    client.set_server_first(first["auth_bytes"].decode())
    final = raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()})
    if final["error_code"] == 0:
        client.set_server_final(final["auth_bytes"].decode())  # raises unless the server proved it knows the key
    return final


def session_as(b: SecureBroker, user: str) -> Raw:
    """A raw connection to the SASL_PLAINTEXT listener, authenticated with PLAIN as `user` (of PLAIN_JAAS)."""
    raw = Raw(b.ports["SASL_PLAINTEXT"])
    assert authenticate(raw, "PLAIN", user, PASSWORDS[user])["error_code"] == 0
    return raw


def client_tls(pki: Pki, cert: Issued | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


@contextmanager
def closing_all(*objs: Any) -> Iterator[None]:
    try:
        yield
    finally:
        for o in objs:
            o.close()
