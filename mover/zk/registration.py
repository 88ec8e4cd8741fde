"""Broker membership in ZooKeeper, as Kafka brokers register: `/cluster/id`, the ephemeral `/brokers/ids/<id>`, and
`/brokers/topics/<topic>` for the partitions this broker hosts.

* Cluster id: the first broker creates `/cluster/id`; every later one adopts it. A broker whose meta.properties
  names another cluster refuses to start (Kafka's InconsistentClusterIdException).
* Broker id: an existing `/brokers/ids/<id>` owned by another session is this broker's own leftover from a crash
  (its session outlives the process by up to zookeeper.session.timeout.ms) when the session id matches the one this
  broker recorded in its log dirs, or when the znode advertises the very address this process has just bound (no
  other live process can be listening there). Such a znode is deleted and registered again: a restart after
  kill -9 is not blocked, where Kafka 2.3 fails with NodeExists until the old session expires. Any other owner is a
  live broker with the same id: start-up is refused, and a running broker that finds its id taken after its session
  expired is fenced (mover/zk/coordinator.py) until it holds the id again.
* Topics: several moverd brokers may host partitions of one topic; each merges its id into the assignment under the
  znode's version (a BadVersion means another broker wrote in between: read again and retry).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from mover.config.broker import Listener
from mover.storage.broker_files import BrokerFiles
from mover.storage.names import TopicPartition
from mover.zk import znodes

log = logging.getLogger(__name__)

SESSION_FILE = "zookeeper-session.json"


class BrokerIdConflictError(Exception):
    """Another live broker holds this broker id in ZooKeeper."""


class ClusterIdMismatchError(Exception):
    """meta.properties names another cluster than ZooKeeper's /cluster/id."""


def agree_cluster_id(client: KazooClient, local: str | None, proposed: str) -> str:
    """The cluster id to use: ZooKeeper's if set (checked against meta.properties' `local`), else `local`, else
    `proposed`, created in ZooKeeper by this first broker."""
    while True:
        try:
            data, _ = client.get(znodes.CLUSTER_ID)
        except NoNodeError:
            mine = local or proposed
            try:
                client.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(mine), makepath=True)
                log.info("created cluster id %s in ZooKeeper", mine)
                return mine
            except NodeExistsError:
                continue  # another broker created it first: adopt theirs
        zk_id = znodes.decode_cluster_id(data)
        if local and local != zk_id:
            raise ClusterIdMismatchError(
                f"the cluster id in meta.properties ({local}) does not match ZooKeeper's /cluster/id ({zk_id}): "
                "these log dirs belong to another cluster")
        return zk_id


class BrokerRegistrar:
    def __init__(self, client: KazooClient, broker_id: int, *, rack: str | None = None) -> None:
        self.client = client
        self.broker_id = broker_id
        self.rack = rack
        self.listeners: list[Listener] = []
        self.protocols: dict[str, str] = {}  # listener name -> security protocol, for listener_security_protocol_map
        self.files = BrokerFiles(())  # where the session id is remembered: the broker's, set before register()
        self._registered_topics: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ /brokers/ids/<id>

    def register(self) -> int:
        """Create the ephemeral registration for the current session; returns that session's id. Raises
        BrokerIdConflictError."""
        path = znodes.broker_path(self.broker_id)
        data = znodes.encode_broker(self.listeners, self.protocols, rack=self.rack,
                                    timestamp_ms=int(time.time() * 1000))
        session = self.client.client_id[0]
        for _ in range(10):
            try:
                self.client.create(path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    existing, stat = self.client.get(path)
                except NoNodeError:
                    continue  # the old session just expired: create again
                if stat.ephemeralOwner == session:
                    break  # ours already (a retried create after a connection loss)
                if not self._stale(existing, stat.ephemeralOwner):
                    raise BrokerIdConflictError(
                        f"broker id {self.broker_id} is registered in ZooKeeper by another live broker "
                        f"(session 0x{stat.ephemeralOwner:x}, {existing.decode(errors='replace')}); "
                        "give this broker another broker.id") from None
                log.warning("broker id %d: taking over the registration left by this broker's previous run "
                            "(session 0x%x)", self.broker_id, stat.ephemeralOwner)
                try:
                    self.client.delete(path, version=stat.version)
                except (NoNodeError, BadVersionError):
                    pass
        else:
            raise BrokerIdConflictError(f"broker id {self.broker_id}: could not register in ZooKeeper")
        self._remember_session(session)
        log.info("registered as broker %d in ZooKeeper (session 0x%x)", self.broker_id, session)
        return session

    def _stale(self, existing: bytes, owner: int) -> bool:
        remembered = self.files.read_newest_json(SESSION_FILE, lambda d: int(d.get("epoch_ms", 0)), "zk session")
        if remembered is not None and remembered.get("session_id") == owner:
            return True
        try:
            theirs = znodes.decode_broker(self.broker_id, existing)
        except znodes.ZnodeFormatError:
            return False
        mine = {f"{lst.name}://{lst.host}:{lst.port}" for lst in self.listeners}
        return bool(theirs.endpoints) and set(theirs.endpoints) <= mine

    def _remember_session(self, session: int) -> None:
        self.files.write_json(SESSION_FILE, {"version": 1, "session_id": session, "epoch_ms": int(time.time() * 1000)},
                              "zk session")

    # ------------------------------------------------------------------ /brokers/topics/<topic>

    def forget_topics(self) -> None:
        """After a new session: write every topic again (another broker may have rewritten them meanwhile)."""
        self._registered_topics = {}

    def sync_topics(self, hosted: Iterable[TopicPartition]) -> None:
        wanted: dict[str, set[int]] = {}
        for tp in hosted:
            wanted.setdefault(tp.topic, set()).add(tp.partition)
        for topic in set(wanted) | set(self._registered_topics):
            parts = wanted.get(topic, set())
            if self._registered_topics.get(topic) == parts:
                continue
            self._merge_topic(topic, parts)
            if parts:
                self._registered_topics[topic] = parts
            else:
                self._registered_topics.pop(topic, None)

    def _merge_topic(self, topic: str, mine: set[int]) -> None:
        path = znodes.topic_path(topic)
        while True:
            try:
                data, stat = self.client.get(path)
                try:
                    assignment = znodes.decode_topic(topic, data)
                except znodes.ZnodeFormatError as e:
                    log.warning("rewriting malformed %s: %s", path, e)
                    assignment = {}
                version = stat.version
            except NoNodeError:
                assignment, version = {}, -1
            # Keep the order others wrote (a finished reassignment sets it): only add or remove this broker's id.
            merged = {p: [b for b in ids if b != self.broker_id or p in mine] for p, ids in assignment.items()}
            for p in mine:
                if self.broker_id not in merged.setdefault(p, []):
                    merged[p].append(self.broker_id)
            merged = {p: ids for p, ids in merged.items() if ids}
            if merged == assignment:
                return
            try:
                if version == -1:
                    self.client.create(path, znodes.encode_topic(merged), makepath=True)
                elif not merged:
                    self.client.delete(path, version=version)
                else:
                    self.client.set(path, znodes.encode_topic(merged), version=version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker wrote in between: merge again
