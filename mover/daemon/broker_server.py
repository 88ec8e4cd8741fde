"""The Kafka-protocol face of moverd: the listener on its own event-loop thread.

`BrokerServer` builds the `Broker` context the handlers receive (mover/api/broker.py) and runs `mover.server.Server`
with the routes of every module in `mover.api.MODULES`, on a dedicated thread so the daemon's main thread stays free
for signals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from mover.api import collect_routes
from mover.api.broker import Broker
from mover.config.broker import BrokerConfig, Listener
from mover.log.log_manager import LogManager
from mover.security.broker_security import BrokerSecurity
from mover.server import DEFAULT_IO_THREADS, Server
from mover.server.server import RequestObserver
from mover.storage.open_files import open_files

log = logging.getLogger(__name__)

# How long start-up waits for the loop thread to bind, and shutdown for connections to close. Binding is
# immediate on a free port; this only bounds a hang.
LOOP_TIMEOUT_S = 30.0

class BrokerServer:
    def __init__(self, config: BrokerConfig, manager: LogManager, *,
                 request_observer: RequestObserver | None = None) -> None:
        self.broker = Broker(config, manager)
        self._request_observer = request_observer
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="moverd-net", daemon=True)
        self._servers: list[Server] = []
        self._executor = ThreadPoolExecutor(DEFAULT_IO_THREADS, thread_name_prefix="mover-io")

    @property
    def address(self) -> str:
        b = self.broker.bound
        return f"{b.host}:{b.port}" if b is not None else ""

    @property
    def addresses(self) -> dict[str, str]:
        """Every bound listener: {name: host:port}."""
        return {name: f"{b.host}:{b.port}" for name, b in self.broker.bound_by_name.items()}

    def advertised_listeners(self) -> list[Listener]:
        """Every listener as clients must reach it (advertised.listeners by name, else where it is bound), the
        first listener first: what the ZooKeeper registration lists as endpoints."""
        advertised = {a.name: a for a in self.broker.config.advertised_listeners or ()}
        return [advertised.get(name, bound) for name, bound in self.broker.bound_by_name.items()]

    def start(self) -> None:
        """Bind every listener and serve. Raises OSError when a listener cannot be bound (port taken), ConfigError
        when a key store cannot be loaded."""
        config = self.broker.config
        security = self.broker.security or BrokerSecurity.build(config, self.broker.manager)
        self.broker.security = security
        routes = collect_routes(self.broker)
        self._thread.start()
        try:
            for listener in config.listeners:
                server = Server(
                    routes,
                    host=listener.host,
                    port=listener.port,
                    max_request_size=config.socket_request_max_bytes,
                    executor=self._executor,
                    idle_timeout=security.idle_timeout_s,
                    security=security.listener_context(listener.name),
                    request_observer=self._request_observer,
                )
                # Out of descriptors at accept: close idle segment files (reopened on demand) so new clients get in.
                server.on_accept_failure = lambda _e: open_files().shrink(len(open_files()) // 2)
                asyncio.run_coroutine_threadsafe(server.start(), self._loop).result(LOOP_TIMEOUT_S)
                self._servers.append(server)
                bound = Listener(listener.name, listener.host, server.port)
                self.broker.bound_by_name[listener.name] = bound
                if self.broker.bound is None:
                    self.broker.bound = bound
                log.info("listening on %s (%s)", bound, security.protocol_of(listener.name))
        except BaseException:
            self.stop()
            raise

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the serving loop (from any thread); RuntimeError once the loop is closed."""
        self._loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        for server in self._servers:
            try:
                asyncio.run_coroutine_threadsafe(server.close(), self._loop).result(LOOP_TIMEOUT_S)
            except Exception as e:  # shutting down anyway; say why it was not clean
                log.warning("closing the listener: %s", e)
        self._servers = []
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.broker.security is not None:
            self.broker.security.close()
        self._stop_loop()
        self.broker.admin_executor.shutdown(wait=True, cancel_futures=True)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(LOOP_TIMEOUT_S)
        if not self._loop.is_closed():
            self._loop.close()
