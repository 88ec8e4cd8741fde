"""--zookeeper HOST:PORT[/chroot] (deprecated by KIP-179, kept for ZooKeeper-era operators): the brokers come from
`/brokers/ids` and the partitions from `/brokers/topics`; `--execute` and `--move` write `/admin/reassign_partitions`
(the brokers carry it out, mover/zk/reassignment.py), and `--execute`'s throttle goes to `/config/brokers/<id>` with
a change notification, as kafka-reassign-partitions.sh 2.x does. Everything else still talks to the brokers over the
wire. The formats are mover/zk/znodes.py's (docs/zookeeper.md).

`AdminZkClient` (named after Kafka's) is the tools' ZooKeeper session: it reads `/brokers/ids` and `/brokers/topics`
for mover-log-dirs, mover-reassign, and mover-audit's discovery (with `strict=True`: a malformed znode fails the
cluster with a line naming it instead of being skipped); mover/admin/reassign/zookeeper_view.py reads a partition's
replicas and state through the same session during a reassignment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import TracebackType

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, ZookeeperError
from kazoo.handlers.threading import KazooTimeoutError

from mover.admin.assignment import PartitionTarget
from mover.admin.client import Client
from mover.admin.common import AdminError, TopicPartitionReplica
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.config.security import PLAINTEXT
from mover.security.client_config import ClientSecurity
from mover.storage.names import TopicPartition
from mover.zk import znodes

DEPRECATION = ("Warning: --zookeeper is deprecated and will be removed in a future version of mover-log-dirs; "
               "use --bootstrap-server instead (KIP-179)")
CONNECT_TIMEOUT_S = 15.0

# kazoo logs each refused connection attempt at WARNING. The tools configure no logging, so Python's last-resort
# handler printed every attempt to stderr (a dozen lines) above the tool's one-line error; a handler of our own
# stops that, and a program that configures logging still gets the records through propagation.
KAZOO_LOG = logging.getLogger(__name__ + ".kazoo")
KAZOO_LOG.addHandler(logging.NullHandler())


class AdminZkClient:
    """A short ZooKeeper session for one command."""

    def __init__(self, connect: str, *, timeout: float = 10.0, connect_timeout: float | None = None,
                 read_only: bool = False) -> None:
        self.connect = connect
        self.timeout = timeout
        self.connect_timeout = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        self.zk = KazooClient(hosts=connect, timeout=timeout, read_only=read_only, logger=KAZOO_LOG)

    def __enter__(self) -> AdminZkClient:
        try:
            self.zk.start(timeout=self.connect_timeout)
        except KazooTimeoutError:
            self.zk.close()
            raise AdminError(f"cannot connect to ZooKeeper at {self.connect} within {self.connect_timeout:g} s") \
                from None
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.zk.stop()
        self.zk.close()

    # ------------------------------------------------------------------ reading

    def brokers(self, protocol: str = PLAINTEXT, *, strict: bool = False) -> dict[int, tuple[str, int]]:
        """Broker id -> the (host, port) of its endpoint speaking `protocol`, the client's security.protocol. A
        registration that is not Kafka's JSON is skipped, or with `strict` an AdminError naming it."""
        out: dict[int, tuple[str, int]] = {}
        try:
            ids = self.zk.get_children(znodes.BROKER_IDS)
        except NoNodeError:
            raise AdminError(f"no broker is registered in ZooKeeper at {self.connect} (no {znodes.BROKER_IDS}: "
                             "wrong chroot?)") from None
        for name in ids:
            if not name.isdigit():
                continue
            try:
                reg = znodes.decode_broker(int(name), self.zk.get(znodes.broker_path(int(name)))[0])
                out[int(name)] = znodes.registration_address(reg, protocol)
            except NoNodeError:
                continue  # the broker went away (its node is ephemeral) between the listing and the read
            except znodes.NoEndpointError as e:
                raise AdminError(f"ZooKeeper {self.connect}: {e}") from None
            except znodes.ZnodeFormatError as e:
                if strict:
                    raise AdminError(f"ZooKeeper {self.connect}: {e}") from None
        if not out:
            raise AdminError(f"no broker is registered in ZooKeeper at {self.connect} ({znodes.BROKER_IDS} is empty)")
        return out

    def client(self, security: ClientSecurity | None = None) -> Client:
        """A wire client that knows every registered broker (a moverd's Metadata names only itself), at the
        endpoints of the client's security protocol."""
        brokers = self.brokers(security.protocol if security is not None else PLAINTEXT)
        client = Client(",".join(f"{h}:{p}" for h, p in brokers.values()), security=security)
        client.brokers = dict(brokers)
        return client

    def assignment(self, topics: list[str] | None = None, *, strict: bool = False) -> dict[tuple[str, int], list[int]]:
        """(topic, partition) -> its replicas in assignment order, from `/brokers/topics/<topic>` of `topics` (None:
        every topic). A topic znode that is not Kafka's JSON is skipped, or with `strict` an AdminError naming it."""
        if topics is None:
            try:
                topics = self.zk.get_children(znodes.BROKER_TOPICS)
            except NoNodeError:
                topics = []
        # Asked all at once: one round trip per topic, in turn, is seconds for a cluster of thousands of topics.
        pending = [(topic, self.zk.get_async(znodes.topic_path(topic))) for topic in topics]
        out: dict[tuple[str, int], list[int]] = {}
        for topic, reply in pending:
            try:
                parts = znodes.decode_topic(topic, reply.get(timeout=self.timeout)[0])
            except NoNodeError:
                continue  # deleted between the listing and the read
            except znodes.ZnodeFormatError as e:
                if strict:
                    raise AdminError(f"ZooKeeper {self.connect}: {e}") from None
                continue
            for p, ids in parts.items():
                out[(topic, p)] = ids
        return out

    def pending(self) -> set[tuple[str, int]]:
        """The partitions /admin/reassign_partitions still lists (the brokers have not finished them)."""
        try:
            data, _ = self.zk.get(znodes.REASSIGN_PARTITIONS)
            return {(e.tp.topic, e.tp.partition) for e in znodes.decode_reassignment(data).entries}
        except NoNodeError:
            return set()
        except znodes.ZnodeFormatError as e:
            raise AdminError(f"{znodes.REASSIGN_PARTITIONS} is unreadable: {e}") from None

    # ------------------------------------------------------------------ writing

    def write_reassignment(self, entries: list[znodes.ReassignmentEntry]) -> None:
        """Add the entries to /admin/reassign_partitions (an entry for the same partition is replaced), under the
        znode's version; creates it when absent."""
        try:
            while True:
                try:
                    data, stat = self.zk.get(znodes.REASSIGN_PARTITIONS)
                except NoNodeError:
                    try:
                        self.zk.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(entries),
                                       makepath=True)
                        return
                    except NodeExistsError:
                        continue
                try:
                    existing = znodes.decode_reassignment(data).entries
                except znodes.ZnodeFormatError:
                    existing = []  # the elected broker records and removes an unreadable znode; ours replaces it
                mine = {e.tp for e in entries}
                merged = [e for e in existing if e.tp not in mine] + entries
                try:
                    self.zk.set(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(merged), version=stat.version)
                    return
                except (BadVersionError, NoNodeError):
                    continue
        except (KazooException, ZookeeperError) as e:
            raise AdminError(f"cannot write {znodes.REASSIGN_PARTITIONS}: {e or type(e).__name__}") from None

    def set_throttle(self, brokers: list[int], rate: int) -> None:
        """As kafka-reassign-partitions.sh's maybeLimit: the broker's config znode, then a change notification."""
        for broker in brokers:
            change_config(self.zk, znodes.config_path(str(broker)), str(broker), f"brokers/{broker}",
                          {THROTTLE_KAFKA_KEY: str(rate)})


