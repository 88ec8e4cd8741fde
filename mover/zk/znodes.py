"""The znodes a ZooKeeper-era Kafka cluster shares, in Kafka 2.x's exact formats (its kafka.zk.ZkData), plus the
status tree of KIP-179. Pure functions: paths, encoders, decoders. docs/zookeeper.md describes every format.

Kafka writes JSON with Jackson: compact (no spaces), keys in the order its maps hold them. The encoders here emit the
same bytes for the same content, so a znode written by moverd and one written by Kafka's tools look alike.
Decoders are strict: anything that is not the documented shape raises ZnodeFormatError with a one-line reason, which
the caller reports in the status instead of failing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mover.config.broker import Listener
from mover.config.security import PLAINTEXT
from mover.storage.names import TopicPartition
from mover.wire.messages.log_dirs import ANY_LOG_DIR
from mover.zk import bounded_json

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CLUSTER_ID = "/cluster/id"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
REASSIGN_STATUS = "/admin/reassign_partitions_status"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
# The brokers elect one of them (kazoo's Lock recipe) to clean up finished reassignments and old status.
CLEANER_ELECTION = "/moverd/reassignment_cleaner"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default


class ZnodeFormatError(ValueError):
    """Znode data that is not in the documented format; the message says what is wrong, in one line."""


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _loads(data: bytes | None, what: str) -> Any:
    if not data:
        raise ZnodeFormatError(f"{what}: empty znode")
    try:
        return bounded_json.loads(data)
    except ValueError as e:  # also UnicodeDecodeError and a document nested too deep
        raise ZnodeFormatError(f"{what}: not JSON ({e})") from None


# ------------------------------------------------------------------------------------------ /brokers/ids/<id>


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def encode_broker(listeners: list[Listener], protocols: Mapping[str, str], *, rack: str | None, timestamp_ms: int,
                  jmx_port: int = -1) -> bytes:
    """Kafka's BrokerIdZNode version 4: the keys in the order Kafka's hash map writes them. `protocols` is the
    broker's listener name -> security protocol (BrokerConfig.listener_protocols); as in Kafka, the legacy
    `host`/`port` are those of the first listener whose protocol is PLAINTEXT, whatever its name."""
    plaintext = next((lst for lst in listeners if protocols[lst.name] == PLAINTEXT), None)
    value: dict[str, object] = {
        "listener_security_protocol_map": {lst.name: protocols[lst.name] for lst in listeners},
        "endpoints": [f"{lst.name}://{lst.host}:{lst.port}" for lst in listeners],
    }
    if rack is not None:
        value["rack"] = rack
    value.update({
        "jmx_port": jmx_port,
        "host": plaintext.host if plaintext else None,
        "timestamp": str(timestamp_ms),
        "port": plaintext.port if plaintext else -1,
        "version": 4,
    })
    return _dumps(value)


class NoEndpointError(ZnodeFormatError):
    """A registration without an endpoint of the security protocol the client speaks."""


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[str, ...]
    host: str | None
    port: int
    # listener_security_protocol_map (version 4+). Older registrations have none: a listener name is then its
    # protocol's name, Kafka's default map.
    protocols: Mapping[str, str] = field(default_factory=dict)

    def protocol_of(self, listener: str) -> str:
        return self.protocols.get(listener, listener)


def registration_address(reg: BrokerRegistration, protocol: str = PLAINTEXT) -> tuple[str, int]:
    """(host, port) of the broker's endpoint whose listener speaks `protocol` (the client's `security.protocol`),
    else, for PLAINTEXT, the legacy `host`/`port` (version 1 has nothing else; Kafka keeps them PLAINTEXT's).
    Raises NoEndpointError naming the broker and the protocols it offers, ZnodeFormatError for a malformed address.
    The one choice of endpoint for every tool that finds brokers through ZooKeeper (docs/zookeeper.md)."""
    offered: list[str] = []
    for endpoint in reg.endpoints:
        listener, sep, address = endpoint.partition("://")
        offers = reg.protocol_of(listener) if sep else None
        if offers == protocol:
            host, colon, port = address.rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ZnodeFormatError(f"broker {reg.broker_id}: endpoint {endpoint!r} is not LISTENER://HOST:PORT")
            return host.strip("[]"), int(port)
        if offers is not None and offers not in offered:
            offered.append(offers)
    legacy = bool(reg.host) and 0 < reg.port < 65536
    if protocol == PLAINTEXT and legacy and reg.host is not None:
        return reg.host, reg.port
    if legacy and PLAINTEXT not in offered:
        offered.append(PLAINTEXT)
    raise NoEndpointError(f"broker {reg.broker_id} has no {protocol} endpoint in its registration "
                          f"(it offers {', '.join(offered) or 'none'})")


def decode_broker(broker_id: int, data: bytes | None) -> BrokerRegistration:
    """Versions 1-5 of BrokerIdZNode (endpoints appeared in version 2, the protocol map in version 4; version 1 only
    has host and port)."""
    value = _loads(data, f"broker {broker_id}")
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"broker {broker_id}: not a JSON object")
    endpoints = value.get("endpoints") or []
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise ZnodeFormatError(f"broker {broker_id}: endpoints is not a list of strings")
    protocols = value.get("listener_security_protocol_map") or {}
    if not isinstance(protocols, dict) or not all(isinstance(v, str) for v in protocols.values()):
        raise ZnodeFormatError(f"broker {broker_id}: listener_security_protocol_map is not an object of strings")
    host, port = value.get("host"), value.get("port", -1)
    return BrokerRegistration(broker_id, tuple(endpoints), host if isinstance(host, str) else None,
                              port if isinstance(port, int) and not isinstance(port, bool) else -1, protocols)


# ------------------------------------------------------------------------------------------------- /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    value = _loads(data, "cluster id")
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        raise ZnodeFormatError("cluster id: no \"id\" string")
    return value["id"]


# ------------------------------------------------------------------------------------ /brokers/topics/<topic>


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def encode_topic(partitions: dict[int, list[int]]) -> bytes:
    return _dumps({"version": 1, "partitions": {str(p): ids for p, ids in sorted(partitions.items())}})


def decode_topic(topic: str, data: bytes | None) -> dict[int, list[int]]:
    value = _loads(data, f"topic {topic}")
    parts = value.get("partitions") if isinstance(value, dict) else None
    if not isinstance(parts, dict):
        raise ZnodeFormatError(f"topic {topic}: no \"partitions\" object")
    out: dict[int, list[int]] = {}
    for key, ids in parts.items():
        if not key.isdigit() or not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ZnodeFormatError(f"topic {topic}: partition {key!r} is not a list of broker ids")
        out[int(key)] = ids
    return out


# ----------------------------------------------------------------------------------- /admin/reassign_partitions


@dataclass(frozen=True)
class ReassignmentEntry:
    tp: TopicPartition
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...] | None  # None: written without log_dirs (Kafka's tool); every replica is "any"

    def log_dir_for(self, broker_id: int) -> str | None:
        """The log dir asked of this broker ("any" = wherever it is), or None when the entry does not name it."""
        if broker_id not in self.replicas:
            return None
        if self.log_dirs is None:
            return ANY_LOG_DIR
        return self.log_dirs[self.replicas.index(broker_id)]

    def to_json(self) -> dict[str, object]:
        value: dict[str, object] = {"topic": self.tp.topic, "partition": self.tp.partition,
                                    "replicas": list(self.replicas)}
        if self.log_dirs is not None:
            value["log_dirs"] = list(self.log_dirs)
        return value


@dataclass
class Reassignment:
    entries: list[ReassignmentEntry]
    # Entries that could not be read (wrong types, relative log dir...): their raw JSON and why.
    errors: list[tuple[object, str]]


def encode_reassignment(entries: list[ReassignmentEntry]) -> bytes:
    """As Kafka 2.x's ReassignPartitionsZNode, with KIP-113's log_dirs when an entry has them."""
    return _dumps({"version": 1, "partitions": [e.to_json() for e in entries]})


def decode_reassignment(data: bytes | None) -> Reassignment:
    """Raises ZnodeFormatError when the whole znode is unreadable; a bad entry goes to `errors`, the rest is used."""
    value = _loads(data, "reassignment")
    parts = value.get("partitions") if isinstance(value, dict) else None
    if not isinstance(parts, list):
        raise ZnodeFormatError("reassignment: no \"partitions\" list")
    out = Reassignment([], [])
    for raw in parts:
        try:
            out.entries.append(_entry(raw))
        except ZnodeFormatError as e:
            out.errors.append((raw, str(e)))
    return out


def _entry(raw: object) -> ReassignmentEntry:
    if not isinstance(raw, dict):
        raise ZnodeFormatError("entry is not a JSON object")
    topic, partition, replicas = raw.get("topic"), raw.get("partition"), raw.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise ZnodeFormatError("\"topic\" is not a non-empty string")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ZnodeFormatError(f"{topic}: \"partition\" is not a non-negative integer")
    if not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
        raise ZnodeFormatError(f"{topic}-{partition}: \"replicas\" is not a list of broker ids")
    if len(set(replicas)) != len(replicas):
        raise ZnodeFormatError(f"{topic}-{partition}: \"replicas\" names a broker twice")
    dirs = raw.get("log_dirs")
    if dirs is not None:
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise ZnodeFormatError(f"{topic}-{partition}: \"log_dirs\" is not a list of strings")
        if len(dirs) != len(replicas):
            raise ZnodeFormatError(f"{topic}-{partition}: {len(dirs)} log_dirs for {len(replicas)} replicas")
        for d in dirs:
            # KIP-113: "any", or an absolute path.
            if d != ANY_LOG_DIR and not os.path.isabs(d):
                raise ZnodeFormatError(f"{topic}-{partition}: log dir {d!r} is neither \"any\" nor absolute")
    return ReassignmentEntry(TopicPartition(topic, partition), tuple(replicas),
                             tuple(dirs) if dirs is not None else None)


# ------------------------------------------------------------------------------ /config/brokers, /config/changes


def config_path(entity: str) -> str:
    return f"{CONFIG_BROKERS}/{entity}"


def encode_config(config: dict[str, str]) -> bytes:
    """Kafka's ConfigEntityZNode: {"version":1,"config":{...}}."""
    return _dumps({"version": 1, "config": config})


def decode_config(entity: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    value = _loads(data, f"config of {entity}")
    config = value.get("config") if isinstance(value, dict) else None
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZnodeFormatError(f"config of {entity}: no \"config\" object of strings")
    return config


def encode_config_change(entity_path: str) -> bytes:
    """Kafka's ConfigEntityChangeNotificationSequenceZNode, version 2: {"version":2,"entity_path":"brokers/0"}."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a notification: version 2 (entity_path) or version 1 (entity_type/name)."""
    value = _loads(data, "config change")
    if not isinstance(value, dict):
        raise ZnodeFormatError("config change: not a JSON object")
    if value.get("version") == 2 and isinstance(value.get("entity_path"), str):
        entity_type, _, name = value["entity_path"].partition("/")
        return entity_type, name
    if value.get("version") == 1 and isinstance(value.get("entity_type"), str) \
            and isinstance(value.get("entity_name"), str):
        return value["entity_type"], value["entity_name"]
    raise ZnodeFormatError(f"config change: unknown format {value!r}")


# -------------------------------------------------------------------- /admin/reassign_partitions_status (ours)


def status_path(request_id: int) -> str:
    return f"{REASSIGN_STATUS}/{request_id}"


def broker_status_path(request_id: int, broker_id: int) -> str:
    return f"{REASSIGN_STATUS}/{request_id}/{broker_id}"


def encode_json(value: object) -> bytes:
    return _dumps(value)


def decode_json_object(data: bytes | None, what: str) -> dict[str, Any]:
    value = _loads(data, what)
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"{what}: not a JSON object")
    return value
