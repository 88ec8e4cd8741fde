"""The broker in-process: the LogManager and the Kafka listener exactly as moverd starts them (mover/daemon/main.py), on
a free loopback port, for tests that must look at the broker's own state while clients talk to it over a real socket
(a fetch parked in the purgatory, say). Everything else should use a real process (mover/testing/moverd.py).

    with InProcessBroker(tmp_path) as b:
        b.port, b.bootstrap, b.dirs
        b.broker.fetch_purgatory.parked     # the broker's state, read from the test's thread
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mover.api.broker import Broker
from mover.config.broker import BrokerConfig
from mover.daemon.broker_server import BrokerServer
from mover.log.log_manager import LogManager
from mover.testing.moverd import broker_props


class InProcessBroker:
    def __init__(self, tmp_path: Path, *, props: dict[str, Any] | None = None, n_dirs: int = 2) -> None:
        self.dirs = [tmp_path / f"d{i + 1}" for i in range(n_dirs)]
        self.props = broker_props(self.dirs)
        self.props.update(props or {})
        self.manager: LogManager | None = None
        self.server: BrokerServer | None = None

    @property
    def broker(self) -> Broker:
        assert self.server is not None, "not started"
        return self.server.broker

    @property
    def bootstrap(self) -> str:
        assert self.server is not None, "not started"
        return self.server.address

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def start(self) -> InProcessBroker:
        config = BrokerConfig.from_properties({k: str(v) for k, v in self.props.items()})
        self.manager = LogManager(config)
        self.manager.startup()
        self.server = BrokerServer(config, self.manager)
        try:
            self.server.start()
        except BaseException:
            self.manager.shutdown()
            raise
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.manager is not None:
            self.manager.shutdown()
            self.manager = None

    def __enter__(self) -> InProcessBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
