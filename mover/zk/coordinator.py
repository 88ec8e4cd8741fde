"""ZooKeeperCoordinator: what the daemon holds when `zookeeper.connect` is set; the only entry point of mover/zk.

The daemon calls, in order: `connect()` and `cluster_id()` before the log manager starts (the cluster id must be
known before meta.properties is written), `start(manager, listeners)` once the listener is bound (registration
refuses a broker id held by another live broker), `stop()` at shutdown. Everything else runs on the ZooKeeper
worker thread and the cleaner thread; the manager and the dynamic config reach it only through the two callbacks
registered in `start` (request ids for AlterReplicaLogDirs, config writes for IncrementalAlterConfigs), and neither
waits on ZooKeeper beyond a short bound.

`session_state()` is the read-only view for metrics (ZooKeeper session state gauge).

Fencing: this broker acts on ZooKeeper (reads and carries out reassignments, writes status, topics and configs,
records wire requests, stands for the cleaner election) only while it holds `/brokers/ids/<id>` in the current
session (`holds_id`). When its session expired (the process frozen, a partition) and another live broker took the id
meanwhile, re-registering fails: the broker is fenced, says so once, keeps serving clients and the moves already
running, and tries to register again every second; once the id is free and its own again, it re-reads everything as
after any new session and acts again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mover.config.broker import BrokerConfig, Listener
from mover.storage.names import TopicPartition
from mover.zk.cleaner import ReassignmentCleaner
from mover.zk.client import ZK_ERRORS, ZkSession, ZkUnavailableError
from mover.zk.config_changes import ConfigChangeListener
from mover.zk.reassignment import ReassignmentExecutor
from mover.zk.registration import (
    BrokerIdConflictError,
    BrokerRegistrar,
    ClusterIdMismatchError,
    agree_cluster_id,
)
from mover.zk.znodes import ZnodeFormatError

if TYPE_CHECKING:
    from mover.log.log_manager import LogManager
    from mover.moves import MoveOutcome, ReplicaMove

log = logging.getLogger(__name__)

# How long an AlterReplicaLogDirs waits for its cluster-wide request id before answering with the local one.
REQUEST_ID_TIMEOUT_S = 2.0
# /brokers/topics is compared with the hosted partitions every this many worker ticks (250 ms each): a walk of every
# partition, cheap but not free with 10,000 of them.
TOPIC_SYNC_TICKS = 4
# Session states as numbers, for a gauge.
SESSION_STATES = {"not started": 0, "connected": 1, "suspended": 2, "expired": 3, "closed": 4, "fenced": 5}
# While fenced, registration is tried again every this many worker ticks.
REREGISTER_TICKS = 4


class ZooKeeperStartError(Exception):
    """moverd cannot start with this ZooKeeper: unreachable, another cluster, or the broker id is taken."""


class ZooKeeperCoordinator:
    def __init__(self, config: BrokerConfig) -> None:
        assert config.zookeeper_connect
        self.config = config
        self.session = ZkSession(config.zookeeper_connect,
                                 session_timeout_ms=config.zookeeper_session_timeout_ms,
                                 connection_timeout_ms=config.zookeeper_connection_timeout_ms)
        self.registrar: BrokerRegistrar | None = None
        self.executor: ReassignmentExecutor | None = None
        self.configs: ConfigChangeListener | None = None
        self.cleaner: ReassignmentCleaner | None = None
        self._manager: LogManager | None = None
        self._ticks = 0
        self._registered_session: int | None = None  # the session /brokers/ids/<id> was created in
        self._fenced = False

    # ------------------------------------------------------------------ start-up

    def connect(self) -> None:
        try:
            self.session.start()
        except ZkUnavailableError as e:
            raise ZooKeeperStartError(str(e)) from None

    def cluster_id(self, local: str | None, proposed: str) -> str:
        try:
            return agree_cluster_id(self.session.client, local, proposed)
        except (ClusterIdMismatchError, ZnodeFormatError) as e:
            raise ZooKeeperStartError(str(e)) from None
        except ZK_ERRORS as e:
            raise ZooKeeperStartError(f"cannot read /cluster/id: {e or type(e).__name__}") from None

    def start(self, manager: LogManager, listeners: list[Listener]) -> None:
        """Register (raises ZooKeeperStartError when the broker id is taken), then watch and report."""
        self._manager = manager
        client = self.session.client
        self.registrar = BrokerRegistrar(client, self.config.broker_id)
        self.registrar.listeners = listeners
        self.registrar.protocols = self.config.listener_protocols
        self.registrar.files = manager.broker_files
        try:
            self._registered_session = self.registrar.register()
        except BrokerIdConflictError as e:
            raise ZooKeeperStartError(str(e)) from None
        except ZK_ERRORS as e:
            raise ZooKeeperStartError(f"cannot register in ZooKeeper: {e or type(e).__name__}") from None
        self.executor = ReassignmentExecutor(self.session, manager, self.config.broker_id)
        self.configs = ConfigChangeListener(self.session, manager.dynamic_config, self.config.broker_id)
        self.cleaner = ReassignmentCleaner(self.session, self.config.broker_id,
                                           self.config.reassign_status_retention_ms)
        self.session.on_connected = self._on_connected
        self.session.tick = self._tick
        self.session.may_act = self.holds_id
        self.cleaner.may_act = self.holds_id
        manager.request_recorder = self._record_request
        manager.dynamic_config.change_listeners.append(self.configs.layer_altered)
        manager.add_move_observer(self)  # move_started / move_ended
        # The first read of the znodes happens before moverd says it is ready: configs written while it was down
        # apply before the first client request; reassignments written meanwhile start.
        try:
            self._on_connected()
            first_read = True
        except ZK_ERRORS as e:
            log.warning("first read of the znodes failed (%s); retrying on the ZooKeeper worker", e or type(e).__name__)
            first_read = False
        self.session.start_worker()
        if not first_read:
            self.session.post("connected", self._on_connected)
        self.cleaner.start()

    def stop(self) -> None:
        if self._manager is not None:
            self._manager.request_recorder = None
        if self.cleaner is not None:
            self.cleaner.stop()
        self.session.stop()

    def session_state(self) -> str:
        """"connected", "fenced" (connected, but another live broker holds this broker id), "suspended",
        "expired", "not started" or "closed" (numbers in SESSION_STATES)."""
        state = self.session.state
        return "fenced" if state == "connected" and self._fenced else state

    def holds_id(self) -> bool:
        """True while /brokers/ids/<id> is this broker's in the current session: the fence every ZooKeeper action
        but registration passes. Cheap, safe from any thread."""
        current = self.session.session_id
        return current is not None and current == self._registered_session

    # ------------------------------------------------------------------ on the worker

    def _on_connected(self) -> None:
        assert self.registrar is not None and self.executor is not None and self.configs is not None
        if self._manager is None:
            return
        if not self._register():
            return
        self.registrar.forget_topics()
        self._sync_topics()
        self.configs.on_connected()
        self.executor.on_connected()

    def _register(self) -> bool:
        """Register in the current session; False (fenced) when another live broker holds the id."""
        assert self.registrar is not None
        try:
            session = self.registrar.register()
        except BrokerIdConflictError as e:
            if not self._fenced:
                self._fenced = True
                log.error("fenced: %s. Not acting on reassignments, status or configs in ZooKeeper until this "
                          "broker holds the id again (clients are still served)", e)
            return False
        self._registered_session = session
        if self._fenced:
            self._fenced = False
            log.warning("broker id %d is this broker's again in ZooKeeper: no longer fenced", self.config.broker_id)
        return True

    def _tick(self) -> None:
        if self.executor is None:
            return
        self._ticks += 1
        if not self.holds_id():
            # A new session not registered yet (its first registration failed or was fenced): try again.
            if self._ticks % REREGISTER_TICKS == 0:
                self._on_connected()
            return
        if self._ticks % TOPIC_SYNC_TICKS == 0:
            self._sync_topics()
        self.executor.publish()

    def _sync_topics(self) -> None:
        assert self.registrar is not None and self._manager is not None
        hosted = [tp for tp, r in list(self._manager.replicas.items()) if r.log is not None or r.offline]
        self.registrar.sync_topics(hosted)

    # ------------------------------------------------------------------ called by the manager

    def _record_request(self, local_id: int, moves: list[tuple[TopicPartition, str]]) -> int:
        """AlterReplicaLogDirs started moves: give them a cluster-wide request id (the local one when ZooKeeper
        does not answer in time; the moves run either way)."""
        executor = self.executor
        if executor is None:
            return local_id
        if not self.session.connected or not self.holds_id():
            # Recorded at the next connection (or once no longer fenced), under a cluster-wide id of its own that
            # names this local one.
            executor.unrecorded.append((local_id, moves))
            log.warning("ZooKeeper unavailable%s: request %d gets its status in ZooKeeper once it is back",
                        " (fenced)" if self._fenced else "", local_id)
            return local_id
        rid = self.session.call(lambda: executor.record_wire_request(moves), REQUEST_ID_TIMEOUT_S)
        if rid is None:
            log.warning("ZooKeeper did not answer in time: request %d keeps its local id", local_id)
            return local_id
        assert self._manager is not None
        self._manager.requests.rekey(local_id, rid)
        return rid

    def move_started(self, move: ReplicaMove) -> None:
        pass

    def move_ended(self, outcome: MoveOutcome) -> None:
        # Report the final state now rather than at the next tick (the cleaner is waiting for it).
        if self.executor is not None:
            self.session.post("publish", lambda: self.executor.publish(force=True) if self.executor else None)
