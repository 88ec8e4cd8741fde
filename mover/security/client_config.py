"""ClientSecurity: how a tool connects to secured brokers, read from a Kafka client properties file
(`--command-config`, as kafka-log-dirs.sh and kafka-reassign-partitions.sh take it).

Keys: `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512), `sasl.jaas.config` (`...PlainLoginModule required username="u" password="p";` or
`...ScramLoginModule required ...`), `ssl.truststore.location` / `.type` (PEM, PKCS12) / `.password` /
`ssl.truststore.certificates`, `ssl.keystore.location` / `.type` / `.password` / `ssl.key.password` /
`ssl.keystore.certificate.chain` / `ssl.keystore.key` (mutual TLS), `ssl.endpoint.identification.algorithm`
(`https`, the default, checks the broker's host name; empty turns that off). Unknown keys are ignored, as Kafka's
tools ignore keys meant for other clients.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mover.config import ConfigError, parse_properties
from mover.security.config import MECHANISMS, PLAIN, PROTOCOLS, SASL_PLAINTEXT, SASL_SSL, SSL, parse_jaas
from mover.security.tls import client_context
from mover.wire import ErrorCode
from mover.wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

Call = Callable[[Any, dict[str, Any], int], dict[str, Any]]


class AuthenticationError(Exception):
    """The broker refused our credentials or mechanism; str() is one line."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = PLAIN
    username: str | None = None
    password: str | None = None
    context: ssl.SSLContext | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    @classmethod
    def from_file(cls, path: str | Path) -> ClientSecurity:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read --command-config {path}: {e.strerror}") from None
        try:
            return cls.from_properties(parse_properties(text))
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol {protocol!r} is not one of {', '.join(sorted(PROTOCOLS))}")
        mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL") else PLAIN).strip().upper()
        username = password = None
        if protocol in (SASL_PLAINTEXT, SASL_SSL):
            if mechanism not in MECHANISMS:
                raise ConfigError(f"sasl.mechanism {mechanism} is not supported (use one of {', '.join(MECHANISMS)})")
            jaas = props.get("sasl.jaas.config")
            if not jaas:
                raise ConfigError(f"security.protocol={protocol} needs sasl.jaas.config with username and password")
            _, options = parse_jaas(jaas)
            username, password = options.get("username"), options.get("password")
            if not username or password is None:
                raise ConfigError("sasl.jaas.config needs username=\"...\" and password=\"...\"")
        context = None
        if protocol in (SSL, SASL_SSL):
            def get(key: str) -> str | None:
                value = props.get(key)
                return value.strip() if value is not None and value.strip() else None

            context = client_context(
                truststore_location=get("ssl.truststore.location"),
                truststore_certificates=get("ssl.truststore.certificates"),
                truststore_type=get("ssl.truststore.type") or "PEM",
                truststore_password=get("ssl.truststore.password"),
                keystore_location=get("ssl.keystore.location"),
                keystore_type=get("ssl.keystore.type") or "PEM",
                keystore_password=get("ssl.keystore.password"),
                key_password=get("ssl.key.password"),
                keystore_certificate_chain=get("ssl.keystore.certificate.chain"),
                keystore_key=get("ssl.keystore.key"),
                check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
                == "https",
            )
        return cls(protocol, mechanism, username, password, context)

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """TLS on a connected socket (a no-op for plaintext). Raises ssl.SSLError / OSError."""
        if self.context is None:
            return sock
        return self.context.wrap_socket(sock, server_hostname=host)

    def authenticate(self, call: Call) -> None:
        """SaslHandshake v1 then SaslAuthenticate rounds over `call(api, body, version)`. Raises
        AuthenticationError with the broker's reason."""
        if not self.uses_sasl:
            return
        assert self.username is not None and self.password is not None
        hs = call(SASL_HANDSHAKE, {"mechanism": self.mechanism}, 1)
        if hs["error_code"] != ErrorCode.NONE:
            raise AuthenticationError(
                f"broker refused SASL mechanism {self.mechanism} ({ErrorCode(hs['error_code']).name}; it offers "
                f"{', '.join(hs['mechanisms']) or 'none'})")
        if self.mechanism == PLAIN:
            self._step(call, f"\0{self.username}\0{self.password}".encode())
            return
        from scramp import ScramClient, ScramException

        client = ScramClient([self.mechanism], self.username, self.password)
        first = self._step(call, client.get_client_first().encode())
        try:
            client.set_server_first(first.decode())
            final = self._step(call, client.get_client_final().encode())
            client.set_server_final(final.decode())
        except (ScramException, UnicodeDecodeError) as e:
            raise AuthenticationError(f"SCRAM exchange failed: {e}") from None

    @staticmethod
    def _step(call: Call, token: bytes) -> bytes:
        reply = call(SASL_AUTHENTICATE, {"auth_bytes": token}, 1)
        if reply["error_code"] != ErrorCode.NONE:
            raise AuthenticationError(reply.get("error_message") or ErrorCode(reply["error_code"]).name)
        return reply["auth_bytes"]