def change_config(zk: KazooClient, path: str, name: str, entity: str, entries: Mapping[str, str | None]) -> None:
    """Kafka's AdminZkClient.changeConfigs: the entity's config znode read, changed (None deletes a key) and written
    under the version read, so a writer in between is not overwritten (then read again); then a change
    notification, which is what makes the brokers reload it."""
    while True:
        try:
            data, stat = zk.get(path)
            config, version = znodes.decode_config(name, data), stat.version
        except NoNodeError:
            config, version = {}, -1
        for k, v in entries.items():
            if v is None:
                config.pop(k, None)
            else:
                config[k] = v
        try:
            if version == -1:
                zk.create(path, znodes.encode_config(config), makepath=True)
            else:
                zk.set(path, znodes.encode_config(config), version=version)
            break
        except (BadVersionError, NodeExistsError, NoNodeError):
            time.sleep(0.01)  # changed under us: read it again
    zk.create(f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}", znodes.encode_config_change(entity),
              sequence=True, makepath=True)


def entries_of_targets(targets: list[PartitionTarget]) -> list[znodes.ReassignmentEntry]:
    return [znodes.ReassignmentEntry(TopicPartition(t.topic, t.partition), t.replicas, t.log_dirs) for t in targets]


def entries_of_moves(moves: dict[TopicPartitionReplica, str]) -> list[znodes.ReassignmentEntry]:
    return [znodes.ReassignmentEntry(TopicPartition(r.topic, r.partition), (r.broker,), (d,))
            for r, d in moves.items()]
