"""The Kafka-protocol face of moverd: the listener on its own event-loop thread, and what handlers may use.

`Broker` is the context every handler in mover/api receives: the configuration, the LogManager, and this node's
identity as clients must see it (the advertised listener). `BrokerServer` runs `mover.server.Server` with the
routes of every module in `mover.api.MODULES`, on a dedicated thread so the daemon's main thread stays free for
signals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mover.api import collect_routes
from mover.api.fetch import AppendNotifier
from mover.config import BrokerConfig, Listener
from mover.log_manager import LogManager
from mover.server import Server
from mover.server.server import RequestObserver
from mover.storage.open_files import open_files

log = logging.getLogger(__name__)

# How long start-up waits for the loop thread to bind, and shutdown for connections to close. Binding is
# immediate on a free port; this only bounds a hang.
LOOP_TIMEOUT_S = 30.0

# Threads for CreateTopics/DeleteTopics: two, so a small create is not queued behind a large one for long.
ADMIN_THREADS = 2


@dataclass
class Broker:
    config: BrokerConfig
    manager: LogManager
    # The bound listener (port resolved when the configuration said port 0); set once the socket is bound.
    bound: Listener | None = None
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
        """The endpoint Metadata advertises: advertised.listeners, else the bound listener (so port 0 works)."""
        if self.config.advertised_listeners:
            return self.config.advertised_listeners[0]
        assert self.bound is not None, "the listener is not bound yet"
        return self.bound


class BrokerServer:
    def __init__(self, config: BrokerConfig, manager: LogManager, *,
                 request_observer: RequestObserver | None = None) -> None:
        self.broker = Broker(config, manager)
        self._request_observer = request_observer
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="moverd-net", daemon=True)
        self._server: Server | None = None

    @property
    def address(self) -> str:
        b = self.broker.bound
        return f"{b.host}:{b.port}" if b is not None else ""

    def start(self) -> None:
        """Bind and serve. Raises OSError when the listener cannot be bound (port taken)."""
        listener = self.broker.config.listeners[0]
        server = Server(
            collect_routes(self.broker),
            host=listener.host,
            port=listener.port,
            max_request_size=self.broker.config.socket_request_max_bytes,
            request_observer=self._request_observer,
        )
        # Out of descriptors at accept: close idle segment files (reopened on demand) so new clients get in.
        server.on_accept_failure = lambda _e: open_files().shrink(len(open_files()) // 2)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(server.start(), self._loop).result(LOOP_TIMEOUT_S)
        except BaseException:
            self._stop_loop()
            raise
        self._server = server
        self.broker.bound = Listener(listener.name, listener.host, server.port)
        log.info("listening on %s", self.broker.bound)

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the serving loop (from any thread); RuntimeError once the loop is closed."""
        self._loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        if self._server is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._server.close(), self._loop).result(LOOP_TIMEOUT_S)
            except Exception as e:  # shutting down anyway; say why it was not clean
                log.warning("closing the listener: %s", e)
            self._server = None
        self._stop_loop()
        self.broker.admin_executor.shutdown(wait=True, cancel_futures=True)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(LOOP_TIMEOUT_S)
        self._loop.close()
