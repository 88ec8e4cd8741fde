"""Dynamic broker configs through ZooKeeper, as ZooKeeper-era Kafka keeps them (kafka-configs.sh --zookeeper).

* `/config/brokers/<id>` (this broker) and `/config/brokers/<default>` (every broker) hold
  `{"version":1,"config":{...}}`; a writer then creates a sequential `/config/changes/config_change_NNNNNNNNNN` with
  `{"version":2,"entity_path":"brokers/<id>"}` (version 1, `{"version":1,"entity_type":"brokers","entity_name":..}`,
  from older tools, is accepted too). A notification for this broker or the default makes moverd re-read that
  entity and apply it to the running throttle: the per-broker layer wins over the default, a removed key falls back
  (DynamicBrokerConfig's layers).
* Both entities are read in full after every (re)connection, so a change made while moverd was away or
  disconnected is applied; notifications are only the wake-up.
* IncrementalAlterConfigs received over the wire writes the same znodes (keeping keys moverd does not own, such as
  other Kafka broker settings, untouched) and a notification: one source of truth per cluster. A change made while
  ZooKeeper is away is kept and written at the next connection, before the znodes are read back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from mover.config.broker import DYNAMIC_KEYS
from mover.zk import znodes
from mover.zk.client import ZK_ERRORS, ZkSession

if TYPE_CHECKING:
    from mover.config.dynamic import DynamicBrokerConfig, Scope

log = logging.getLogger(__name__)


class ConfigChangeListener:
    def __init__(self, session: ZkSession, dynamic: DynamicBrokerConfig, broker_id: int) -> None:
        from mover.config.dynamic import Scope

        self.session = session
        self.dynamic = dynamic
        self.entities = {str(broker_id): Scope.BROKER, znodes.DEFAULT_ENTITY: Scope.CLUSTER_DEFAULT}
        self._last_seen = -1
        self._unwritten: dict[Scope, dict[str, str]] = {}

    @property
    def client(self):  # noqa: ANN201 - KazooClient
        return self.session.client

    def on_connected(self) -> None:
        for scope, layer in list(self._unwritten.items()):
            self._write(scope, layer)
        for entity in self.entities:
            self._load(entity)
        self._reread_changes(initial=True)

    def _load(self, entity: str) -> None:
        path = znodes.config_path(entity)
        try:
            data, _ = self.client.get(path)
            config = znodes.decode_config(entity, data)
        except NoNodeError:
            config = {}
        except znodes.ZnodeFormatError as e:
            log.warning("ignoring %s: %s", path, e)
            return
        scope = self.entities[entity]
        if scope in self._unwritten:
            return  # a local change not yet in ZooKeeper is newer than what ZooKeeper holds; it is written next
        ours = {k: v for k, v in config.items() if k in DYNAMIC_KEYS}
        self.dynamic.replace_layer(scope, ours, source=f"ZooKeeper {path}")

    def _watch(self, _event: WatchedEvent) -> None:
        self.session.post("config-changes", self._reread_changes)

    def _reread_changes(self, *, initial: bool = False) -> None:
        try:
            children = self.client.get_children(znodes.CONFIG_CHANGES, watch=self._watch)
        except NoNodeError:
            self.client.ensure_path(znodes.CONFIG_CHANGES)
            children = self.client.get_children(znodes.CONFIG_CHANGES, watch=self._watch)
        seqs = sorted((int(c[len(znodes.CONFIG_CHANGE_PREFIX):]), c) for c in children
                      if c.startswith(znodes.CONFIG_CHANGE_PREFIX) and c[len(znodes.CONFIG_CHANGE_PREFIX):].isdigit())
        if initial:
            # Both entities were just read in full: older notifications carry nothing new.
            self._last_seen = max([self._last_seen, *(s for s, _ in seqs)])
            return
        for seq, name in seqs:
            if seq <= self._last_seen:
                continue
            self._last_seen = seq
            try:
                data, _ = self.client.get(f"{znodes.CONFIG_CHANGES}/{name}")
                entity_type, entity_name = znodes.decode_config_change(data)
            except NoNodeError:
                continue
            except znodes.ZnodeFormatError as e:
                log.warning("ignoring config notification %s: %s", name, e)
                continue
            if entity_type == "brokers" and entity_name in self.entities:
                log.info("config notification %s for brokers/%s", name, entity_name)
                self._load(entity_name)

    # ------------------------------------------------------------------ IncrementalAlterConfigs -> ZooKeeper

    def layer_altered(self, scope: Scope, layer: dict[str, str]) -> None:
        """Called from the request thread after an IncrementalAlterConfigs: queue the write, never block."""
        self._unwritten[scope] = dict(layer)
        self.session.post(f"config-write-{int(scope)}", lambda: self._write(scope, self._unwritten.get(scope)))

    def _write(self, scope: Scope, layer: dict[str, str] | None) -> None:
        if layer is None:
            return
        entity = next(e for e, s in self.entities.items() if s == scope)
        path = znodes.config_path(entity)
        try:
            while True:
                try:
                    data, stat = self.client.get(path)
                    current = znodes.decode_config(entity, data)
                    version = stat.version
                except NoNodeError:
                    current, version = {}, -1
                except znodes.ZnodeFormatError:
                    current, version = {}, self.client.exists(path).version
                config = {k: v for k, v in current.items() if k not in DYNAMIC_KEYS}
                config.update(layer)
                try:
                    if version == -1:
                        self.client.create(path, znodes.encode_config(config), makepath=True)
                    else:
                        self.client.set(path, znodes.encode_config(config), version=version)
                    break
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
            self.client.create(f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
                               znodes.encode_config_change(f"brokers/{entity}"), sequence=True, makepath=True)
        except ZK_ERRORS:
            log.warning("could not write %s to ZooKeeper yet; will at the next connection", path)
            raise
        if self._unwritten.get(scope) == layer:
            del self._unwritten[scope]
