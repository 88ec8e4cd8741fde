"""ListenerContext: everything a listener's connections need to secure themselves, built once at start-up."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from mover.config.security import ListenerSecurity
from mover.security.credentials import CredentialStore
from mover.security.limits import ByteBudget, ConnectionLimits
from mover.security.sasl import SaslServer


@dataclass
class ListenerContext:
    security: ListenerSecurity
    ssl_context: ssl.SSLContext | None = None
    credentials: CredentialStore | None = None
    failed_auth_delay_s: float = 0.1
    # Kafka's sasl.server.max.receive.size: the largest frame read before a SASL client has authenticated.
    sasl_max_receive_size: int = 524288
    limits: ConnectionLimits | None = None
    budget: ByteBudget | None = None

    @property
    def name(self) -> str:
        return self.security.listener.name

    def sasl_server(self, mechanism: str) -> SaslServer:
        return SaslServer(mechanism, self.security, self.credentials)
