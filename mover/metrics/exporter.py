"""MetricsExporter: the Prometheus text endpoint on `metrics.listener`, served by prometheus-client's WSGI server
on its own threads (one per scrape), never on the asyncio loop that serves Kafka clients."""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


class MetricsExporter:
    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve. Raises OSError when the address cannot be bound."""
        self._server, self._thread = start_http_server(self.port, self.host, registry=self.registry)
        self.port = int(self._server.server_port)
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
