"""A cluster of real moverd brokers sharing one ZooKeeper chroot, and a kazoo client to look at the znodes (the
ZooKeeper tests and mover-audit's discovery through ZooKeeper); a reassignment written to its znode as Kafka's tools
write it, and one asked of a broker over the wire."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS

# Short enough that a killed broker's session ends within a few seconds (the server's minimum is 2 ticks).
SESSION_TIMEOUT_MS = 2000
_chroots = itertools.count()
REASSIGN = "/admin/reassign_partitions"


def broker_props(connect: str, broker_id: int, **extra: Any) -> dict[str, Any]:
    return {"broker.id": broker_id, "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS, **extra}


def new_chroot(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a chroot of its own, so tests sharing the module's server do not see each other."""
    return f"{zookeeper.connect_string}/t{next(_chroots)}"


@contextmanager
def zk_client(connect: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=connect)
    client.start(timeout=30)
    client.ensure_path("/")
    try:
        yield client
    finally:
        client.stop()
        client.close()


@contextmanager
def moverd_cluster(tmp_path: Path, connect: str, n: int, n_dirs: int = 2, **extra: Any) -> Iterator[list[Moverd]]:
    """`n` moverd brokers (ids 0 ... n-1) registered in the ZooKeeper chroot `connect`, `n_dirs` log dirs each."""
    brokers: list[Moverd] = []
    try:
        for i in range(n):
            d = tmp_path / f"broker{i}"
            d.mkdir(exist_ok=True)
            brokers.append(Moverd(d, props=broker_props(connect, i, **extra), n_dirs=n_dirs).start())
        yield brokers
    finally:
        for b in brokers:
            if b.proc is not None:
                b.stop()


def read_json(client: KazooClient, path: str) -> Any:
    try:
        return json.loads(client.get(path)[0])
    except NoNodeError:
        return None


def statuses(client: KazooClient) -> dict[int, dict[str, Any]]:
    """{request id: {"request": descriptor, "brokers": {broker id: status}}} of the whole status tree."""
    out: dict[int, dict[str, Any]] = {}
    try:
        ids = client.get_children("/admin/reassign_partitions_status")
    except NoNodeError:
        return out
    for rid in ids:
        base = f"/admin/reassign_partitions_status/{rid}"
        try:
            out[int(rid)] = {"request": read_json(client, base),
                             "brokers": {int(b): read_json(client, f"{base}/{b}") for b in client.get_children(base)}}
        except NoNodeError:
            continue
    return out


def replica_state(client: KazooClient, broker: int, topic: str, partition: int) -> dict[str, Any] | None:
    """The newest status this broker reported for the replica."""
    for _rid, s in sorted(statuses(client).items(), reverse=True):
        body = s["brokers"].get(broker)
        for r in (body or {}).get("replicas", []):
            if r["topic"] == topic and r["partition"] == partition:
                return {**r, "request_id": _rid}
    return None


def reassignment_entry(topic: str, partition: int, replicas: list[int], log_dirs: list[str] | None) -> dict[str, Any]:
    """One partition of a reassignment znode (`log_dirs` None: no log_dirs key)."""
    e: dict[str, Any] = {"topic": topic, "partition": partition, "replicas": replicas}
    if log_dirs is not None:
        e["log_dirs"] = log_dirs
    return e


def write_reassignment(zk: KazooClient, entries: list[dict[str, Any]]) -> None:
    """Create the reassignment znode (REASSIGN) holding `entries`, version 1, compact JSON."""
    data = json.dumps({"version": 1, "partitions": entries}, separators=(",", ":")).encode()
    zk.create(REASSIGN, data, makepath=True)


def alter_dir_reply(d: Moverd, topic: str, partition: int, path: str) -> dict[str, Any]:
    """A raw AlterReplicaLogDirs v2 of one partition to `path`, sent to moverd `d`: the whole answer (in ZooKeeper mode
    moverd adds the request's id, `request_id`)."""
    return raw_call(d.port, ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]})
