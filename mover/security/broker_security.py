"""BrokerSecurity: the security state of one moverd, built from its configuration at start-up.

One object holds what every listener shares: the SCRAM credential store, the authorizer, the connection limits and
the partial-request memory budget; and per listener, the TLS context. Stores live in ZooKeeper when
`zookeeper.connect` is set (Kafka's paths and formats, so Kafka's own tools manage them), else in the log dirs.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mover.config.broker import BrokerConfig, ConfigError
from mover.config.security import SCRAM_SHA_256, SCRAM_SHA_512, SecurityConfig
from mover.security.authorizer import KNOWN_AUTHORIZERS, Authorizer
from mover.security.credentials import CredentialStore, FileCredentialStore, ZkCredentialStore
from mover.security.limits import ByteBudget, ConnectionLimits
from mover.security.listener import ListenerContext
from mover.security.tls import server_context
from mover.storage.broker_files import as_broker_files

if TYPE_CHECKING:
    from mover.log.log_manager import LogManager

log = logging.getLogger(__name__)

# How long start-up waits for ZooKeeper before giving up with a clear error.
ZK_CONNECT_TIMEOUT_S = 15.0


@dataclass
class BrokerSecurity:
    config: SecurityConfig
    contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    credentials: CredentialStore | None = None
    authorizer: Authorizer | None = None
    limits: ConnectionLimits | None = None
    budget: ByteBudget | None = None
    zk: Any = None

    @classmethod
    def build(cls, broker_config: BrokerConfig, manager: LogManager | None = None) -> BrokerSecurity:
        """Raises ConfigError (a key store that does not load, ZooKeeper unreachable)."""
        config = broker_config.security or SecurityConfig.parse({}, broker_config.listeners)
        contexts = {
            ls.listener.name: server_context(ls.tls, ls.listener.name)
            for ls in config.listeners
            if ls.tls is not None
        }
        dirs = manager.broker_files if manager is not None else as_broker_files(broker_config.log_dirs)
        needs_scram = any(m in (SCRAM_SHA_256, SCRAM_SHA_512) for ls in config.listeners for m in ls.sasl_mechanisms)
        zk = None
        if broker_config.zookeeper_connect and (needs_scram or config.authorizer):
            zk = _zk_client(broker_config.zookeeper_connect)
        credentials: CredentialStore | None = None
        if zk is not None:
            credentials = ZkCredentialStore(zk)
        elif needs_scram:
            credentials = FileCredentialStore(dirs)
        authorizer = Authorizer.build(config, dirs, zk) if config.authorizer else None
        if config.authorizer and config.authorizer not in KNOWN_AUTHORIZERS:
            log.warning("authorizer.class.name %s is not Kafka's ACL authorizer; moverd enforces Kafka's ACL "
                        "semantics (mover.security.authorizer) in its place", config.authorizer)
        limits = None
        if config.max_connections is not None or config.max_connections_per_ip is not None or (
            config.max_connections_per_ip_overrides
        ):
            limits = ConnectionLimits(
                config.max_connections, config.max_connections_per_ip, config.max_connections_per_ip_overrides
            )
        budget = ByteBudget(config.queued_max_request_bytes) if config.queued_max_request_bytes > 0 else None
        return cls(config, contexts, credentials, authorizer, limits, budget, zk)

    @property
    def idle_timeout_s(self) -> float:
        return self.config.idle_ms / 1000

    def protocol_of(self, listener: str) -> str:
        return self.config.for_listener(listener).protocol

    def listener_context(self, name: str) -> ListenerContext:
        return ListenerContext(
            security=self.config.for_listener(name),
            ssl_context=self.contexts.get(name),
            credentials=self.credentials,
            failed_auth_delay_s=self.config.failed_auth_delay_ms / 1000,
            sasl_max_receive_size=self.config.sasl_max_receive_size,
            limits=self.limits,
            budget=self.budget,
        )

    def close(self) -> None:
        if self.authorizer is not None:
            self.authorizer.close()
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception as e:  # shutting down anyway
                log.warning("closing the ZooKeeper session: %s", e)
            self.zk = None


def credential_store(config: BrokerConfig) -> tuple[CredentialStore, Any]:
    """The SCRAM credential store moverd with this configuration reads, for tools; and how to close it."""
    if config.zookeeper_connect:
        zk = _zk_client(config.zookeeper_connect)
        return ZkCredentialStore(zk), lambda: (zk.stop(), zk.close())
    for d in config.log_dirs:
        d.mkdir(parents=True, exist_ok=True)
    return FileCredentialStore(config.log_dirs), lambda: None


def _zk_client(connect: str) -> Any:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    zk = KazooClient(hosts=connect)
    try:
        zk.start(timeout=ZK_CONNECT_TIMEOUT_S)
    except KazooTimeoutError:
        zk.close()
        raise ConfigError(
            f"zookeeper.connect {connect}: no ZooKeeper answered within {ZK_CONNECT_TIMEOUT_S:.0f} s"
        ) from None
    return zk
