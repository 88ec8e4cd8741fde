"""`Broker`: the context every handler in mover/api receives: the configuration, the LogManager, this node's identity
as clients must see it (the advertised listener), the security stores, the admin executor and the fetch purgatory.

It lives with the handlers that use it, below the daemon that builds it (mover/daemon/broker_server.py): the api layer
imports nothing from the daemon.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mover.api.fetch import AppendNotifier
from mover.config.broker import BrokerConfig, Listener
from mover.log.log_manager import LogManager
from mover.security import session as sessions
from mover.security.broker_security import BrokerSecurity

# Threads for CreateTopics/DeleteTopics: two, so a small create is not queued behind a large one for long.
ADMIN_THREADS = 2


@dataclass
class Broker:
    config: BrokerConfig
    manager: LogManager
    # The first bound listener (port resolved when the configuration said port 0); set once the socket is bound.
    bound: Listener | None = None
    # Every bound listener by name.
    bound_by_name: dict[str, Listener] = field(default_factory=dict)
    # Authentication stores, the authorizer and the connection limits (mover/security/broker_security.py).
    security: BrokerSecurity | None = None
    # Structural admin work (CreateTopics, DeleteTopics) runs here, never in the server's request pool: thousands
    # of partitions take seconds, and queued creates must not leave Metadata or DescribeLogDirs without a thread.
    admin_executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(ADMIN_THREADS, thread_name_prefix="mover-admin"))
    # Fetches waiting for data (long polling); the broker's own state, so a test can see that a fetch parked.
    fetch_purgatory: AppendNotifier = field(default_factory=AppendNotifier)

    @property
    def node_id(self) -> int:
        return self.config.broker_id

    @property
    def advertised(self) -> Listener:
        """The endpoint Metadata advertises to the asking client: the advertised.listeners entry (else the bound
        listener, so port 0 works) with the name of the listener the client connected on, as Kafka answers."""
        session = sessions.current()
        name = session.listener if session is not None else None
        for a in self.config.advertised_listeners or ():
            if a.name == name:
                return a
        if name in self.bound_by_name:
            return self.bound_by_name[name]
        if self.config.advertised_listeners:
            return self.config.advertised_listeners[0]
        assert self.bound is not None, "the listener is not bound yet"
        return self.bound
